"""Input requests: a blocked run asks; a person answers it once; unanswered ones expire.

A blocked run asks for input (:func:`open_request`); a person answers it
(:func:`respond`) against the request id, the run version and the request version they
saw, with an Idempotency-Key. Every public function is one unit of work: one transaction,
the run row locked first, then the request row, so the checks and the effects commit
together or not at all. Failures raise the errors of :mod:`runbell.domain.errors`; a
refused answer is a :class:`~runbell.domain.errors.Conflict` whose ``current`` says what
happened instead.

Invariants kept here (DESIGN §2):

- 9: an answer binds to one request id, the expected run and request versions, the expiry
  and an Idempotency-Key; stale, expired, answered, superseded or unauthorized answers are
  refused with the current state; a repeated key returns the original answer.
- 6: an answer resolves the request's notifications everywhere, cancelling their pending
  deliveries; expiry closes them as expired.
- 1: opening is idempotent on ``input_request_id``; a new request supersedes the pending
  one (a new run version, so anything bound to the old one is stale).

Example (what the API routers and the web app call)::

    opened = open_request(rb, runtime, "fix-42", {
        "input_request_id": "push-1", "kind": "approval", "summary": "Push to main?",
        "expires_at": "2026-11-29T13:00:00Z"}).content()
    respond(rb, person, "push-1",
            {"decision": "approve", "expected_run_version": opened["run"]["version"],
             "expected_request_version": 1},
            idempotency_key="3f1c…")
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog
from sqlalchemy.exc import IntegrityError

from runbell.domain.errors import Conflict, Forbidden, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.runs import RunState
from runbell.flows import idempotency, transitions, views
from runbell.flows.attention import RequestLink, close_notification
from runbell.flows.context import Runbell
from runbell.flows.idempotency import Answer, IdempotencyKey, act_once
from runbell.ids import new_id
from runbell.store import accounts, runs
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

KINDS = ("approval", "choice", "text")
DECISIONS: dict[str, tuple[str, ...]] = {
    "approval": ("approve", "reject"),
    "choice": ("answer",),
    "text": ("answer",),
}
MAX_TEXT = 10_000
MAX_OPTIONS = 50
NOT_AUTHORIZED = "only the run's owner or the people it names can answer this request"


# --- opening -------------------------------------------------------------------------


def open_request(
    rb: Runbell,
    who: Principal,
    run_id: str,
    body: dict[str, Any],
    key: IdempotencyKey | None = None,
) -> Answer:
    """Open an input request: the run moves to ``input_required`` at a new version.

    Idempotent on ``input_request_id``: the same id with the same body answers the
    request as it is now (200, ``created: false``); with another body it is a 409. A
    pending request of the same run is superseded. Answers 201 with ``{input_request,
    run, notifications, created}``; with an Idempotency-Key, a retry gets the stored one.
    """
    # Two opens of one new id for different runs may race: the loser's insert fails, and
    # its second try (once() retries a constraint violation) sees the winner.
    return act_once(rb.db, rb.box, key, lambda: _opening(rb, who, run_id, body))


def _opening(
    rb: Runbell, who: Principal, run_id: str, body: dict[str, Any]
) -> Callable[[Tx], tuple[int, dict[str, Any]]]:
    """Validate an open request's body now; the action to run in the transaction returns
    (201, the result) or (200, the request as it is) for a retry of the same id."""
    fields = _request_fields(body)
    digest = _digest({"run_id": run_id, **fields, "expires_at": views.iso(fields["expires_at"])})

    def act(tx: Tx) -> tuple[int, dict[str, Any]]:
        opened = _open_in(rb, tx, who, run_id, fields, digest)
        return (201 if opened["created"] else 200), opened

    return act


def _open_in(
    rb: Runbell, tx: Tx, who: Principal, run_id: str, fields: dict[str, Any], digest: str
) -> dict[str, Any]:
    tenant_id, request_id = who.tenant_id, fields["id"]
    conn = tx.conn
    run = runs.require_run(conn, tenant_id, run_id, for_update=True)
    existing = requests.get(conn, tenant_id, request_id, for_update=True)
    if existing is not None:
        if existing["request_hash"] != digest:
            raise Conflict(
                f"input_request_id {request_id!r} was already used for a different "
                "request; open a new request under a new id",
                field="input_request_id",
                current=_current(run, existing),
            )
        return _opened(conn, existing, run, [], created=False)
    expires_at = fields["expires_at"]
    if expires_at is not None and expires_at <= tx.now:
        raise ValidationFailed(
            f"expires_at {views.iso(expires_at)} is not in the future", field="expires_at"
        )
    if run["state"] not in (RunState.WORKING, RunState.INPUT_REQUIRED):
        raise Conflict(
            f"run {run_id!r} is {run['state']}; only a working run (or one already "
            "waiting for input) can ask for input",
            current={"run": views.run_view(run)},
        )
    replaced = requests.pending_for_run(conn, tenant_id, run_id, for_update=True)
    version = run["version"] + 1
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
                "supersedes": [r["id"] for r in replaced],
            },
            run_id=run_id,
        ),
    )
    for old in replaced:
        requests.close(conn, tenant_id, old["id"], "superseded", tx.now, superseded_by=request_id)
        tx.emit(
            tenant_id,
            PendingEvent(
                "input_request.superseded",
                {
                    "input_request_id": old["id"],
                    "run_id": run_id,
                    "state": "superseded",
                    "superseded_by": request_id,
                    "version": version,
                    "request_version": old["version"],
                },
                run_id=run_id,
            ),
        )
    # Same state again for a replacing request: still a new version, so anything
    # bound to the old one (links, open pages, queued alerts) is stale.
    run, ids = transitions.apply(
        rb,
        tx,
        run,
        RunState.INPUT_REQUIRED.value,
        sequence=None,
        source_id=who.source_id or accounts.api_source_id(conn, tenant_id),
        event_id=None,
        reason=f"input request {request_id}",
        error=None,
        effects_verified=None,
        kind="state" if run["state"] == RunState.WORKING else "request",
        request=RequestLink(request_id, expires_at, fields["blocks_work"]),
    )
    log.info(
        "input_request.opened",
        run_id=run_id,
        input_request_id=request_id,
        superseded=len(replaced),
    )
    req = requests.get(conn, tenant_id, request_id)
    assert req is not None
    return _opened(conn, req, run, ids, created=True)


def _opened(
    conn: Any, req: dict[str, Any], run: dict[str, Any], ids: list[str], *, created: bool
) -> dict[str, Any]:
    return {
        "input_request": views.input_request_view(req, include_details=True),
        "run": views.run_view(run),
        "notifications": [
            views.notification_view(n) for n in notes.get_many(conn, run["tenant_id"], ids)
        ],
        "created": created,
    }


def _request_fields(body: dict[str, Any]) -> dict[str, Any]:
    """Validate an open request's body (also for callers that skip the API schema)."""
    request_id = body.get("input_request_id")
    if not isinstance(request_id, str) or not 1 <= len(request_id) <= 200:
        raise ValidationFailed("input_request_id is 1 to 200 characters", field="input_request_id")
    kind = body.get("kind")
    if kind not in KINDS:
        raise ValidationFailed(f"kind must be one of {', '.join(KINDS)}", field="kind")
    summary = body.get("summary")
    if not isinstance(summary, str) or not summary.strip() or len(summary) > 300:
        raise ValidationFailed("summary is 1 to 300 characters", field="summary")
    details = body.get("details")
    if details is not None and not isinstance(details, dict):
        raise ValidationFailed("details must be an object", field="details")
    options = [dict(o) for o in body.get("options") or []]
    if kind == "choice":
        ids = [o.get("id") for o in options]
        if len(options) < 2:
            raise ValidationFailed("a choice needs at least 2 options", field="options")
        if len(set(ids)) != len(ids):
            raise ValidationFailed("option ids must be unique", field="options")
        if len(options) > MAX_OPTIONS:
            raise ValidationFailed(f"at most {MAX_OPTIONS} options", field="options")
        for o in options:
            if not isinstance(o.get("id"), str) or not isinstance(o.get("label"), str):
                raise ValidationFailed("each option is {id, label} strings", field="options")
    elif options:
        raise ValidationFailed(f"options are for kind choice, not {kind}", field="options")
    expires_at = body.get("expires_at")
    if isinstance(expires_at, str):
        try:
            expires_at = datetime.fromisoformat(expires_at)
        except ValueError as exc:
            raise ValidationFailed("expires_at is not a timestamp", field="expires_at") from exc
    if expires_at is not None:
        if not isinstance(expires_at, datetime):
            raise ValidationFailed("expires_at is not a timestamp", field="expires_at")
        if expires_at.tzinfo is None:
            raise ValidationFailed(
                "expires_at must carry a timezone offset (e.g. Z)", field="expires_at"
            )
        expires_at = expires_at.astimezone(UTC)
    return {
        "id": request_id,
        "kind": kind,
        "summary": summary,
        "details": details,
        "options": [{"id": o["id"], "label": o["label"]} for o in options] or None,
        "blocks_work": bool(body.get("blocks_work", True)),
        "expires_at": expires_at,
    }


# --- reading -------------------------------------------------------------------------


def get_request(rb: Runbell, who: Principal, request_id: str) -> dict[str, Any]:
    """The request with its run, whether it can still be answered and whether *you* may.

    Any key, a person who may see the run, or one its authority names by role (who may
    answer, so must be able to read what they answer); 404 for anyone else.
    Returns ``{input_request, run, actionable, actionable_reason, may_answer}``.
    """
    with rb.db.read() as conn:
        req = requests.get(conn, who.tenant_id, request_id)
        run = None if req is None else runs.get_run(conn, who.tenant_id, req["run_id"])
        may = run is not None and may_answer(conn, who, run)
        if req is None or run is None or not (may or runs.can_see_run(conn, who, run["run_id"])):
            raise NotFound(f"no input request {request_id!r}")
    ok, why = request_actionable(req, run, rb.db.clock())
    return {
        "input_request": views.input_request_view(req, include_details=True),
        "run": views.run_view(run),
        "actionable": ok,
        "actionable_reason": why,
        "may_answer": may,
    }


def pending_view(
    conn: Any, tenant_id: str, run_id: str, *, include_details: bool
) -> dict[str, Any] | None:
    """The run's pending request for the run view, or None."""
    pending = requests.pending_for_run(conn, tenant_id, run_id)
    if not pending:
        return None
    return views.input_request_view(pending[-1], include_details=include_details)


def get_for_notification(conn: Any, note: dict[str, Any]) -> dict[str, Any] | None:
    if not note.get("input_request_id"):
        return None
    return requests.get(conn, note["tenant_id"], note["input_request_id"])


def may_answer(conn: Any, who: Principal, run: dict[str, Any]) -> bool:
    """The run's authority: its owner, the users it names, members of the roles it names.

    Tenant owners and admins see every run but answer only when named.
    """
    if not who.is_user or who.user_id is None:
        return False
    if who.user_id == run["owner_user_id"]:
        return True
    authority = run.get("authority") or {}
    if who.role in (authority.get("roles") or []):
        return True
    for ref in authority.get("users") or []:
        if ref == who.user_id:
            return True
        try:
            if accounts.find_user(conn, who.tenant_id, ref) == who.user_id:
                return True
        except NotFound:
            continue  # named, but no longer a member
    return False


def request_actionable(req: dict[str, Any], run: dict[str, Any], now: datetime) -> tuple[bool, str]:
    """Whether the request can still be answered, and why (not)."""
    blocked = views.request_blocked(req, now)
    if blocked is not None:
        return False, blocked
    if run["state"] != RunState.INPUT_REQUIRED:
        return False, f"run is now {run['state']}"
    return True, "awaiting an answer"


# --- answering -----------------------------------------------------------------------


def respond(
    rb: Runbell,
    who: Principal,
    request_id: str,
    body: dict[str, Any],
    idempotency_key: str | None,
) -> dict[str, Any]:
    """Answer a request once: ``{response, input_request, run}`` (see :func:`answer`)."""
    return answer(rb, who, request_id, body, idempotency_key).content()


def answer(
    rb: Runbell,
    who: Principal,
    request_id: str,
    body: dict[str, Any],
    idempotency_key: str | None,
) -> Answer:
    """Answer a request once; the exact answer to send (a replay is the stored one).

    Checks, in one transaction with the run and the request locked: the request exists in
    your tenant (404), you may answer it (403), an Idempotency-Key (422), a replay of that
    key (the stored 200 body, or 422 for another body), then the request is pending and
    not expired and the run and request versions are the ones you saw (409 with
    ``current``), then the decision fits the kind (422). A request found expired is
    marked expired even though the answer is refused.
    """
    fields = _answer_fields(body)
    digest = _digest({"input_request_id": request_id, **fields})
    try:
        return _respond(rb, who, request_id, fields, idempotency_key, digest)
    except IntegrityError:
        # A concurrent answer won the insert (one response per request) or stored this
        # Idempotency-Key first: the second pass answers from what it committed.
        return _respond(rb, who, request_id, fields, idempotency_key, digest)


def _respond(
    rb: Runbell,
    who: Principal,
    request_id: str,
    answer: dict[str, Any],
    key: str | None,
    digest: str,
) -> Answer:
    with rb.db.transaction() as tx:
        outcome = _respond_in_tx(rb, tx, who, request_id, answer, key, digest)
    if isinstance(outcome, Conflict):
        raise outcome  # raised after commit: the request was marked expired
    return outcome


def _respond_in_tx(
    rb: Runbell,
    tx: Tx,
    who: Principal,
    request_id: str,
    answer: dict[str, Any],
    key: str | None,
    digest: str,
) -> Answer | Conflict:
    conn, tenant_id = tx.conn, who.tenant_id
    found = requests.get(conn, tenant_id, request_id)
    if found is None:
        raise NotFound(f"no input request {request_id!r}")
    run = runs.require_run(conn, tenant_id, found["run_id"], for_update=True)
    req = requests.get(conn, tenant_id, request_id, for_update=True)
    assert req is not None  # requests are never deleted
    if not may_answer(conn, who, run):
        raise Forbidden(NOT_AUTHORIZED)
    assert who.user_id is not None
    if not key or not key.strip():
        raise ValidationFailed(
            "send an Idempotency-Key header (any unique string, reused only to retry "
            "this same answer)",
            field="Idempotency-Key",
        )
    ik = IdempotencyKey(tenant_id, who.user_id, idempotency.check_key(key) or key, digest)
    # Looked up under the run's lock: a concurrent answer under this key has committed
    # (and is replayed) or has not started.
    replay = idempotency.stored(conn, rb.box, ik)
    if replay is not None:
        log.info("input_request.replayed", input_request_id=request_id)
        return replay

    refused = _check_current(tx, req, run, answer)
    if refused is not None:
        return refused
    _check_decision(req, answer)
    idempotency.claim(tx, rb.box, ik)  # unused so far (looked up above, under the lock)

    decision, value = answer["decision"], answer["value"]
    requests.insert_response(
        conn,
        {
            "tenant_id": tenant_id,
            "input_request_id": request_id,
            "id": new_id("rsp"),
            "user_id": who.user_id,
            "decision": decision,
            "value": value,
            "expected_run_version": answer["expected_run_version"],
            "expected_request_version": answer["expected_request_version"],
            "idempotency_key": key,
            "created_at": tx.now,
        },
    )
    requests.close(conn, tenant_id, request_id, "answered", tx.now)
    version = run["version"] + 1
    tx.emit(
        tenant_id,
        PendingEvent(
            "input_request.answered",
            {
                "input_request_id": request_id,
                "run_id": run["run_id"],
                "decision": decision,
                "value": value,
                "answered_by": who.user_id,
                "answered_at": views.iso(tx.now),
                "version": version,
                "request_version": req["version"],
            },
            run_id=run["run_id"],
        ),
    )
    # Resolved everywhere: this closes every channel's pending deliveries at once.
    for note in notes.open_for_run(conn, tenant_id, run["run_id"]):
        if note.get("input_request_id") == request_id:
            close_notification(tx, note, "resolved", f"answered by {who.user_id}")
    run, _ = transitions.apply(
        rb,
        tx,
        run,
        RunState.WORKING.value,
        sequence=None,
        source_id=None,
        event_id=None,
        reason=f"answered: {decision}",
        error=None,
        effects_verified=None,
    )
    req = requests.get(conn, tenant_id, request_id)
    assert req is not None
    result: dict[str, Any] = {
        "response": {
            "input_request_id": request_id,
            "decision": decision,
            "value": value,
            "answered_by": {"id": req["answered_by_id"], "email": req["answered_by_email"]},
            "answered_at": views.iso(req["answered_at"]),
            "expected_run_version": answer["expected_run_version"],
            "expected_request_version": answer["expected_request_version"],
        },
        # Without details: this body is stored for replays, and details stay in one place.
        "input_request": views.input_request_view(req),
        "run": views.run_view(run),
    }
    log.info("input_request.answered", input_request_id=request_id, decision=decision)
    # Keys sorted, as documented; the answer is stored byte for byte for replays.
    return idempotency.settle(tx, rb.box, ik, 200, _canonical(result))


def _check_current(
    tx: Tx, req: dict[str, Any], run: dict[str, Any], answer: dict[str, Any]
) -> Conflict | None:
    """Raise the 409 for a request that cannot take this answer now.

    An expiry found here is committed (the request is marked expired), so that one is
    returned for the caller to raise after the commit rather than raised.
    """
    state = req["state"]
    if state == "answered":
        raise Conflict(
            f"This request was already answered by {req['answered_by_email']} "
            f"at {_words(req['answered_at'])}.",
            current=_current(run, req),
        )
    if state == "superseded":
        raise Conflict(
            f"A newer request replaced this one ({req['superseded_by']}).",
            current=_current(run, req),
        )
    if state == "cancelled":
        raise Conflict(
            f"This request was cancelled at {_words(req['closed_at'])}: the run stopped "
            f"waiting for it (it is now {run['state']}).",
            current=_current(run, req),
        )
    expires_at = req["expires_at"]
    if state == "expired" or (expires_at is not None and expires_at <= tx.now):
        if state == "pending":
            expire_in_tx(tx, req, run)
            req = {**req, "state": "expired", "closed_at": tx.now}
        return Conflict(
            f"This request expired at {_words(expires_at or req['closed_at'])}.",
            current=_current(run, req),
        )
    if run["state"] != RunState.INPUT_REQUIRED:
        raise Conflict(
            f"The run is no longer waiting for input (it is now {run['state']}).",
            current=_current(run, req),
        )
    if run["version"] != answer["expected_run_version"]:
        raise Conflict(
            "The run changed since this page was loaded "
            f"(version {answer['expected_run_version']} → {run['version']}).",
            current=_current(run, req),
        )
    if req["version"] != answer["expected_request_version"]:
        raise Conflict(
            "The request changed since this page was loaded "
            f"(version {answer['expected_request_version']} → {req['version']}).",
            current=_current(run, req),
        )
    return None


def _check_decision(req: dict[str, Any], answer: dict[str, Any]) -> None:
    kind, decision, value = req["kind"], answer["decision"], answer["value"]
    allowed = DECISIONS[kind]
    if decision not in allowed:
        raise ValidationFailed(
            f"an {kind} request takes decision {' or '.join(allowed)}, not {decision}"
            if kind == "approval"
            else f"a {kind} request takes decision answer, not {decision}",
            field="decision",
        )
    if kind == "approval":
        if value is not None:
            raise ValidationFailed("an approval takes no value", field="value")
    elif kind == "choice":
        ids = [o["id"] for o in req.get("options") or []]
        if value not in ids:
            raise ValidationFailed(
                f"value must be one of the option ids: {', '.join(ids)}", field="value"
            )
    elif not isinstance(value, str) or not value.strip():
        raise ValidationFailed("a text request needs a non-empty value", field="value")


def _answer_fields(body: dict[str, Any]) -> dict[str, Any]:
    decision = body.get("decision")
    if decision not in ("approve", "reject", "answer"):
        raise ValidationFailed("decision must be approve, reject or answer", field="decision")
    value = body.get("value")
    if value is not None and not isinstance(value, str):
        raise ValidationFailed("value must be a string", field="value")
    if value is not None and len(value) > MAX_TEXT:
        raise ValidationFailed(f"value is at most {MAX_TEXT} characters", field="value")
    out: dict[str, Any] = {"decision": decision, "value": value}
    for name in ("expected_run_version", "expected_request_version"):
        given = body.get(name)
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ValidationFailed(f"{name} must be a positive integer", field=name)
        out[name] = given
    return out


# --- expiry and cancellation ---------------------------------------------------------


def expire_requests(rb: Runbell, now: datetime, limit: int = 500) -> int:
    """Scheduler sweep: pending requests past ``expires_at`` become ``expired``.

    Their notifications close as ``expired`` and ``input_request.expired`` tells the
    runtime. The run stays ``input_required``: what to do next is the runtime's call.
    """
    with rb.db.read() as conn:
        due = requests.due_for_expiry(conn, now, limit)
    expired = 0
    for row in due:
        with rb.db.transaction(now=now) as tx:
            run = runs.get_run(tx.conn, row["tenant_id"], row["run_id"], for_update=True)
            req = requests.get(tx.conn, row["tenant_id"], row["id"], for_update=True)
            if (
                run is None
                or req is None
                or req["state"] != "pending"
                or req["expires_at"] is None
                or req["expires_at"] > tx.now
            ):
                continue  # answered, replaced or swept by another process meanwhile
            expire_in_tx(tx, req, run)
            expired += 1
    return expired


def expire_in_tx(tx: Tx, req: dict[str, Any], run: dict[str, Any]) -> None:
    tenant_id = req["tenant_id"]
    if not requests.close(tx.conn, tenant_id, req["id"], "expired", tx.now):
        return
    for note in notes.open_for_run(tx.conn, tenant_id, run["run_id"]):
        if note.get("input_request_id") == req["id"]:
            close_notification(tx, note, "expired", "input request expired")
    tx.emit(
        tenant_id,
        PendingEvent(
            "input_request.expired",
            {
                "input_request_id": req["id"],
                "run_id": run["run_id"],
                "state": "expired",
                "expired_at": views.iso(req["expires_at"]),
                "version": run["version"],
                "request_version": req["version"],
            },
            run_id=run["run_id"],
        ),
    )
    log.info("input_request.expired", input_request_id=req["id"], run_id=run["run_id"])


# --- helpers -------------------------------------------------------------------------


def _current(run: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    """The ``current`` of a 409: the run and the request now, without details."""
    return {"run": views.run_view(run), "input_request": views.input_request_view(req)}


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _canonical(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _canonical(doc[k]) for k in sorted(doc)}
    if isinstance(doc, list):
        return [_canonical(v) for v in doc]
    return doc


def _words(at: datetime | None) -> str:
    return "an unknown time" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
