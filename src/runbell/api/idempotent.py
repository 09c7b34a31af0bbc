"""The ``Idempotency-Key`` header on the API's create/act POSTs (see
:mod:`runbell.flows.idempotency`).

Routers take :data:`IdemKey` (None when the header is absent: the key is optional, except
on answers, which require it), pass it to the flow they call, and render the flow's
``Answer`` with :func:`runbell.api.responses.answered`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from fastapi import Depends, Header, Request

from runbell.api.deps import Who
from runbell.flows import idempotency
from runbell.flows.idempotency import HEADER, IdempotencyKey

KEY_DOC = (
    "optional, 1 to 200 characters, a fresh value per intended action: a retry with the same "
    "key and the same request returns the original answer (status and body, with "
    "Idempotent-Replayed: true) without acting again; the same key with another request "
    "is a 422"
)


async def idempotency_key(
    request: Request,
    who: Who,
    value: Annotated[
        str | None, Header(alias=HEADER, description=KEY_DOC, min_length=1, max_length=200)
    ] = None,
) -> IdempotencyKey | None:
    """The caller's key bound to this request (method, path, query and body), or None."""
    key = idempotency.check_key(value)
    if key is None:
        return None
    raw = await request.body()  # cached: the route reads the same bytes
    try:
        body: Any = json.loads(raw) if raw.strip() else None
    except (ValueError, RecursionError):  # not JSON: the route will say so; hash the bytes
        body = {"bytes": hashlib.sha256(raw).hexdigest()}
    digest = idempotency.fingerprint(
        {
            "method": request.method,
            "path": request.url.path,
            "query": sorted(request.query_params.multi_items()),
            "body": body,
        }
    )
    principal = who.user_id or who.credential_id  # a delegated token: its own, not its key's
    assert principal is not None  # every credential is a key or a person
    return IdempotencyKey(who.tenant_id, principal, key, digest)


IdemKey = Annotated[IdempotencyKey | None, Depends(idempotency_key)]
