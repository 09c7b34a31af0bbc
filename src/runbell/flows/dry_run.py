"""The policy dry-run: what a candidate policy would have decided over the tenant's
recorded transitions, side by side with what was decided (``POST /v1/policy/dry-run``).

Reads only, in bounded batches, up to a cap it reports; the replay itself is the pure
``domain.dry_run.replay``. Nothing is sent, nothing is written (DESIGN §2 inv. 7 holds
trivially: no delivery exists).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from runbell.domain.dry_run import LIMITS, Recorded, ReplayCounts, replay
from runbell.domain.errors import ValidationFailed
from runbell.domain.policy import Policy, TenantPolicy
from runbell.flows.context import Core
from runbell.flows.views import iso
from runbell.store import history

DEFAULT_WINDOW = timedelta(days=7)
MAX_WINDOW = timedelta(days=92)
MAX_TRANSITIONS = 10_000
BATCH = 500


class DryRun(ReplayCounts):
    """``POST /v1/policy/dry-run``: the window replayed and what the candidate changes."""

    since: str | None
    until: str | None
    read: int
    cap: int
    capped: bool
    capped_note: str | None
    current_is: str
    limits: str  # what a replay cannot know


def dry_run(
    core: Core,
    tenant_id: str,
    doc: TenantPolicy,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = MAX_TRANSITIONS,
) -> DryRun:
    """Replay ``[since, until)`` (default: the last 7 days) through the candidate ``doc``
    (the ``PUT /v1/policy`` document; validated the same way, 422 when bad)."""
    candidate = Policy.from_mapping(doc, base=Policy.default())
    until = until or core.db.clock()
    since = since or until - DEFAULT_WINDOW
    if since >= until:
        raise ValidationFailed("since must be before until", field="since")
    if until - since > MAX_WINDOW:
        raise ValidationFailed("the window may span at most 92 days", field="since")
    limit = max(1, min(limit, MAX_TRANSITIONS))
    rows = list(_recorded(core, tenant_id, since, until, limit + 1))
    capped = len(rows) > limit
    report = replay(candidate, rows[:limit])
    return {
        "since": iso(since),
        "until": iso(until),
        "read": min(len(rows), limit),
        "cap": limit,
        "capped": capped,
        "capped_note": (
            f"only the oldest {limit} transitions of the window were replayed" if capped else None
        ),
        "current_is": "the decision recorded on each transition when it happened",
        **report.as_dict(),
        "limits": LIMITS,
    }


def _recorded(
    core: Core, tenant_id: str, since: datetime, until: datetime, most: int
) -> Iterator[Recorded]:
    after: tuple[datetime, str, int] | None = None
    left = most
    while left > 0:
        with core.db.read() as conn:  # a short read per batch, never one long transaction
            batch = history.transitions_between(
                conn, tenant_id, since, until, after=after, limit=min(BATCH, left)
            )
        for row in batch:
            yield Recorded(row["run_id"], row["version"], row["at"], row["decision"])
        if len(batch) < min(BATCH, left):
            return
        left -= len(batch)
        last = batch[-1]
        after = (last["at"], last["run_id"], last["version"])
