"""Retention: pruning history tables in bounded batches, each its own short transaction,
by the scheduler's leader (and by ``runbell prune``); a tenant's overrides.

Invariants kept here (DESIGN §2):

- 17: the feed is pruned as a prefix of each tenant's sequence, moving
  ``feed_pruned_through`` in the same transaction, so a cursor older than what is kept
  answers 410 with a snapshot (``flows.feed``), never a silent gap.
- 1 and 9 (nothing doubled): inbound event ids and Idempotency-Key records are kept at
  least ``domain.retention.DEDUPE_FLOOR_DAYS``, so a retry within the documented window
  is still answered as a duplicate; run rows (and so their versions) are never pruned.
- 3, 6, 9, 12 (nothing live lost): an open notification and what it points at, a
  delivery that may still be sent, a pending input request's notifications, the
  transitions of a run that is not terminal, an open mismatch are never pruned
  (``store.retention.eligible`` holds the guards).
- Tenant isolation: every prune statement names one tenant and uses that tenant's periods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog

from runbell.config import Settings
from runbell.domain import retention as policy
from runbell.flows import auth_failures
from runbell.flows.context import Core
from runbell.store import kv
from runbell.store import push_actions as push_action_uses
from runbell.store import retention as store

log = structlog.get_logger(__name__)

LAST_RUN_KEY = "retention.last_run"


def defaults(settings: Settings) -> dict[str, timedelta]:
    """The process's period for every table (``docs/operations.md`` "Retention")."""
    days = {
        table: timedelta(days=getattr(settings, f"retention_{table}_days"))
        for table in policy.TABLES
        if hasattr(settings, f"retention_{table}_days")
    }
    inbound = timedelta(seconds=settings.inbound_retention_s)
    return {
        "feed_events": timedelta(seconds=settings.feed_retention_s),
        "inbound_events": inbound,
        "idempotency_keys": inbound,  # a replayable answer lives as long as signal dedupe
        **days,
    }


@dataclass
class PruneReport:
    """Rows pruned (or, for a dry run, prunable now) per table, and batches run."""

    dry_run: bool
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(policy.TABLES, 0))
    batches: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def run(
    core: Core,
    now: datetime,
    *,
    dry_run: bool = False,
    tenant_id: str | None = None,
    max_batches: int | None = None,
) -> PruneReport:
    """Prune every table of every tenant (or of one), oldest rows first, in batches of
    ``retention_batch`` rows, children before parents. ``max_batches`` bounds the
    batches per tenant and table (the scheduler's sweep stays short; the next one goes
    on); a dry run only counts what is prunable now (a parent whose children go in the
    same run is counted on the next one)."""
    report = PruneReport(dry_run=dry_run)
    limit = core.settings.retention_batch
    base = defaults(core.settings)
    with core.db.read() as conn:
        tenants = store.overrides(conn)
    if tenant_id is not None:
        tenants = {tenant_id: tenants.get(tenant_id, {})}
    for tid, override in tenants.items():
        cut = policy.cutoffs(policy.effective(base, override), now)
        for table in policy.TABLES:
            if table not in policy.GLOBAL_ONLY:
                _table(core, report, table, tid, cut[table], limit, max_batches)
    if tenant_id is None:
        for table in policy.GLOBAL_ONLY:
            _table(core, report, table, None, now - base[table], limit, max_batches)
    if report.total and not dry_run:
        log.info("retention.pruned", **{k: v for k, v in report.counts.items() if v})
    return report


def _table(
    core: Core,
    report: PruneReport,
    table: str,
    tenant_id: str | None,
    cutoff: datetime,
    limit: int,
    max_batches: int | None,
) -> None:
    if report.dry_run:
        with core.db.read() as conn:
            report.counts[table] += store.count_prunable(conn, table, tenant_id, cutoff)
        return
    batches = 0
    after: datetime | None = None
    while max_batches is None or batches < max_batches:
        with core.db.transaction() as tx:
            if table == "feed_events":
                assert tenant_id is not None
                deleted = store.prune_feed_batch(tx.conn, tenant_id, cutoff, limit)
                done = deleted < limit
            else:
                deleted, after = store.prune_batch(tx.conn, table, tenant_id, cutoff, limit, after)
                done = after is None
        batches += 1
        report.batches += 1
        report.counts[table] += deleted
        if done:
            return


def sweep(core: Core, now: datetime, max_batches: int = 50) -> int:
    """The scheduler's retention sweep: at most once per ``retention_interval_s`` across
    every process sharing the database (the leader records when it last ran), at most
    ``max_batches`` batches per tenant and table. Returns the rows pruned."""
    with core.db.read() as conn:
        last = kv.get(conn, LAST_RUN_KEY)
    if last is not None:
        since = (now - datetime.fromisoformat(last["at"])).total_seconds()
        if 0 <= since < core.settings.retention_interval_s:
            return 0
    with core.db.transaction() as tx:
        kv.put(tx.conn, LAST_RUN_KEY, {"at": now.isoformat()})
    pruned = run(core, now, max_batches=max_batches).total + auth_failures.prune(core, now)
    with core.db.transaction(now=now) as tx:
        # Uses of push-action tokens that have expired: refused anyway, so forgotten.
        pruned += push_action_uses.prune(tx.conn, now)
    return pruned


# --- a tenant's override --------------------------------------------------------------


def periods(core: Core, tenant_id: str) -> dict[str, tuple[int | float, str]]:
    """Each table's period for one tenant in days, and where it comes from
    (``tenant`` or ``default``)."""
    with core.db.read() as conn:
        override = store.override(conn, tenant_id)
    merged = policy.effective(defaults(core.settings), override)
    out: dict[str, tuple[int | float, str]] = {}
    for table in policy.TABLES:
        days = merged[table].total_seconds() / 86_400
        out[table] = (
            int(days) if days.is_integer() else round(days, 3),
            "tenant" if table in override else "default",
        )
    return out


def set_override(core: Core, tenant_id: str, change: Mapping[str, int | None]) -> dict[str, int]:
    """Apply ``{table: days}`` (``None`` clears one) to the tenant's override, checked
    (422 ``ValidationFailed`` naming the table); returns the stored override."""
    with core.db.transaction() as tx:
        current = store.override(tx.conn, tenant_id)
        merged = policy.merge(current, change)
        store.set_override(tx.conn, tenant_id, merged)
    log.info("retention.override_set", tenant_id=tenant_id, tables=sorted(change))
    return merged
