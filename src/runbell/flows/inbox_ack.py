"""Acknowledging one of a person's notifications inside a transaction, and with a digest
everything it folds: the one step the single acknowledgement (``flows.inbox``) and the
group's (``flows.inbox_bulk``) share.

Invariants kept here (DESIGN §2):

- 6: each notification closed here cancels its pending deliveries and escalation steps on
  every channel, in the caller's transaction (``flows.attention.close_notification``).
- Privacy: only the person's own notifications are closed; a digest folds only its own
  recipient's items (a digest is per recipient), and each is checked again.
"""

from __future__ import annotations

from runbell import metrics
from runbell.domain.principal import Principal
from runbell.domain.records import Notification
from runbell.flows import digests
from runbell.flows.attention import close_notification
from runbell.store import inbox as inbox_store
from runbell.store import notifications as notes
from runbell.store.db import Tx


def acknowledged_by(who: Principal) -> str:
    return f"acknowledged by {who.user_id or who.key_id}"


def close_one(tx: Tx, who: Principal, note: Notification, reason: str) -> bool:
    """Close ``note`` as acknowledged (False: it was closed already)."""
    if not close_notification(tx, note, "acknowledged", reason):
        return False
    notes.mark_seen(tx.conn, note["tenant_id"], note["id"], tx.now)
    waited = (tx.now - note["created_at"]).total_seconds()
    kind = note["attention_type"]
    tx.after_commit.append(lambda: metrics.ACK_SECONDS.labels(kind).observe(waited))
    return True


def close_folded(tx: Tx, who: Principal, digest: Notification) -> list[str]:
    """Acknowledge the open notifications ``digest`` folds; returns their ids."""
    if not digests.is_digest(digest):
        return []
    members = inbox_store.folded_by(tx.conn, digest["tenant_id"], [digest["id"]])[digest["id"]]
    closed = []
    reason = f"{acknowledged_by(who)} with digest {digest['id']}"
    for note in notes.get_many(tx.conn, digest["tenant_id"], members):
        if note["recipient_user_id"] != digest["recipient_user_id"] or note["state"] != "open":
            continue
        if close_one(tx, who, note, reason):
            closed.append(note["id"])
    return closed
