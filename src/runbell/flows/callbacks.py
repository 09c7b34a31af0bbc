"""Answering through a callback URL (issue 19 item 4): one POST, no API key.

``POST /v1/callbacks/{token}`` with ``{"decision": "approve", "value"?: ...}`` answers the
request the URL was minted for, through the same answer flow as a person
(:func:`runbell.flows.answers.respond_in_tx`): bound to the request id and to the run and
request versions the URL was minted at, refused once the request expired, was answered,
cancelled or superseded. The URL works once: a second use is a 410, as is a use after the
request's expiry. A tenant that turned machine answers off gets a 403.

Example::

    answer(core, "rbc_…", {"decision": "approve"})
"""

from __future__ import annotations

from typing import Any

import structlog
from sqlalchemy.exc import IntegrityError

from runbell.domain.errors import Conflict, Forbidden, Gone, NotFound, ValidationFailed
from runbell.flows import answers, machine_answers, written
from runbell.flows.context import Core
from runbell.flows.idempotency import Answer
from runbell.flows.input_requests import AnswerFields, fingerprint
from runbell.flows.inputs import CallbackAnswerBody
from runbell.store import machine_answers as store
from runbell.store.db import Tx

log = structlog.get_logger(__name__)

MAX_TOKEN = 200


def answer(core: Core, token: str, body: CallbackAnswerBody) -> Answer:
    """Answer the callback's request once; the answer's 200 (the same body as a person's
    answer). 404 for an unknown token, 410 when used or expired, 403 when the tenant
    turned machine answers off or the decision is not one the URL allows, 409 when the
    request moved on, 422 for a malformed body or a value its schema refuses."""
    if not token.startswith(f"{store.PREFIX}_") or len(token) > MAX_TOKEN:
        raise NotFound("no such callback URL")
    decision, value = _body(body)
    try:
        return _answer(core, token, decision, value)
    except IntegrityError:
        # A concurrent use answered first: the second pass sees the callback used.
        return _answer(core, token, decision, value)


def _answer(core: Core, token: str, decision: str, value: Any) -> Answer:
    """One unit of the process's writer (flows.written), under the lock key of the run
    the callback answers on."""
    with core.db.read() as conn:
        callback = store.by_token(conn, token)
    if callback is None:
        raise NotFound("no such callback URL")
    outcome = written.write(
        core,
        callback.tenant_id,
        callback.run_id,
        lambda tx: _answer_in_tx(core, tx, token, decision, value),
    )
    if isinstance(outcome, Conflict):
        raise outcome  # raised after commit: the request was marked expired
    return outcome


def _answer_in_tx(core: Core, tx: Tx, token: str, decision: str, value: Any) -> Answer | Conflict:
    callback = store.by_token(tx.conn, token)
    if callback is None:
        raise NotFound("no such callback URL")
    if callback.used_at is not None:
        raise Gone("this callback URL was already used: each works once")
    if callback.expires_at is not None and callback.expires_at <= tx.now:
        raise Gone("this callback URL expired with its request")
    if decision not in callback.decisions:
        raise Forbidden(
            f"this callback URL answers only {' or '.join(callback.decisions)}, not {decision}"
        )
    fields: AnswerFields = {
        "decision": decision,
        "value": value,
        "expected_run_version": callback.run_version,
        "expected_request_version": callback.request_version,
    }
    who = machine_answers.callback_principal(callback.tenant_id, callback.id)
    request_id = callback.input_request_id
    digest = fingerprint({"input_request_id": request_id, **fields})
    asked = answers.Asked(who, request_id, fields, callback.id, digest, callback.run_id)
    outcome = answers.respond_in_tx(core, tx, asked)
    if isinstance(outcome, Conflict):
        return outcome
    if outcome.replayed or not store.use(tx.conn, callback.id, tx.now):
        # Its answer is stored under the callback's id: only a use that already
        # committed finds it, and that use marked the URL used.
        raise Gone("this callback URL was already used: each works once")
    log.info("callback_url.used", callback_id=callback.id, input_request_id=request_id)
    return outcome


def _body(body: object) -> tuple[str, Any]:
    if not isinstance(body, dict):
        raise ValidationFailed('send a JSON object: {"decision": "approve"}')
    unknown = sorted(set(body) - {"decision", "value"})
    if unknown:
        raise ValidationFailed(f"unknown field {unknown[0]!r}", field=unknown[0])
    decision = body.get("decision")
    if decision not in ("approve", "reject", "answer"):
        raise ValidationFailed("decision must be approve, reject or answer", field="decision")
    value = body.get("value")
    if isinstance(value, str) and len(value) > answers.MAX_TEXT:
        raise ValidationFailed(f"value is at most {answers.MAX_TEXT} characters", field="value")
    return decision, value
