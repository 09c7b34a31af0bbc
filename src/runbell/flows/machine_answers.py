"""Machines that answer (issue 19 item 4): who may, and minting callback URLs.

Two kinds of machine answer an input request, through the same answer flow as a person
(:mod:`runbell.flows.answers`, with every check of a person's answer):

- a **callback URL** (``…/v1/callbacks/rbc_…``), minted when the request is opened
  (``callback: {"decisions": [...]}``) or later by a runtime credential: single use, bound
  to the request id and the run and request versions it was minted at, expiring with the
  request, optionally limited to some decisions (:mod:`runbell.flows.callbacks` answers);
- a **runtime key** whose scope names ``input_requests.answer`` (never implied by an
  unscoped key), on ``POST /v1/input-requests/{id}/responses``.

Both are recorded as answered by the machine (the trace's actor: its kind and id), and a
tenant can turn both off (``runbell tenant machines off``).
"""

from __future__ import annotations

from typing import Any, TypedDict

import structlog

from runbell.domain import capabilities
from runbell.domain.errors import Conflict, Forbidden, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import InputRequest, Run
from runbell.flows import scope, views
from runbell.flows.context import Core
from runbell.flows.inputs import CallbackBody
from runbell.flows.ownership import actor_of
from runbell.store import accounts
from runbell.store import input_requests as requests
from runbell.store import machine_answers as store
from runbell.store.db import Tx

log = structlog.get_logger(__name__)

#: The ``kind`` of a callback URL's principal (and of its actor in the trace).
CALLBACK = "callback"
DISABLED = (
    "machine answers (callback URLs and keys with input_requests.answer) are turned off "
    "for this tenant"
)
DECISIONS: dict[str, tuple[str, ...]] = {
    "approval": ("approve", "reject"),
    "choice": ("answer",),
    "text": ("answer",),
}


class CallbackView(TypedDict):
    """A minted callback URL: ``url`` is shown once (it carries the token)."""

    id: str
    url: str
    input_request_id: str
    decisions: list[str]
    expires_at: str | None
    run_version: int
    request_version: int


def callback_principal(tenant_id: str, callback_id: str) -> Principal:
    """Who answers through a callback URL: no person, no key; the callback's id."""
    return Principal(tenant_id=tenant_id, kind=CALLBACK, role="machine", key_id=callback_id)


def is_machine(who: Principal) -> bool:
    return not who.is_user


def check_machine(conn: Any, who: Principal, run: Run) -> None:
    """A machine may answer ``run``'s requests: a callback (checked by its flow), or a key
    whose scope names ``input_requests.answer`` and holds the run; and the tenant lets
    machines answer. 403 naming the capability, 404 for a run outside the key's scope,
    403 when the tenant turned machine answers off."""
    if who.kind == "key":
        if not capabilities.may_answer(who.scope):
            raise capabilities.refuse(capabilities.ANSWER)
        scope.check_run(who, run, run.run_id)
    elif who.kind != CALLBACK:
        raise Forbidden("only a person, a callback URL or a key may answer")
    if not accounts.machine_answers(conn, who.tenant_id):
        raise Forbidden(DISABLED)


def parse_callback(given: object, kind: str, field: str = "callback") -> list[str] | None:
    """``callback: {"decisions": [...]}`` (None: no callback), the decisions checked
    against the request's kind; omitted decisions: all the kind takes."""
    if given is None:
        return None
    if not isinstance(given, dict) or set(given) - {"decisions"}:
        raise ValidationFailed(f'{field} is {{"decisions": [...]}} or {{}}', field=field)
    allowed = DECISIONS.get(kind, ())
    decisions = given.get("decisions")
    if decisions is None:
        return list(allowed)
    if (
        not isinstance(decisions, list)
        or not decisions
        or not all(isinstance(d, str) and d in allowed for d in decisions)
    ):
        raise ValidationFailed(
            f"{field}.decisions: a non-empty list of {', '.join(allowed)}",
            field=f"{field}.decisions",
        )
    return [d for d in allowed if d in decisions]


def mint_in_tx(
    core: Core, tx: Tx, who: Principal, run: Run, req: InputRequest, decisions: list[str]
) -> CallbackView:
    """A callback URL for ``req`` at the run's current version, in the caller's
    transaction (the run locked). 403 when the tenant turned machine answers off."""
    if not accounts.machine_answers(tx.conn, who.tenant_id):
        raise Forbidden(DISABLED)
    callback, token = store.create(
        tx.conn,
        tenant_id=who.tenant_id,
        input_request_id=req.id,
        run_id=run.run_id,
        run_version=run.version,
        request_version=req.version,
        decisions=decisions,
        created_by=actor_of(who),
        now=tx.now,
        expires_at=req.expires_at,
    )
    log.info("callback_url.minted", input_request_id=req.id, callback_id=callback.id)
    return {
        "id": callback.id,
        "url": f"{core.public_url}/v1/callbacks/{token}",
        "input_request_id": req.id,
        "decisions": decisions,
        "expires_at": views.iso(callback.expires_at),
        "run_version": callback.run_version,
        "request_version": callback.request_version,
    }


def mint(core: Core, who: Principal, request_id: str, body: CallbackBody) -> CallbackView:
    """``POST /v1/input-requests/{id}/callback-urls``: a new callback URL for a pending
    request of a run the credential may ask on (``input_requests.create``). 404 outside
    its scope, 409 when the request is no longer pending or has expired."""
    who.require(capabilities.ASK)
    with core.db.read() as conn:  # the run it belongs to: the writer's lock key
        found = requests.get(conn, who.tenant_id, request_id)
    if found is None:
        raise NotFound(f"no input request {request_id!r}")
    run_id = found.run_id

    def unit(tx: Tx) -> CallbackView:
        run = scope.require_run(tx.conn, who, run_id, capabilities.ASK, for_update=True)
        req = requests.get(tx.conn, who.tenant_id, request_id, for_update=True)
        assert req is not None  # requests are never deleted
        if req.purpose != "run":
            raise NotFound(f"no input request {request_id!r}")
        decisions = parse_callback(body, req.kind, field="body")
        assert decisions is not None
        blocked = views.request_blocked(req, tx.now)
        if blocked is not None:
            raise Conflict(
                f"this request can no longer be answered ({blocked})",
                current={"input_request": views.input_request_view(req)},
            )
        return mint_in_tx(core, tx, who, run, req, decisions)

    return core.writer.run(unit, key=(who.tenant_id, run_id))  # flows.written


def set_allowed(core: Core, tenant_id: str, allowed: bool) -> None:
    """Turn machine answers on or off for a tenant (the CLI's ``tenant machines``)."""
    with core.db.transaction() as tx:
        accounts.set_machine_answers(tx.conn, tenant_id, allowed)
    log.info("tenant.machine_answers", tenant_id=tenant_id, allowed=allowed)


def allowed(core: Core, tenant_id: str) -> bool:
    with core.db.read() as conn:
        return accounts.machine_answers(conn, tenant_id)
