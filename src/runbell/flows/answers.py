"""Answers: a person answers an input request once, against what they saw.

:func:`answer` checks, in one transaction with the run and the request locked: the
request exists in the caller's tenant (404), the caller may answer it (403), an
Idempotency-Key (422), a replay of that key (the stored answer, or 422 for another body),
then that the request is pending and not expired and the run and request versions are the
ones the caller saw (409 whose ``current`` says what happened instead), then that the
decision fits the request's kind (422). A request found expired is marked expired even
though the answer is refused.

Invariants kept here (DESIGN §2):

- 9: an answer binds to one request id, the expected run and request versions, the expiry
  and an Idempotency-Key; stale, expired, answered, superseded or unauthorized answers are
  refused with an explanation; a repeated key returns the original answer, byte for byte.
- 6: the answer resolves the request's notifications everywhere, cancelling their
  pending deliveries in the same transaction.
- 1: one response per request is the table's key; of two concurrent answers one wins.

An amendment's request (purpose ``amendment``: a change someone proposed, put to the
owner) is answered here too, and handed to :func:`runbell.flows.amendments.answer_in_tx`:
only the owner answers it, it binds to the run version it was proposed against, and it
never moves the run's state.

Example (what the API router and the web app call)::

    answer(core, person, "push-1",
           {"decision": "approve", "expected_run_version": 3, "expected_request_version": 1},
           idempotency_key="3f1c…")
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import structlog
from sqlalchemy.exc import IntegrityError

from runbell.domain import editable
from runbell.domain.errors import Conflict, Forbidden, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import InputRequest, Run
from runbell.domain.runs import RunState
from runbell.flows import (
    amendments,
    dependencies,
    idempotency,
    machine_answers,
    review_answer,
    transitions,
    views,
    written,
)
from runbell.flows.approvers import answer_refusal
from runbell.flows.attention import close_notification
from runbell.flows.context import Core
from runbell.flows.idempotency import Answer, IdempotencyKey
from runbell.flows.input_requests import (
    Answered,
    AnswerFields,
    current_of,
    expire_in_tx,
    fingerprint,
)
from runbell.flows.inputs import AnswerBody
from runbell.flows.ownership import actor_of
from runbell.ids import new_id
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store import runs
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

DECISIONS: dict[str, tuple[str, ...]] = {
    "approval": ("approve", "reject"),
    "choice": ("answer",),
    "text": ("answer",),
}
MAX_TEXT = 10_000
NOT_AUTHORIZED = "only the run's owner or the people it names can answer this request"


def answer(
    core: Core,
    who: Principal,
    request_id: str,
    body: AnswerBody,
    idempotency_key: str | None,
    *,
    run_id: str | None = None,
) -> Answer:
    """Answer a request once; the exact answer to send (a replay is the stored one).

    Checks, in one transaction with the run and the request locked: the request exists in
    your tenant — and, when the caller names the run it answers on (the run page's form
    does), belongs to that run (404 either way), you may answer it (403), an
    Idempotency-Key (422), a replay of that key (the stored 200 body, or 422 for another
    body), then the request is pending and not expired and the run and request versions
    are the ones you saw (409 with ``current``), then the decision fits the kind (422). A
    request found expired is marked expired even though the answer is refused.
    """
    fields = _answer_fields(body)
    digest = fingerprint({"input_request_id": request_id, **fields})
    asked = Asked(who, request_id, fields, idempotency_key, digest, run_id)
    try:
        return _respond(core, asked)
    except IntegrityError:
        # A concurrent answer won the insert (one response per request) or stored this
        # Idempotency-Key first: the second pass answers from what it committed.
        return _respond(core, asked)


@dataclass(frozen=True, slots=True)
class Asked:
    """One answer as the caller sent it, checked for shape (:func:`_answer_fields`)."""

    who: Principal
    request_id: str
    answer: AnswerFields
    key: str | None
    digest: str  # the request id and answer, for Idempotency-Key replays
    run_id: str | None = None  # the run the caller answers on, when it names one


def _respond(core: Core, asked: Asked) -> Answer:
    """One unit of the process's writer (flows.written), under the lock key of the run
    the request belongs to (read first when the caller did not name it)."""
    run_id = asked.run_id or run_of_request(core, asked.who.tenant_id, asked.request_id)
    outcome = written.write(
        core, asked.who.tenant_id, run_id, lambda tx: respond_in_tx(core, tx, asked)
    )
    if isinstance(outcome, Conflict):
        raise outcome  # raised after commit: the request was marked expired
    return outcome


def run_of_request(core: Core, tenant_id: str, request_id: str) -> str:
    """The run a request belongs to (the writer's lock key): 404 when there is none in
    the tenant, as :func:`_locked` would answer."""
    with core.db.read() as conn:
        found = requests.get(conn, tenant_id, request_id)
    if found is None:
        raise NotFound(f"no input request {request_id!r}")
    return found.run_id


def respond_in_tx(core: Core, tx: Tx, asked: Asked) -> Answer | Conflict:
    """The steps of one answer, in one transaction: lock, check, record, move on. Also
    what a callback URL's use runs (flows.callbacks), in its own transaction."""
    run, req = _locked(tx, asked)
    if req.purpose != "run" and machine_answers.is_machine(asked.who):
        raise Forbidden("a machine answers a run's own requests, not amendments or reviews")
    if req.purpose == "amendment":
        # A proposed change put to the owner: it binds to other versions and never moves
        # the run's state (flows.amendments says which).
        who, answer = asked.who, asked.answer
        return amendments.answer_in_tx(core, tx, who, run, req, answer, asked.key, asked.digest)
    if req.purpose == "review":
        # A finished run's review: binds to the run version it was opened at, never
        # moves the run (flows.review).
        who, answer = asked.who, asked.answer
        return review_answer.answer_in_tx(core, tx, who, run, req, answer, asked.key, asked.digest)
    ik = _authorized_key(tx, asked, run, req)
    replay = idempotency.stored(tx.conn, core.box, ik)  # under the run's lock: see below
    if replay is not None:
        log.info("input_request.replayed", input_request_id=asked.request_id)
        return replay
    refused = _checkcurrent_of(core, tx, req, run, asked.answer)
    if refused is not None:
        return refused
    _check_decision(req, asked.answer)
    idempotency.claim(tx, core.box, ik)  # unused so far (looked up above, under the lock)
    _record(tx, asked, run, req)
    dependencies.tell_dependents(core, tx, run.tenant_id, [req.id])  # runs that wait on it
    run = _move_on(core, tx, asked, run)
    result = _result(tx, asked, run)
    log.info(
        "input_request.answered",
        input_request_id=asked.request_id,
        decision=asked.answer["decision"],
    )
    # Keys sorted, as documented; the answer is stored byte for byte for replays.
    return idempotency.settle(tx, core.box, ik, 200, _canonical(result))


def _locked(tx: Tx, asked: Asked) -> tuple[Run, InputRequest]:
    """The run (locked first, as every writer of a run does) and the request. A request
    of another tenant, or of another run than the one the caller answers on, is a 404:
    a form that names a run and another run's request opens nothing."""
    tenant_id, request_id = asked.who.tenant_id, asked.request_id
    found = requests.get(tx.conn, tenant_id, request_id)
    if found is None or (asked.run_id is not None and found.run_id != asked.run_id):
        raise NotFound(f"no input request {request_id!r}")
    run = runs.require_run(tx.conn, tenant_id, found.run_id, for_update=True)
    req = requests.get(tx.conn, tenant_id, request_id, for_update=True)
    assert req is not None  # requests are never deleted
    return run, req


def _authorized_key(tx: Tx, asked: Asked, run: Run, req: InputRequest) -> IdempotencyKey:
    """404 for a person who may not see the run (issue 18 item 4: access is checked on
    the run itself); 403 unless the caller may answer — a viewer is told they may see but
    not answer; 422 without an Idempotency-Key. The key is looked up by the caller under
    the run's lock: a concurrent answer under it has committed (and is replayed) or has
    not started."""
    who = asked.who
    if machine_answers.is_machine(who):
        # A callback URL or a key that names input_requests.answer (issue 19 item 4):
        # then every check below, as for a person.
        machine_answers.check_machine(tx.conn, who, run)
        assert who.credential_id is not None
        return idempotency.answer_key(who.tenant_id, who.credential_id, asked.key, asked.digest)
    refusal = answer_refusal(tx.conn, who, run, req)
    if refusal is not None:
        if not who.is_user:
            raise Forbidden(NOT_AUTHORIZED)
        if not runs.can_see_run(tx.conn, who, run.run_id):
            raise NotFound(f"no input request {asked.request_id!r}")
        raise Forbidden(refusal)
    assert who.user_id is not None
    return idempotency.answer_key(who.tenant_id, who.user_id, asked.key, asked.digest)


def _record(tx: Tx, asked: Asked, run: Run, req: InputRequest) -> None:
    """The response, the request answered, its event, and its notifications resolved on
    every channel at once (invariant 6)."""
    tenant_id, request_id, answer = asked.who.tenant_id, asked.request_id, asked.answer
    requests.insert_response(
        tx.conn,
        {
            "tenant_id": tenant_id,
            "input_request_id": request_id,
            "id": new_id("rsp"),
            "user_id": asked.who.user_id,
            "decision": answer["decision"],
            "value": answer["value"],
            "expected_run_version": answer["expected_run_version"],
            "expected_request_version": answer["expected_request_version"],
            "idempotency_key": asked.key,
            "created_at": tx.now,
            "actor": actor_of(asked.who),
            "edited": _edited(req, answer),
        },
    )
    requests.close(tx.conn, tenant_id, request_id, "answered", tx.now)
    tx.emit(
        tenant_id,
        PendingEvent(
            "input_request.answered",
            {
                "input_request_id": request_id,
                "run_id": run.run_id,
                "decision": answer["decision"],
                "value": answer["value"],
                "edited": _edited(req, answer),
                "answered_by": asked.who.user_id or asked.who.credential_id,
                "answered_at": views.iso(tx.now),
                "version": run.version + 1,
                "request_version": req.version,
            },
            run_id=run.run_id,
        ),
    )
    for note in notes.open_for_run(tx.conn, tenant_id, run.run_id):
        if note.get("input_request_id") == request_id:
            close_notification(tx, note, "resolved", f"answered by {_answerer(asked.who)}")


def _move_on(core: Core, tx: Tx, asked: Asked, run: Run) -> Run:
    """The run goes back to work, at a new version (what was bound to the old is stale)."""
    moved, _ = transitions.apply(
        core,
        tx,
        run,
        transitions.TransitionRequest(
            state=RunState.WORKING.value,
            sequence=None,
            source_id=None,
            event_id=None,
            reason=f"answered: {asked.answer['decision']}",
            error=None,
            effects_verified=None,
            actor=actor_of(asked.who),
        ),
    )
    return moved


def _result(tx: Tx, asked: Asked, run: Run) -> Answered:
    answer = asked.answer
    req = requests.get(tx.conn, asked.who.tenant_id, asked.request_id)
    assert req is not None and req.answered_by_id is not None  # answered in this tx
    return {
        "response": {
            "input_request_id": asked.request_id,
            "decision": answer["decision"],
            "value": answer["value"],
            "edited": bool(req.edited),
            "answered_by": {"id": req.answered_by_id, "email": req.answered_by_email},
            "answered_by_machine": req.answered_by_machine,
            "answered_at": views.iso(req.answered_at),
            "expected_run_version": answer["expected_run_version"],
            "expected_request_version": answer["expected_request_version"],
        },
        # Without details: this body is stored for replays, and details stay in one place.
        "input_request": views.input_request_view(req),
        "run": views.run_view(run),
    }


def _checkcurrent_of(
    core: Core, tx: Tx, req: InputRequest, run: Run, answer: AnswerFields
) -> Conflict | None:
    """Raise the 409 for a request that cannot take this answer now.

    An expiry found here is committed (the request is marked expired), so that one is
    returned for the caller to raise after the commit rather than raised.
    """
    state = req.state
    if state == "answered":
        raise Conflict(
            f"This request was already answered by {_answered_by(req)} "
            f"at {_words(req.answered_at)}.",
            current=current_of(run, req),
        )
    if state == "superseded":
        raise Conflict(
            f"A newer request replaced this one ({req.superseded_by}).",
            current=current_of(run, req),
        )
    if state == "cancelled":
        raise Conflict(
            f"This request was cancelled at {_words(req.closed_at)}: the run stopped "
            f"waiting for it (it is now {run.state}).",
            current=current_of(run, req),
        )
    expires_at = req.expires_at
    if state == "expired" or (expires_at is not None and expires_at <= tx.now):
        if state == "pending":
            expire_in_tx(core, tx, req, run)
            req = replace(req, state="expired", closed_at=tx.now)
        return Conflict(
            f"This request expired at {_words(expires_at or req.closed_at)}.",
            current=current_of(run, req),
        )
    if run.state != RunState.INPUT_REQUIRED:
        raise Conflict(
            f"The run is no longer waiting for input (it is now {run.state}).",
            current=current_of(run, req),
        )
    if run.version != answer["expected_run_version"]:
        raise Conflict(
            "The run changed since this page was loaded "
            f"(version {answer['expected_run_version']} → {run.version}).",
            current=current_of(run, req),
        )
    if req.version != answer["expected_request_version"]:
        raise Conflict(
            "The request changed since this page was loaded "
            f"(version {answer['expected_request_version']} → {req.version}).",
            current=current_of(run, req),
        )
    return None


def _check_decision(req: InputRequest, answer: AnswerFields) -> None:
    kind, decision, value = req.kind, answer["decision"], answer["value"]
    allowed = DECISIONS[kind]
    if decision not in allowed:
        raise ValidationFailed(
            f"an {kind} request takes decision {' or '.join(allowed)}, not {decision}"
            if kind == "approval"
            else f"a {kind} request takes decision answer, not {decision}",
            field="decision",
        )
    if kind == "approval":
        spec = editable.parse_stored(req.editable)
        if value is not None and (spec is None or decision != "approve"):
            raise ValidationFailed(
                "an approval takes no value"
                if spec is None
                else "only an approval carries the edited value; a rejection takes none",
                field="value",
            )
        if value is not None and spec is not None:
            editable.require_value(spec, value)  # 422 naming the path (value.command)
    elif kind == "choice":
        ids = [o["id"] for o in req.options or []]
        if value not in ids:
            raise ValidationFailed(
                f"value must be one of the option ids: {', '.join(ids)}", field="value"
            )
    elif not isinstance(value, str) or not value.strip():
        raise ValidationFailed("a text request needs a non-empty value", field="value")


def _answer_fields(body: AnswerBody) -> AnswerFields:
    decision = body.get("decision")
    if decision not in ("approve", "reject", "answer"):
        raise ValidationFailed("decision must be approve, reject or answer", field="decision")
    value = body.get("value")
    # A string (an option id, a text answer) or, approving an editable request, the
    # edited JSON value (checked against its schema with the request).
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise ValidationFailed(f"value is at most {MAX_TEXT} characters", field="value")
    run_version, request_version = (
        _version(body, "expected_run_version"),
        _version(body, "expected_request_version"),
    )
    return {
        "decision": decision,
        "value": value,
        "expected_run_version": run_version,
        "expected_request_version": request_version,
    }


def _version(body: AnswerBody, name: str) -> int:
    given = body.get(name)
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise ValidationFailed(f"{name} must be a positive integer", field=name)
    return given


def _edited(req: InputRequest, answer: AnswerFields) -> bool:
    """Whether the answer approved another value than the request's editable one."""
    spec = editable.parse_stored(req.editable)
    value = answer["value"]
    return spec is not None and value is not None and editable.is_edited(spec, value)


def _answered_by(req: InputRequest) -> str:
    if req.answered_by_machine is not None:  # a callback URL or a key (issue 19 item 4)
        return f"a machine ({req.answered_by_machine} {req.answered_by_id})"
    return str(req.answered_by_email)


def _answerer(who: Principal) -> str:
    if who.user_id is not None:
        return who.user_id
    return f"{who.credential_kind} {who.credential_id}"


def _canonical(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _canonical(doc[k]) for k in sorted(doc)}
    if isinstance(doc, list):
        return [_canonical(v) for v in doc]
    return doc


def _words(at: datetime | None) -> str:
    return "an unknown time" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
