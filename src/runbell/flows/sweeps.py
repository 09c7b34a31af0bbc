"""Time-driven sweeps the scheduler runs: notification expiry and retention.

(Input-request expiry lives with input requests, mismatch re-checks with reconciliation;
``runbell.dispatch.scheduler`` runs them all, one leader per sweep.)

Invariants kept here (DESIGN §2): 6 — an expired notification closes, cancelling what it
still had queued on every channel; 17 — the feed is pruned by age only, so a cursor
older than what is kept gets an explicit 410 with a snapshot, never a silent gap.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from runbell.flows.attention import close_notification
from runbell.flows.context import Runbell
from runbell.store import accounts, feed, idempotency, runs
from runbell.store import notifications as notes


def expire_notifications(rb: Runbell, now: datetime, limit: int = 500) -> int:
    """Close open notifications past their expiry (and cancel what they had queued)."""
    with rb.db.read() as conn:
        due = notes.due_for_expiry(conn, now, limit)
    for note in due:
        with rb.db.transaction(now=now) as tx:
            close_notification(tx, note, "expired", "expired before anyone acted")
    return len(due)


def prune(rb: Runbell, now: datetime) -> int:
    """Drop feed events, inbound-event dedupe rows and Idempotency-Key records past their
    retention; returns how many feed events went."""
    cutoff = now - timedelta(seconds=rb.settings.feed_retention_s)
    total = 0
    with rb.db.read() as conn:
        tenant_ids = accounts.tenant_ids(conn)
    for tenant_id in tenant_ids:
        with rb.db.transaction(now=now) as tx:
            total += feed.prune(tx.conn, tenant_id, cutoff)
    with rb.db.transaction(now=now) as tx:
        before = now - timedelta(seconds=rb.settings.inbound_retention_s)
        runs.prune_inbound(tx.conn, before)
        idempotency.prune(tx.conn, before)  # same retention as signal dedupe
    return total
