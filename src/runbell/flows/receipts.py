"""Receipts: what a person's device did with a notification (displayed, opened,
dismissed, clicked).

Invariants kept here (DESIGN §2): 10 — a receipt is telemetry, stored apart from
decisions: opening is not approval, dismissing is not rejection; ``opened`` and
``clicked`` only set the notification's ``first_seen_at``. Only the recipient's own
device may report one (another's notification answers 404).
"""

from __future__ import annotations

from runbell import metrics
from runbell.domain.channels import RECEIPT_CHANNELS
from runbell.domain.errors import Forbidden, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import Notification, Receipt
from runbell.flows import views
from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey, act_once
from runbell.ids import new_id
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store.db import Tx

RECEIPT_KINDS = ("displayed", "opened", "dismissed", "clicked")
__all__ = ["RECEIPT_CHANNELS", "RECEIPT_KINDS", "check_receipt", "receipt_in", "record_receipt"]


def record_receipt(
    core: Core,
    who: Principal,
    notification_id: str,
    kind: str,
    channel: str | None = None,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Store what a device did with a notification (201, the receipt). Never a decision
    (invariant 10): opening is not approval, dismissing is not rejection. ``opened`` and
    ``clicked`` set the notification's ``first_seen_at``; nothing else changes."""

    def prepare() -> Act:
        check_receipt(who, kind, channel)
        return lambda tx: (201, receipt_in(tx, who, notification_id, kind, channel))

    return act_once(core.db, core.box, key, prepare)


def check_receipt(who: Principal, kind: str, channel: str | None) -> None:
    """What a receipt must be before anything is written (422, or 403 for an API key)."""
    if kind not in RECEIPT_KINDS:
        raise ValidationFailed(f"kind must be one of {', '.join(RECEIPT_KINDS)}", field="kind")
    if channel is not None and channel not in RECEIPT_CHANNELS:
        raise ValidationFailed(
            f"channel must be one of {', '.join(RECEIPT_CHANNELS)}", field="channel"
        )
    if not who.is_user:
        raise Forbidden("receipts come from a person's device: send a user token")


def receipt_in(
    tx: Tx, who: Principal, notification_id: str, kind: str, channel: str | None
) -> views.ReceiptView:
    """Store a checked receipt inside ``tx`` (the API's Idempotency-Key commits with it)."""
    note = notes.get(tx.conn, who.tenant_id, notification_id)
    if note["recipient_user_id"] != who.user_id:
        raise NotFound(f"no notification {notification_id!r}")
    values: Receipt = {
        "id": new_id("rct"),
        "tenant_id": who.tenant_id,
        "notification_id": notification_id,
        "user_id": who.user_id,
        "kind": kind,
        "channel": channel,
        "at": tx.now,
    }
    requests.add_receipt(tx.conn, values)
    if kind in ("opened", "clicked"):
        notes.mark_seen(tx.conn, who.tenant_id, notification_id, tx.now)
    _count(tx, note, kind, channel)
    return views.receipt_view(values)


def _count(tx: Tx, note: Notification, kind: str, channel: str | None) -> None:
    """The receipt's metrics, after commit: a ``displayed`` one is a delivery the device
    confirmed; ``opened``/``clicked`` an open, and a stale open when the notification had
    closed already. A receipt without a channel (the web deep link records one) is not
    counted as a stale open here: the deep link counts its own (``via="deep_link"``)."""
    attention = note["attention_type"]
    label = channel or "unknown"
    if kind == "displayed":
        tx.after_commit.append(metrics.DISPLAYED.labels(attention, label).inc)
    elif kind in ("opened", "clicked"):
        tx.after_commit.append(metrics.OPENS.labels(attention, label, kind).inc)
        if channel is not None and note["state"] != "open":
            tx.after_commit.append(metrics.STALE_OPENS.labels(attention, channel).inc)
