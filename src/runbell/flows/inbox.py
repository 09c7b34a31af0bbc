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

from typing import NotRequired, TypedDict, cast

from sqlalchemy.engine import Connection

from runbell import metrics
from runbell.domain.errors import NotFound
from runbell.domain.inbox import InboxFilter
from runbell.domain.principal import Principal
from runbell.domain.records import InputRequest, Notification, Run
from runbell.flows import digests, inbox_ack, views
from runbell.flows.context import Core
from runbell.flows.digests import DigestView
from runbell.flows.idempotency import Answer, IdempotencyKey, act_once
from runbell.flows.input_requests import get_for_notification
from runbell.store import accounts, runs
from runbell.store import inbox as inbox_store
from runbell.store import notifications as notes
from runbell.store.db import Tx


def own_note(conn: Connection, who: Principal, notification_id: str) -> Notification:
    note = notes.get(conn, who.tenant_id, notification_id)
    if who.is_user and note["recipient_user_id"] != who.user_id:
        raise NotFound(f"no notification {notification_id!r}")
    return note


class Listed(views.NotificationView):
    """A notification as ``GET /v1/notifications`` lists it; with ``fold``, a digest also
    says how many notifications it folds and how many of them are still open."""

    folded: NotRequired[int]
    folded_open: NotRequired[int]


class NotificationPage(TypedDict):
    notifications: list[Listed]
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
    core: Core,
    who: Principal,
    *,
    states: list[str] | None,
    before: str | None,
    limit: int,
    only: InboxFilter | None = None,
    fold: bool = False,
) -> NotificationPage:
    """A page of the person's notifications, newest first; ``only`` narrows it (a filter,
    a run, a subject: see ``domain.inbox``), ``fold`` hides what an open digest folds and
    says on each digest how many it folds (``folded``, ``folded_open``)."""
    assert who.user_id is not None
    only = only or InboxFilter()
    with core.db.read() as conn:
        rows = inbox_store.select(
            conn,
            who.tenant_id,
            who.user_id,
            states=states,
            types=only.types(),
            run_id=only.run_id,
            subject_type=only.subject_type,
            subject_id=only.subject_id,
            before=before,
            fold=fold,
            limit=limit + 1,
        )
        page = rows[:limit]
        if only.by_subject:
            # A run the person may no longer see does not say which subject it was of.
            seen = runs.visible_among(conn, who, {n["run_id"] for n in page})
            page = [n for n in page if n["run_id"] in seen]
        # (the digest counts are added below, when folding)
        listed = [cast(Listed, views.notification_view(n)) for n in page]
        if fold:
            _fold_counts(conn, who, listed)
    return {
        "notifications": listed,
        "next_cursor": rows[limit - 1]["id"] if len(rows) > limit else None,
    }


def _fold_counts(conn: Connection, who: Principal, listed: list[Listed]) -> None:
    ids = [n["id"] for n in listed if n["attention_type"] == "digest"]
    members = inbox_store.folded_by(conn, who.tenant_id, ids)
    states = {
        m["id"]: m["state"]
        for m in notes.get_many(conn, who.tenant_id, [i for v in members.values() for i in v])
    }
    for n in listed:
        if n["id"] in members:
            folded = members[n["id"]]
            n["folded"] = len(folded)
            n["folded_open"] = sum(states.get(i) == "open" for i in folded)


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
    """Acknowledge inside ``tx`` (an Idempotency-Key record commits with it); a digest
    acknowledges the notifications it folds with it."""
    note = own_note(tx.conn, who, notification_id)
    if inbox_ack.close_one(tx, who, note, inbox_ack.acknowledged_by(who)):
        # A digest folds its items: acknowledging it acknowledges them, in this transaction.
        inbox_ack.close_folded(tx, who, note)
        note = notes.get(tx.conn, who.tenant_id, notification_id)
    return views.notification_view(note)
