"""Acting from a web push notification: the actions a push offers, and what using one does.

:func:`offer` runs when a web push is built (``flows.delivery_prepare``): the buttons
(``domain.push_actions.offered``) and the single-use token they carry, made
deterministically from the delivery and what it binds, so a retried send carries the
same token (nothing is stored when a token is made; DESIGN §2 inv. 12 is untouched: the
token adds no write to delivery).

:func:`act` is ``POST /v1/push-actions``: the token is the whole credential (the service
worker has no session). It checks the token (401 not ours, 410 expired), the action
(422 unknown, 403 Approve/Reject that were not offered), the notification (404: gone,
another tenant's, or its recipient no longer a member), then records the use by the
token's hash (409 once used) and acts as the recipient:

- ``acknowledge``: the inbox's acknowledgement (``flows.inbox.acknowledge_in``, inv. 6),
  in the same transaction as the use;
- ``snooze``: a snooze rung on the notification's escalation ladder, due after the rule's
  ``snooze_s`` (default an hour): the escalation sweep pushes it again then, unless it was
  handled meanwhile (any close cancels the rung); the trail says "snoozed until …";
- ``approve`` / ``reject``: the web form's answer (``flows.answers.answer``) with the
  versions the token was bound to and an Idempotency-Key made from the token, so every
  check of an answer applies (inv. 9). A refused answer (a newer request, the run moved,
  expired, already answered: 409) also queues a push that replaces what this browser
  shows with the current state: the newer notification, or the neutral "handled" one.

A use is recorded before an answer is attempted, in its own transaction: a crash between
the two leaves the token used and nothing answered (the person opens Runbell), never an
answer given twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TypedDict

import structlog
from sqlalchemy.engine import Connection

from runbell.domain import push_actions as pa
from runbell.domain.errors import (
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    Unauthorized,
    ValidationFailed,
)
from runbell.domain.escalation import RETRACTED
from runbell.domain.principal import Principal
from runbell.domain.records import Delivery, Notification, Run
from runbell.flows import answers, inbox, views
from runbell.flows.context import Core
from runbell.flows.input_requests import get_for_notification
from runbell.flows.inputs import AnswerBody
from runbell.flows.policy import policy_for
from runbell.ids import token_hash
from runbell.store import accounts, escalations, outbox
from runbell.store import notifications as notes
from runbell.store import push_actions as uses
from runbell.store.db import Tx

log = structlog.get_logger(__name__)

#: The event type of a delivery that pushes a notification again (a snooze's re-push, or
#: a refused action's replacement): ``payload`` names the notification.
REPUSHED = pa.REPUSHED
SNOOZE = "snooze"  # escalation_steps.purpose of a snooze rung
WEBPUSH = "webpush"


class ActionResult(TypedDict):
    """What ``POST /v1/push-actions`` answers."""

    action: str
    notification_id: str
    state: str  # the notification's state after the action
    snoozed_until: str | None
    decision: str | None  # approve | reject, for an answer


def _key(core: Core) -> bytes:
    return core.box.derive(pa.KEY_PURPOSE)


def offer(
    core: Core,
    conn: Connection,
    note: Notification,
    run: Run | None,
    row: Delivery,
) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """The buttons and token of one web push of ``note`` (none once the token would be
    expired already). Deterministic for a delivery: its retries send the same token."""
    if run is None:  # a digest: nothing to act on from the lock screen
        return (), None
    expires = row["created_at"] + timedelta(seconds=pa.TOKEN_TTL_S)
    if note["expires_at"] is not None:
        expires = min(expires, note["expires_at"])
    rule = policy_for(core, conn, note["tenant_id"]).rule(note["rule_id"])
    snooze_s = (rule.snooze_s if rule is not None else None) or pa.DEFAULT_SNOOZE_S
    request = get_for_notification(conn, note)
    answerable = False
    if (
        request is not None
        and request.kind == "approval"
        and request.purpose == "run"
        and request.state == "pending"
    ):
        answerable = pa.lock_screen_answerable(
            rule is not None and rule.lock_screen_answers,
            [str(r.get("code")) for r in request.risks or []],  # flagged in its action
        )
    claims = pa.Claims(
        tenant_id=note["tenant_id"],
        delivery_id=row["id"],
        notification_id=note["id"],
        recipient=note["recipient_user_id"],
        destination=row["destination"],
        expires_at=int(expires.timestamp()),
        request_id=request.id if request is not None else None,
        run_version=run.version,
        request_version=request.version if request is not None else None,
        answers=answerable,
        snooze_s=snooze_s,
    )
    buttons = tuple((b["action"], b["title"]) for b in pa.offered(answerable, snooze_s))
    return buttons, pa.sign(claims, _key(core))


def act(core: Core, token: str, action: str) -> ActionResult:
    """Use a push action's token once (see the module docstring for every refusal)."""
    if action not in pa.ACTIONS:
        raise ValidationFailed(
            f"action must be one of {', '.join(pa.ACTIONS)}, not {action!r}", field="action"
        )
    claims = pa.verify(token, _key(core))
    if claims is None:
        raise Unauthorized("this push action's token is not valid")
    now = core.db.clock()
    if pa.expired(claims, now.timestamp()):
        raise Gone("this push action has expired: open Runbell to act on the notification")
    if action in pa.ANSWERS and not claims.answers:
        raise Forbidden(
            "this notification cannot be answered from the notification: open Runbell to answer"
        )
    digest = token_hash(token)
    with core.db.transaction() as tx:
        note, who = _note_and_recipient(tx.conn, claims)
        if not uses.use(
            tx.conn,
            token_hash=digest,
            tenant_id=claims.tenant_id,
            notification_id=note["id"],
            action=action,
            now=tx.now,
            expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
        ):
            raise Conflict(
                "this push action was used already",
                current={"notification_id": note["id"], "state": note["state"]},
            )
        if action == pa.ACKNOWLEDGE:
            view = inbox.acknowledge_in(core, tx, who, note["id"])
            log.info("push_action.acknowledged", notification_id=note["id"])
            return _result(action, note["id"], view["state"])
        if action == pa.SNOOZE:
            return _snooze(tx, note, claims, digest)
    # approve | reject: the web form's answer, after the use is committed.
    return _answer(core, who, note, claims, action, digest)


def _note_and_recipient(conn: Connection, claims: pa.Claims) -> tuple[Notification, Principal]:
    note = notes.find(conn, claims.tenant_id, claims.notification_id)
    if note is None or note["recipient_user_id"] != claims.recipient:
        raise NotFound(f"no notification {claims.notification_id!r}")
    role = accounts.membership_role(conn, claims.tenant_id, claims.recipient)
    if role is None:  # left the tenant: the pointer opens nothing any more
        raise NotFound(f"no notification {claims.notification_id!r}")
    who = Principal(tenant_id=claims.tenant_id, kind="user", role=role, user_id=claims.recipient)
    return note, who


def _snooze(tx: Tx, note: Notification, claims: pa.Claims, digest: str) -> ActionResult:
    """A snooze rung: the escalation sweep pushes the notification again when it is due,
    unless a close cancelled it first."""
    if note["state"] != "open":
        raise Conflict(
            f"this notification is {note['state']} already: there is nothing to snooze",
            current={"notification_id": note["id"], "state": note["state"]},
        )
    until = tx.now + timedelta(seconds=claims.snooze_s)
    steps = escalations.for_notification(tx.conn, note["tenant_id"], note["id"])
    step_no = max((s["step_no"] for s in steps), default=0) + 1
    escalations.add_steps(
        tx.conn,
        note,
        [(step_no, WEBPUSH, claims.snooze_s, until)],
        purpose=SNOOZE,
        reason=f"snoozed until {_words(until)}",
    )
    log.info("push_action.snoozed", notification_id=note["id"], until=until.isoformat())
    return _result(pa.SNOOZE, note["id"], note["state"], snoozed_until=views.iso(until))


def _answer(
    core: Core,
    who: Principal,
    note: Notification,
    claims: pa.Claims,
    action: str,
    digest: str,
) -> ActionResult:
    assert claims.request_id is not None  # ``answers`` is only offered with a request
    assert claims.run_version is not None and claims.request_version is not None
    body: AnswerBody = {
        "decision": action,
        "expected_run_version": claims.run_version,
        "expected_request_version": claims.request_version,
    }
    try:
        answers.answer(
            core, who, claims.request_id, body, idempotency_key=f"push-action:{digest[:40]}"
        )
    except Conflict:
        replace_shown(core, claims, digest)
        raise
    log.info("push_action.answered", notification_id=note["id"], decision=action)
    with core.db.read() as conn:
        state = notes.get(conn, claims.tenant_id, note["id"])["state"]
    return _result(action, note["id"], state, decision=action)


def replace_shown(core: Core, claims: pa.Claims, digest: str) -> None:
    """After a refused answer: push the current state to the browser that acted, in
    place of what it shows (same tag): the recipient's newer open notification on the
    run when there is one, else the neutral "handled" text."""
    with core.db.transaction() as tx:
        note = notes.find(tx.conn, claims.tenant_id, claims.notification_id)
        if note is None:
            return
        newer = [
            n
            for n in notes.open_for_run(tx.conn, claims.tenant_id, note["run_id"])
            if n["recipient_user_id"] == claims.recipient and n["id"] != note["id"]
        ]
        row = outbox.delivery_row(
            claims.tenant_id, None, WEBPUSH, claims.destination, "queued", tx.now
        )
        if newer:
            current = max(newer, key=lambda n: (n["transition_version"], n["created_at"]))
            row.update(
                {
                    "event_type": REPUSHED,
                    "event_key": f"{REPUSHED}:{current['id']}:refused:{digest[:16]}",
                    "payload": {"notification_id": current["id"], "replace_only": True},
                    "urgency": current["urgency"],
                }
            )
        else:
            row.update(
                {
                    "event_type": RETRACTED,
                    "event_key": f"{RETRACTED}:{note['id']}:refused:{digest[:16]}",
                    "payload": {"notification_id": note["id"], "closed_as": note["state"]},
                    "urgency": "normal",
                }
            )
        row["run_id"] = note["run_id"]
        outbox.add_deliveries(tx.conn, [row])
        tx.wake_outbox = True


def repush_rows(
    note: Notification, destinations: list[str], step_no: int, now: datetime
) -> list[Delivery]:
    """A snooze rung's deliveries: the notification again, to each of the person's
    browsers (its first delivery to them exists already, so these name it in ``payload``)."""
    rows = []
    for dest in destinations:
        row = outbox.delivery_row(note["tenant_id"], None, WEBPUSH, dest, "queued", now)
        row.update(
            {
                "run_id": note["run_id"],
                "urgency": note["urgency"],
                "event_type": REPUSHED,
                "event_key": f"{REPUSHED}:{note['id']}:{step_no}",
                "payload": {"notification_id": note["id"]},
            }
        )
        rows.append(row)
    return rows


def _result(
    action: str,
    notification_id: str,
    state: str,
    *,
    snoozed_until: str | None = None,
    decision: str | None = None,
) -> ActionResult:
    return {
        "action": action,
        "notification_id": notification_id,
        "state": state,
        "snoozed_until": snoozed_until,
        "decision": decision,
    }


def _words(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
