"""Deciding a review (:mod:`runbell.flows.review`): the owner's answer to a finished run's
review request, bound to the run version the review was opened at.

Called by :func:`runbell.flows.answers.answer` for a request of purpose ``review``, inside
its transaction with the run and the request locked. Invariants kept here (DESIGN §2):
9 (an answer binds to one request, its versions and an Idempotency-Key; a stale, decided
or replaced review is refused with what is current, a repeated key replays the answer
byte for byte), 6 (the decision resolves the request's notifications on every channel),
11 (the event names operation ids and states only).
"""

from __future__ import annotations

from typing import Any, TypedDict

import structlog

from runbell.domain.badges import IN_DOUBT, WRONG
from runbell.domain.errors import Conflict, Forbidden, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import InputRequest, Run
from runbell.flows import idempotency, views
from runbell.flows.approvers import may_answer
from runbell.flows.attention import close_notification
from runbell.flows.context import Core
from runbell.flows.idempotency import Answer
from runbell.flows.input_requests import AnswerFields
from runbell.flows.ownership import actor_of
from runbell.flows.review import pending
from runbell.ids import new_id
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store import operations as ledger
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

NOT_AUTHORIZED = "only the run's owner or the people it names can decide on its review"
#: The operation states each option concerns (what the runtime is told to act on).
CONCERNS: dict[str, tuple[str, ...]] = {
    "accept": ("confirmed", "absent"),
    "retry_conflicts": WRONG,
    "wait": IN_DOUBT,
    "revise": (),
}


class ReviewDecided(TypedDict):
    response: dict[str, Any]
    input_request: views.InputRequestView
    run: views.RunView
    operations: dict[str, list[str]]  # option -> the operation ids it concerns


def answer_in_tx(
    core: Core,
    tx: Tx,
    who: Principal,
    run: Run,
    req: InputRequest,
    answer: AnswerFields,
    key: str | None,
    digest: str,
) -> Answer:
    """Decide a review (run and request locked by the caller)."""
    if not may_answer(tx.conn, who, run, req):
        raise Forbidden(NOT_AUTHORIZED)
    assert who.user_id is not None  # may_answer holds for people only
    ik = idempotency.answer_key(who.tenant_id, who.user_id, key, digest)
    replay = idempotency.stored(tx.conn, core.box, ik)
    if replay is not None:
        return replay
    _refuse_stale(tx, run, req, answer)
    choice = answer["value"]
    ids = [o["id"] for o in req.options or []]
    if answer["decision"] != "answer" or choice not in ids:
        raise ValidationFailed(
            f"a review takes decision answer with value one of: {', '.join(ids)}",
            field="value",
        )
    idempotency.claim(tx, core.box, ik)
    requests.insert_response(
        tx.conn,
        {
            "tenant_id": who.tenant_id,
            "input_request_id": req.id,
            "id": new_id("rsp"),
            "user_id": who.user_id,
            "decision": "answer",
            "value": choice,
            "expected_run_version": answer["expected_run_version"],
            "expected_request_version": answer["expected_request_version"],
            "idempotency_key": key,
            "created_at": tx.now,
            "actor": actor_of(who),  # the trace: who decided
        },
    )
    requests.close(tx.conn, who.tenant_id, req.id, "answered", tx.now)
    states = CONCERNS.get(str(choice), ())
    concerned = ledger.ids_by_state(tx.conn, run.tenant_id, run.run_id, states) if states else {}
    tx.emit(
        who.tenant_id,
        PendingEvent(
            "run.review_decided",
            {
                "run_id": run.run_id,
                "version": run.version,
                "input_request_id": req.id,
                "choice": choice,
                "decided_by": who.user_id,
                "operations": concerned,
            },
            run_id=run.run_id,
        ),
    )
    label = next((o["label"] for o in req.options or [] if o["id"] == choice), choice)
    for note in notes.open_for_run(tx.conn, who.tenant_id, run.run_id):
        if note.get("input_request_id") == req.id:
            close_notification(tx, note, "resolved", f"decided: {label} (by {who.user_id})")
    log.info("review.decided", run_id=run.run_id, choice=choice)
    answered = requests.get(tx.conn, who.tenant_id, req.id)
    assert answered is not None
    result: ReviewDecided = {
        "response": {
            "input_request_id": req.id,
            "decision": "answer",
            "value": choice,
            "answered_by": {"id": who.user_id, "email": answered.answered_by_email},
            "answered_at": views.iso(answered.answered_at),
            "expected_run_version": answer["expected_run_version"],
            "expected_request_version": answer["expected_request_version"],
        },
        "input_request": views.input_request_view(answered),
        "run": views.run_view(run),
        "operations": {k: list(v) for k, v in concerned.items()},
    }
    return idempotency.settle(tx, core.box, ik, 200, _sorted(result))


def _refuse_stale(tx: Tx, run: Run, req: InputRequest, answer: AnswerFields) -> None:
    current = {"run": views.run_view(run), "input_request": views.input_request_view(req)}
    if req.state == "answered":
        raise Conflict(
            f"This review was already decided by {req.answered_by_email}.", current=current
        )
    if req.state == "superseded":
        newer = pending(tx.conn, run)
        if newer is not None:
            current["input_request"] = views.input_request_view(newer)
        raise Conflict(
            "The ledger changed since this review was opened: a newer review "
            f"({req.superseded_by}) replaced it. Decide on what the ledger says now.",
            current=current,
        )
    if req.state != "pending":
        raise Conflict(
            f"This review is {req.state}: every operation settled, nothing is left to decide.",
            current=current,
        )
    if answer["expected_run_version"] != req.run_version:
        raise Conflict(
            f"This review is of run version {req.run_version}, not "
            f"{answer['expected_run_version']}.",
            current=current,
        )
    if answer["expected_request_version"] != req.version:
        raise Conflict(
            f"This review is at version {req.version}, not {answer['expected_request_version']}.",
            current=current,
        )


def _sorted(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _sorted(doc[k]) for k in sorted(doc)}
    if isinstance(doc, list):
        return [_sorted(v) for v in doc]
    return doc
