"""The inbox: a person's notifications, one of them with the run as it is now, and
acknowledging it.

Invariants kept here (DESIGN §2):

- 6: acknowledging closes the notification, which cancels its pending deliveries on every
  channel in the same transaction.
- 8: a recipient who lost access keeps only the pointer (id, the run's id, state and
  version) — no reason, no request, no details; "could still act" says "access lost".
- 10: reading is not deciding: nothing here answers a request.
- Tenant isolation and privacy: a person sees only their own notifications; another's
  id answers 404.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from sqlalchemy.engine import Connection

from runbell import metrics
from runbell.domain.errors import NotFound
from runbell.domain.principal import Principal
from runbell.domain.records import InputRequest, Notification, Run
from runbell.flows import digests, views
from runbell.flows.attention import close_notification
from runbell.flows.context import Core
from runbell.flows.digests import DigestView
from runbell.flows.idempotency import Answer, IdempotencyKey, act_once
from runbell.flows.input_requests import get_for_notification
from runbell.store import accounts, runs
from runbell.store import notifications as notes
from runbell.store.db import Tx


def own_note(conn: Connection, who: Principal, notification_id: str) -> Notification:
    note = notes.get(conn, who.tenant_id, notification_id)
    if who.is_user and note["recipient_user_id"] != who.user_id:
        raise NotFound(f"no notification {notification_id!r}")
    return note


class NotificationPage(TypedDict):
    notifications: list[views.NotificationView]
    next_cursor: str | None


class NotificationDetail(views.NotificationView):
    """``GET /v1/notifications/{id}``: the notification with the run as it is now (only
    its id, state and version once the recipient may no longer see it) and whether it
    can still be acted on."""

    actionable: bool
    actionable_reason: str
    run: views.RunView | views.RunBrief | None
    input_request: NotRequired[views.InputRequestView]
    digest: NotRequired[DigestView]


def list_notifications(
    core: Core, who: Principal, *, states: list[str] | None, before: str | None, limit: int
) -> NotificationPage:
    assert who.user_id is not None
    with core.db.read() as conn:
        rows = notes.list_for_recipient(
            conn, who.tenant_id, who.user_id, states=states, before=before, limit=limit + 1
        )
    page = rows[:limit]
    return {
        "notifications": [views.notification_view(n) for n in page],
        "next_cursor": page[-1]["id"] if len(rows) > limit else None,
    }


def get_notification(
    core: Core, who: Principal, notification_id: str, *, via: str = "api"
) -> NotificationDetail:
    """The notification with the run as it is now and whether it is still actionable.

    ``via`` names the door for the stale-open metric: ``api`` (``GET
    /v1/notifications/{id}``) or ``deep_link`` (``/n/{id}`` in a browser). Opening a
    closed notification, or a request that can no longer be answered, is a stale open."""
    with core.db.read() as conn:
        note = own_note(conn, who, notification_id)
        if digests.is_digest(note):
            # No run behind it: its items are the runs, each a link (the viewer's access).
            ok, why = views.actionable(note, None, core.db.clock())
            return {
                **views.notification_view(note),  # type: ignore[typeddict-item]  # (as below)
                "actionable": ok,
                "actionable_reason": why,
                "run": None,
                "digest": digests.digest_view(conn, who, note),
            }
        run = runs.require_run(conn, who.tenant_id, note["run_id"])
        can_see = runs.can_see_run(conn, who, note["run_id"])
        request = get_for_notification(conn, note)
    ok, why = actionable(core, note, run, request, can_see)
    if note["state"] != "open" or (note["attention_type"] == "input_required" and not ok):
        metrics.STALE_OPENS.labels(note["attention_type"], via).inc()
    if not can_see:
        # The pointer stays; what it pointed at does not (invariant 8): only the run's
        # id, state and version, no reason, no request.
        # (A NotificationView has neither optional key; mypy's extra check cannot know.)
        return {
            **views.notification_view(note),  # type: ignore[typeddict-item]
            "actionable": False,
            "actionable_reason": why,
            "reason": None,
            "run": {"run_id": run.run_id, "state": run.state, "version": run.version},
        }
    out: NotificationDetail = {
        **views.notification_view(note),  # type: ignore[typeddict-item]  # (as above)
        "actionable": ok,
        "actionable_reason": why,
        "run": views.run_view(run, include_details=True),
    }
    if request is not None:
        out["input_request"] = views.input_request_view(request, include_details=True)
    return out


def actionable(
    core: Core,
    note: Notification,
    run: Run | None,
    request: InputRequest | None,
    recipient_sees_run: bool,
) -> tuple[bool, str]:
    """Whether the recipient can still act on ``note``, and why (not): the one answer
    the recipient's own view and the admin's trail both give."""
    ok, why = views.actionable(note, run, core.db.clock(), request)
    if not recipient_sees_run:
        return False, "access lost"
    return ok, why


def recipient_sees_run(conn: Connection, note: Notification) -> bool:
    """The recipient's access now, as the dispatcher checks it: a current member who
    may see the run (whoever is asking)."""
    tenant_id, user_id = note["tenant_id"], note["recipient_user_id"]
    role = accounts.membership_role(conn, tenant_id, user_id)
    if digests.is_digest(note):
        return role is not None  # a digest names no run of its own; its items are checked
    recipient = Principal(tenant_id=tenant_id, kind="user", role=role or "", user_id=user_id)
    return role is not None and runs.can_see_run(conn, recipient, note["run_id"])


def acknowledge(
    core: Core, who: Principal, notification_id: str, key: IdempotencyKey | None = None
) -> Answer:
    """Close the notification as acknowledged and cancel everything still queued for it
    (200, the notification). Acknowledging it again changes nothing."""

    def act(tx: Tx) -> tuple[int, views.NotificationView]:
        return 200, acknowledge_in(core, tx, who, notification_id)

    return act_once(core.db, core.box, key, lambda: act)


def acknowledge_in(
    core: Core, tx: Tx, who: Principal, notification_id: str
) -> views.NotificationView:
    """Acknowledge inside ``tx`` (an Idempotency-Key record commits with it)."""
    note = own_note(tx.conn, who, notification_id)
    if close_notification(tx, note, "acknowledged", f"acknowledged by {who.user_id or who.key_id}"):
        notes.mark_seen(tx.conn, who.tenant_id, notification_id, tx.now)
        waited = (tx.now - note["created_at"]).total_seconds()
        kind = note["attention_type"]
        tx.after_commit.append(lambda: metrics.ACK_SECONDS.labels(kind).observe(waited))
        note = notes.get(tx.conn, who.tenant_id, notification_id)
    return views.notification_view(note)
