"""Time-driven sweeps the scheduler runs: notification expiry (retention, the other
sweep here once, now lives in ``flows.retention``).

(Input-request expiry lives with input requests, mismatch re-checks with reconciliation;
``runbell.dispatch.scheduler`` runs them all, one leader per sweep.)

Invariants kept here (DESIGN §2): 6 — an expired notification closes, cancelling what it
still had queued on every channel; 17 — kept by ``flows.retention``, which :func:`prune`
calls.
"""

from __future__ import annotations

from datetime import datetime

from runbell.flows import retention
from runbell.flows.attention import close_notification
from runbell.flows.context import Core
from runbell.store import notifications as notes


def expire_notifications(core: Core, now: datetime, limit: int = 500) -> int:
    """Close open notifications past their expiry (and cancel what they had queued)."""
    with core.db.read() as conn:
        due = notes.due_for_expiry(conn, now, limit)
    for note in due:
        with core.db.transaction(now=now) as tx:
            close_notification(tx, note, "expired", "expired before anyone acted")
    return len(due)


def prune(core: Core, now: datetime) -> int:
    """Prune every table past its retention now (``flows.retention.run``); returns how
    many feed events went."""
    return retention.run(core, now).counts["feed_events"]
