"""Signal sources (admin) and the signed provider webhook ingress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from runbell.api.deps import Admin, CoreDep
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import SSRF_RULE, problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import SigningSecretIn, SourceCreate
from runbell.flows import sources
from runbell.flows.inputs import SourceBody

router = APIRouter(prefix="/v1/sources", tags=["sources"])


@router.post(
    "",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 413, 422, 503),
    openapi_extra=rules(
        rule("name", "unique in the tenant"),
        rule("reader.url_template", "a URL whose origin is the same whatever the run id"),
        rule("reader.base_url", "the API origin: not ending in /v1"),
        rule("reader.url", "a URL an HTTP client can parse"),
        rule("reader.api_key", "not blank"),
        rule("reader.bearer", "not blank"),
        rule("reader", SSRF_RULE, "unsafe-destination"),
    ),
)
def post_source(body: SourceCreate, who: Admin, core: CoreDep, key: IdemKey) -> Response:
    """Register a source. A webhook source answers with its signing secret, once."""
    fields = cast(SourceBody, body.model_dump())  # SourceCreate's fields
    return answered(sources.create_source(core, who.tenant_id, fields, key))


@router.get("", responses=problems(401, 403, 503))
def list_sources(who: Admin, core: CoreDep) -> Mapping[str, Any]:
    return sources.list_sources(core, who.tenant_id)


@router.post(
    "/{source_id}/rotate-secret",
    response_model=None,
    responses=problems(401, 403, 404, 413, 422, 503),
)
def rotate_secret(
    source_id: str,
    who: Admin,
    core: CoreDep,
    key: IdemKey,
    body: SigningSecretIn | None = None,
) -> Response:
    """Add a new signing secret (Runbell's, shown once; or, with a body, the provider's
    own); the previous one stays valid until the next rotation."""
    provided = body.signing_secret if body is not None else None
    return answered(sources.rotate_secret(core, who.tenant_id, source_id, key, provided))


@router.post("/{source_id}/webhook", responses=problems(401, 404, 409, 413, 422, 503))
async def provider_webhook(source_id: str, request: Request, core: CoreDep) -> Mapping[str, Any]:
    """A Standard Webhooks-signed provider event, mapped to signals and accepted."""
    body = await request.body()
    address = request.client.host if request.client else None
    return await run_in_threadpool(
        sources.provider_webhook, core, source_id, body, request.headers, address
    )
