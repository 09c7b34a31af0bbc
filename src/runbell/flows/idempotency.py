"""Idempotency-Key: a POST that creates or acts runs at most once per key (DESIGN §6;
invariant 9 for answers, and its "a repeated action returns the original result" for
every other create/act POST).

The one mechanism every such endpoint uses. A client sends ``Idempotency-Key: <1 to 200
characters>``; the key is scoped to the caller (tenant, and API key id or user id) and
bound to a fingerprint of the request (method, path, query and body):

- the first request with a key claims it and acts; its answer (status and exact bytes) is
  stored **in the same transaction** as the action, so the effect and the record commit
  together or not at all — a crash in between cannot allow a second effect on retry;
- the same key with the same request again returns that answer, byte for byte, without
  acting (``Answer.replayed``);
- the same key with another request is a 422 naming ``Idempotency-Key``;
- a request that fails (any 4xx/5xx) commits nothing, so the key stays unused and a
  corrected retry under it runs normally.

Two requests with one key at the same moment: the second's claim waits on the first's
uncommitted record (PostgreSQL) or on the write lock (SQLite), then sees the stored answer.
Answers are stored sealed with the service's :class:`~runbell.crypto.SecretBox`: some show
a secret once (a webhook endpoint's or a source's signing secret) and replay it, others
carry a request's sensitive ``details``.

Flows that create or act take the caller's key (None when absent) and return the
:class:`Answer`; the face renders its status and bytes. Example (a flow)::

    def create_thing(core, who, body, key=None) -> Answer:
        def prepare() -> Act:
            check_outside_the_transaction(body)
            return lambda tx: (201, insert_thing(tx, who, body))
        return act_once(core.db, core.box, key, prepare)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from runbell import metrics
from runbell.crypto import SecretBox
from runbell.domain.errors import ValidationFailed
from runbell.domain.records import IdempotencyRecord
from runbell.flows.views import json_body
from runbell.store import idempotency as records
from runbell.store.db import Database, Tx

log = structlog.get_logger(__name__)

HEADER = "Idempotency-Key"
MAX_KEY = 200


@dataclass(frozen=True)
class IdempotencyKey:
    """A key as one caller sent it, with the fingerprint of the request it came with."""

    tenant_id: str
    principal: str  # the API key id or the user id: keys are never shared between callers
    key: str
    digest: str


@dataclass(frozen=True)
class Answer:
    """What to send: the status and the exact JSON bytes; ``replayed`` for a stored one."""

    status: int
    body: bytes
    replayed: bool = False


def check_key(value: str | None) -> str | None:
    """The header's value, or None when absent; 422 naming the header when unusable."""
    if value is None:
        return None
    if not value.strip():
        raise ValidationFailed(f"{HEADER} must not be blank", field=HEADER)
    if len(value) > MAX_KEY:
        raise ValidationFailed(f"{HEADER} is at most {MAX_KEY} characters", field=HEADER)
    return value


def answer_key(tenant_id: str, user_id: str, value: str | None, digest: str) -> IdempotencyKey:
    """The key of a person's answer (to a request, a review, an amendment), which must
    carry one: a retried answer is replayed, never applied twice. 422 naming the header
    when it is missing or unusable."""
    if not value or not value.strip():
        raise ValidationFailed(
            f"send an {HEADER} header (any unique string, reused only to retry this same answer)",
            field=HEADER,
        )
    return IdempotencyKey(tenant_id, user_id, check_key(value) or value, digest)


def fingerprint(doc: Any) -> str:
    """A stable hash of what the request asked for (key order does not matter)."""
    canonical = json.dumps(doc, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


#: A repeated request answered from its Idempotency-Key record, nothing done again.
REPLAYED = metrics.DUPLICATES.labels("idempotency_key")


def stored(conn: Connection, box: SecretBox, key: IdempotencyKey) -> Answer | None:
    """The committed answer for this key, if any (422 when it was another request's)."""
    found = records.get(conn, key.tenant_id, key.principal, key.key)
    if found is None or found["status_code"] == records.CLAIMED:
        return None
    answer = _replay(box, key, found)
    REPLAYED.inc()  # a read: nothing to commit
    return answer


def claim(tx: Tx, box: SecretBox, key: IdempotencyKey) -> Answer | None:
    """In the acting transaction, before it acts: the stored answer when this is a retry
    (422 when the key was used for another request), else claim the key and return None."""
    found = records.get(tx.conn, key.tenant_id, key.principal, key.key)
    if found is None:
        records.claim(tx.conn, key.tenant_id, key.principal, key.key, key.digest, tx.now)
        return None
    answer = _replay(box, key, found)
    tx.after_commit.append(REPLAYED.inc)
    return answer


def _replay(box: SecretBox, key: IdempotencyKey, found: IdempotencyRecord) -> Answer:
    if found["request_hash"] != key.digest:
        raise ValidationFailed(
            f"this {HEADER} was already used with a different request; use a new key for "
            "a new request",
            field=HEADER,
        )
    log.info("idempotency.replayed", status=found["status_code"])
    return Answer(found["status_code"], _opened(box, found), replayed=True)


def settle(tx: Tx, box: SecretBox, key: IdempotencyKey, status: int, content: Any) -> Answer:
    """Store the answer in the same transaction as the action; returns what to send."""
    body = json_body(content)
    sealed = {"sealed": box.seal(body.decode())}
    records.settle(tx.conn, key.tenant_id, key.principal, key.key, status, sealed)
    return Answer(status, body)


def once(
    db: Database,
    box: SecretBox,
    key: IdempotencyKey | None,
    act: Callable[[Tx], tuple[int, Any]],
) -> Answer:
    """Run ``act(tx) -> (status, content)`` in one transaction, at most once per ``key``.

    Without a key it simply runs. A constraint violation (a concurrent request under the
    same key, or the action's own unique row) rolls everything back and is tried once more:
    the retry finds the winner's answer, or the row the action then handles.
    """

    def attempt() -> Answer:
        with db.transaction() as tx:
            if key is not None:
                stored = claim(tx, box, key)
                if stored is not None:
                    return stored
            status, content = act(tx)
            if key is None:
                return Answer(status, json_body(content))
            return settle(tx, box, key, status, content)

    try:
        return attempt()
    except IntegrityError:
        return attempt()


def _opened(box: SecretBox, found: IdempotencyRecord) -> bytes:
    response = found["response"]
    if set(response) == {"sealed"}:
        return box.open(response["sealed"]).encode()
    # An answer stored before answers were sealed: the body object itself, stored with its
    # keys sorted (PostgreSQL's JSONB reorders them, so sort again).
    return json_body(_sorted(response))


def _sorted(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _sorted(doc[k]) for k in sorted(doc)}
    if isinstance(doc, list):
        return [_sorted(v) for v in doc]
    return doc


Act = Callable[[Tx], tuple[int, Any]]


def act_once(
    db: Database, box: SecretBox, key: IdempotencyKey | None, prepare: Callable[[], Act]
) -> Answer:
    """A create/act use case at most once per ``key``: a retry is answered from its stored
    answer before anything else; otherwise ``prepare()`` runs (checks and outbound
    look-ups, outside any transaction) and the action it returns runs through
    :func:`once`."""
    if key is not None:
        with db.read() as conn:
            found = stored(conn, box, key)
        if found is not None:
            return found
    return once(db, box, key, prepare())
