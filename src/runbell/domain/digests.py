"""Digests: attention collected per recipient and key, sent as one notification.

Pure (no clock, no I/O). A policy rule that decides ``digest`` names a key (default: the
attention type), a window and a maximum size. Windows are aligned to the epoch, so every
process computes the same window for the same moment and a digest's identity
(tenant, recipient, key, window start, part) is the same whoever flushes it — which is
what lets a unique constraint make a digest exactly once. ``part`` counts digests sent
early from one window because it reached its maximum size.

Urgent and time-sensitive attention never waits for a digest (:func:`never_waits`):
:meth:`runbell.domain.policy.Policy.decide` turns such a decision into a push.

Example::

    start, end = window_of(datetime(2026, 12, 1, 10, 42, tzinfo=UTC), 3600)
    assert (start.hour, end.hour) == (10, 11)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from runbell.domain import limits
from runbell.domain.errors import ValidationFailed

DEFAULT_WINDOW_S = 3600
DEFAULT_MAX_ITEMS = 50
MAX_ITEMS_LIMIT = 500
MAX_WINDOW_S = 7 * 24 * 3600
# A digest notification's run id: a namespace no run page serves (a digest is known by its
# attention type ``digest``, never by this prefix alone).
RUN_PREFIX = "digest:"
# fullmatch: a "$" anchor would admit a final "\n"
_KEY = re.compile(rf"[A-Za-z0-9_.:-]{{1,{limits.DIGEST_KEY}}}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Urgencies that are sent at once even when a rule says digest.
IMMEDIATE = frozenset({"time_sensitive", "urgent"})
_RANK = {"low": 0, "normal": 1, "time_sensitive": 2, "urgent": 3}


def never_waits(urgency: str | None) -> bool:
    return urgency in IMMEDIATE


def check_rule(rule_id: str, key: object, window_s: int | None, max_items: int | None) -> None:
    """A rule's digest settings, validated (the policy raises before anything is stored)."""
    if key is not None and (not isinstance(key, str) or not _KEY.fullmatch(key)):
        raise ValidationFailed(
            f"rule {rule_id!r}: digest_key must be 1-100 letters, digits or _ . : -",
            field="digest_key",
        )
    if window_s is not None and not 1 <= window_s <= MAX_WINDOW_S:
        raise ValidationFailed(
            f"rule {rule_id!r}: digest_window_s must be between 1 and {MAX_WINDOW_S}",
            field="digest_window_s",
        )
    if max_items is not None and not 1 <= max_items <= MAX_ITEMS_LIMIT:
        raise ValidationFailed(
            f"rule {rule_id!r}: digest_max_items must be between 1 and {MAX_ITEMS_LIMIT}",
            field="digest_max_items",
        )


def window_of(now: datetime, window_s: int) -> tuple[datetime, datetime]:
    """The epoch-aligned window ``[start, end)`` that holds ``now``."""
    seconds = int((now - _EPOCH).total_seconds())
    start = _EPOCH + timedelta(seconds=seconds - seconds % window_s)
    return start, start + timedelta(seconds=window_s)


def run_id_for(key: str) -> str:
    """The synthetic run id a digest notification carries (its unique key needs one)."""
    return RUN_PREFIX + key


def highest(urgencies: Sequence[str]) -> str:
    """The digest's urgency: the highest of its items' (they are low or normal)."""
    return max(urgencies, key=lambda u: _RANK.get(u, 0), default="low")


def summary(attention_types: Sequence[str]) -> str:
    """A neutral, lock-screen safe summary: how many, never which."""
    n = len(attention_types)
    if n and all(a == "completed" for a in attention_types):
        return f"{n} runs finished" if n != 1 else "1 run finished"
    return f"{n} updates on your runs" if n != 1 else "1 update on your runs"


def body(attention_types: Sequence[str]) -> str:
    """The neutral body channels send: the summary and where to look."""
    return f"{summary(attention_types)}. Open Runbell to see them."
