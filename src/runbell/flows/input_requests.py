"""Input requests: a blocked run asks (:func:`open_request`), people read it, unanswered
ones expire. Answering one is :mod:`runbell.flows.answers`.

Every public function is one unit of work: one transaction, the run row locked first,
then the request row, so the checks and the effects commit together or not at all.

Invariants kept here (DESIGN §2):

- 9: an answer binds to one request id, the expected run and request versions, the expiry
  and an Idempotency-Key; stale, expired, answered, superseded or unauthorized answers are
  refused with the current state; a repeated key returns the original answer.
- 6: an answer resolves the request's notifications everywhere, cancelling their pending
  deliveries; expiry closes them as expired.
- 1: opening is idempotent on ``input_request_id``; a new request supersedes the pending
  one (a new run version, so anything bound to the old one is stale).

Example (what the API routers and the web app call)::

    opened = open_request(core, runtime, "fix-42", {
        "input_request_id": "push-1", "kind": "approval", "summary": "Push to main?",
        "expires_at": "2026-11-29T13:00:00Z"})
    respond(core, person, "push-1",
            {"decision": "approve", "expected_run_version": opened["run"]["version"],
             "expected_request_version": 1},
            idempotency_key="3f1c…")
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, NotRequired, TypedDict

import structlog

from runbell import metrics
from runbell.domain import capabilities
from runbell.domain.errors import Conflict, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import InputRequest, Notification, Run
from runbell.domain.runs import RunState, is_terminal
from runbell.flows import (
    approvers,
    dependencies,
    machine_answers,
    request_fields,
    scope,
    transitions,
    views,
    written,
)
from runbell.flows.approvers import may_answer
from runbell.flows.attention import RequestLink, close_notification
from runbell.flows.context import Core
from runbell.flows.idempotency import Answer, IdempotencyKey
from runbell.flows.inputs import RequestBody
from runbell.flows.ownership import actor_of
from runbell.store import accounts, runs
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)


# --- opening -------------------------------------------------------------------------


class Opened(TypedDict):
    """``POST /v1/runs/{id}/input-requests``: the request, the run at its new version and
    the notifications raised (``created: false`` for a retry of the same id); with
    ``callback``, the callback URL, shown this once."""

    input_request: views.InputRequestView
    run: views.RunView
    notifications: list[views.NotificationView]
    created: bool
    callback: NotRequired[machine_answers.CallbackView]


class RequestDetail(TypedDict):
    """``GET /v1/input-requests/{id}``."""

    input_request: views.InputRequestView
    run: views.RunView
    actionable: bool
    actionable_reason: str
    may_answer: bool


class AnswerFields(TypedDict):
    """An answer's body, checked: the decision and the versions the person saw."""

    decision: str  # approve | reject | answer
    value: Any  # an option id or text; an approved editable request's (edited) value
    expected_run_version: int
    expected_request_version: int


class ResponseView(TypedDict):
    input_request_id: str
    decision: str
    value: Any  # an option id, a text, or an approved editable value
    # The approval carries an edited value (issue 19 item 3); "callback" or "key" when a
    # machine answered (item 4). A run's own requests only (not amendments, reviews).
    edited: NotRequired[bool]
    answered_by: views.Person
    answered_by_machine: NotRequired[str | None]
    answered_at: str | None
    expected_run_version: int
    expected_request_version: int


class Answered(TypedDict):
    """An answer's 200: the response, the request (without details: it is stored for
    replays) and the run as it is now; an amendment's answer adds the amendment."""

    response: ResponseView
    input_request: views.InputRequestView
    run: views.RunView


class RequestNow(TypedDict):
    """The ``current`` of a 409: the run and the request now, without details."""

    run: views.RunView
    input_request: views.InputRequestView


def open_request(
    core: Core,
    who: Principal,
    run_id: str,
    body: RequestBody,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Open an input request: the run moves to ``input_required`` at a new version.

    Idempotent on ``input_request_id``: the same id with the same body answers the
    request as it is now (200, ``created: false``); with another body it is a 409. A
    pending request of the same run is superseded. Answers 201 with ``{input_request,
    run, notifications, created}``; with an Idempotency-Key, a retry gets the stored one.
    """
    # One unit of the process's writer (flows.written). Two opens of one new id for
    # different runs may race across processes: the loser's insert fails, and its second
    # try (written.act_once retries a constraint violation) sees the winner.
    who.require(capabilities.ASK)
    return written.act_once(
        core, key, (who.tenant_id, run_id), lambda: _opening(core, who, run_id, body)
    )


def _opening(
    core: Core, who: Principal, run_id: str, body: RequestBody
) -> Callable[[Tx], tuple[int, Opened]]:
    """Validate an open request's body now; the action to run in the transaction returns
    (201, the result) or (200, the request as it is) for a retry of the same id."""
    fields = request_fields.checked(body)
    hashed: dict[str, Any] = {**fields, "expires_at": views.iso(fields["expires_at"])}
    del hashed["risks"]  # derived from the action
    for added in ("approvers", "action", "editable", "callback"):
        if hashed[added] is None:  # as before these existed: old retries still match
            del hashed[added]
    digest = fingerprint({"run_id": run_id, **hashed})

    def act(tx: Tx) -> tuple[int, Opened]:
        opened = _open_in(core, tx, who, run_id, fields, digest)
        return (201 if opened["created"] else 200), opened

    return act


def _open_in(
    core: Core,
    tx: Tx,
    who: Principal,
    run_id: str,
    fields: request_fields.RequestFields,
    digest: str,
) -> Opened:
    tenant_id, request_id = who.tenant_id, fields["id"]
    conn = tx.conn
    run = scope.require_run(conn, who, run_id, capabilities.ASK, for_update=True)
    existing = requests.get(conn, tenant_id, request_id, for_update=True)
    if existing is not None:
        if existing.request_hash != digest:
            raise Conflict(
                f"input_request_id {request_id!r} was already used for a different "
                "request; open a new request under a new id",
                field="input_request_id",
                current=current_of(run, existing),
            )
        tx.after_commit.append(metrics.DUPLICATES.labels("input_request").inc)
        return _opened(conn, existing, run, [], created=False)
    expires_at = fields["expires_at"]
    if expires_at is not None and expires_at <= tx.now:
        raise ValidationFailed(
            f"expires_at {views.iso(expires_at)} is not in the future", field="expires_at"
        )
    if run.state not in (RunState.WORKING, RunState.INPUT_REQUIRED):
        raise Conflict(
            f"run {run_id!r} is {run.state}; only a working run (or one already "
            "waiting for input) can ask for input",
            current={"run": views.run_view(run)},
        )
    named = approvers.resolve(conn, who, run, fields["approvers"])
    replaced = requests.pending_for_run(conn, tenant_id, run_id, for_update=True)
    version = run.version + 1
    values = {
        "tenant_id": tenant_id,
        "id": request_id,
        "run_id": run_id,
        "kind": fields["kind"],
        "summary": fields["summary"],
        "details": fields["details"],
        "options": fields["options"],
        "blocks_work": fields["blocks_work"],
        "expires_at": expires_at,
        "version": 1,  # requests are not amended yet; a new request gets a new id
        "run_version": version,
        "state": "pending",
        "request_hash": digest,
        "created_at": tx.now,
        "approvers": named,
        "action": fields["action"],
        "risks": fields["risks"],
        "editable": fields["editable"],
    }
    requests.insert(conn, values)
    tx.emit(
        tenant_id,
        PendingEvent(
            "input_request.opened",
            {
                "input_request_id": request_id,
                "run_id": run_id,
                "kind": fields["kind"],
                "state": "pending",
                "version": version,
                "request_version": 1,
                "expires_at": views.iso(expires_at),
                "supersedes": [r.id for r in replaced],
            },
            run_id=run_id,
        ),
    )
    for old in replaced:
        requests.close(conn, tenant_id, old.id, "superseded", tx.now, superseded_by=request_id)
        tx.emit(
            tenant_id,
            PendingEvent(
                "input_request.superseded",
                {
                    "input_request_id": old.id,
                    "run_id": run_id,
                    "state": "superseded",
                    "superseded_by": request_id,
                    "version": version,
                    "request_version": old.version,
                },
                run_id=run_id,
            ),
        )
    dependencies.tell_dependents(core, tx, tenant_id, [r.id for r in replaced])
    # Same state again for a replacing request: still a new version, so anything
    # bound to the old one (links, open pages, queued alerts) is stale.
    run, ids = transitions.apply(
        core,
        tx,
        run,
        transitions.TransitionRequest(
            state=RunState.INPUT_REQUIRED.value,
            sequence=None,
            source_id=who.source_id or accounts.api_source_id(conn, tenant_id),
            event_id=None,
            reason=f"input request {request_id}",
            error=None,
            effects_verified=None,
            kind="state" if run.state == RunState.WORKING else "request",
            request=RequestLink(
                request_id,
                expires_at,
                fields["blocks_work"],
                answerers=approvers.paged(conn, run, named),
            ),
            actor=actor_of(who),
        ),
    )
    log.info(
        "input_request.opened",
        run_id=run_id,
        input_request_id=request_id,
        superseded=len(replaced),
    )
    req = requests.get(conn, tenant_id, request_id)
    assert req is not None
    opened = _opened(conn, req, run, ids, created=True)
    if fields["callback"] is not None:
        opened["callback"] = machine_answers.mint_in_tx(core, tx, who, run, req, fields["callback"])
    return opened


def _opened(conn: Any, req: InputRequest, run: Run, ids: list[str], *, created: bool) -> Opened:
    return {
        "input_request": views.input_request_view(req, include_details=True),
        "run": views.run_view(run),
        "notifications": [
            views.notification_view(n) for n in notes.get_many(conn, run.tenant_id, ids)
        ],
        "created": created,
    }


# --- reading -------------------------------------------------------------------------


def get_request(core: Core, who: Principal, request_id: str) -> RequestDetail:
    """The request with its run, whether it can still be answered and whether *you* may.

    Any key, a person who may see the run, or one its authority names by role (who may
    answer, so must be able to read what they answer); 404 for anyone else.
    Returns ``{input_request, run, actionable, actionable_reason, may_answer}``.
    """
    who.require(capabilities.READ)
    with core.db.read() as conn:
        req = requests.get(conn, who.tenant_id, request_id)
        run = None if req is None else runs.get_run(conn, who.tenant_id, req.run_id)
        may = run is not None and (
            may_answer(conn, who, run, req)
            if req is None or req.purpose == "run"
            else who.is_user and who.user_id == run.owner_user_id  # amendments: the owner
        )
        if req is None or run is None or not (may or runs.can_see_run(conn, who, run.run_id)):
            raise NotFound(f"no input request {request_id!r}")
    ok, why = request_actionable(req, run, core.db.clock())
    return {
        "input_request": views.input_request_view(req, include_details=True),
        "run": views.run_view(run),
        "actionable": ok,
        "actionable_reason": why,
        "may_answer": may,
    }


def pending_view(
    conn: Any, tenant_id: str, run_id: str, *, include_details: bool
) -> views.InputRequestView | None:
    """The run's pending request for the run view, or None."""
    pending = requests.pending_for_run(conn, tenant_id, run_id)
    if not pending:
        return None
    return views.input_request_view(pending[-1], include_details=include_details)


def get_for_notification(conn: Any, note: Notification) -> InputRequest | None:
    request_id = note["input_request_id"]
    if not request_id:
        return None
    return requests.get(conn, note["tenant_id"], request_id)


def request_actionable(req: InputRequest, run: Run, now: datetime) -> tuple[bool, str]:
    """Whether the request can still be answered, and why (not)."""
    blocked = views.request_blocked(req, now)
    if blocked is not None:
        return False, blocked
    if req.purpose == "review":  # a finished run's review: open until decided or replaced
        return True, "awaiting the review decision"
    if req.purpose == "amendment":  # put to the owner; the run need not wait
        if is_terminal(run.state):
            return False, f"run is now {run.state}"
        return True, "awaiting the owner's decision"
    if run.state != RunState.INPUT_REQUIRED:
        return False, f"run is now {run.state}"
    return True, "awaiting an answer"


# --- expiry and cancellation ---------------------------------------------------------


def expire_requests(core: Core, now: datetime, limit: int = 500) -> int:
    """Scheduler sweep: pending requests past ``expires_at`` become ``expired``.

    Their notifications close as ``expired`` and ``input_request.expired`` tells the
    runtime. The run stays ``input_required``: what to do next is the runtime's call.
    """
    with core.db.read() as conn:
        due = requests.due_for_expiry(conn, now, limit)
    expired = 0
    for row in due:
        with core.db.transaction(now=now) as tx:
            run = runs.get_run(tx.conn, row["tenant_id"], row["run_id"], for_update=True)
            req = requests.get(tx.conn, row["tenant_id"], row["id"], for_update=True)
            if (
                run is None
                or req is None
                or req.state != "pending"
                or req.expires_at is None
                or req.expires_at > tx.now
            ):
                continue  # answered, replaced or swept by another process meanwhile
            expire_in_tx(core, tx, req, run)
            expired += 1
    return expired


def expire_in_tx(core: Core, tx: Tx, req: InputRequest, run: Run) -> None:
    tenant_id = req.tenant_id
    if not requests.close(tx.conn, tenant_id, req.id, "expired", tx.now):
        return
    dependencies.tell_dependents(core, tx, tenant_id, [req.id])
    tx.after_commit.append(metrics.EXPIRED_REQUESTS.labels(req.kind).inc)
    for note in notes.open_for_run(tx.conn, tenant_id, run.run_id):
        if note.get("input_request_id") == req.id:
            close_notification(tx, note, "expired", "input request expired")
    tx.emit(
        tenant_id,
        PendingEvent(
            "input_request.expired",
            {
                "input_request_id": req.id,
                "run_id": run.run_id,
                "state": "expired",
                "expired_at": views.iso(req.expires_at),
                "version": run.version,
                "request_version": req.version,
            },
            run_id=run.run_id,
        ),
    )
    log.info("input_request.expired", input_request_id=req.id, run_id=run.run_id)


# --- helpers -------------------------------------------------------------------------


def current_of(run: Run, req: InputRequest) -> RequestNow:
    """The ``current`` of a 409: the run and the request now, without details."""
    return {"run": views.run_view(run), "input_request": views.input_request_view(req)}


def fingerprint(doc: object) -> str:
    """A stable hash of a request's (or an answer's) fields."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
