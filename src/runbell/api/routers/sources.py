"""Signal sources (admin) and the signed provider webhook ingress."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from runbell.api.deps import Admin, Core
from runbell.api.idempotent import IdemKey, act_once
from runbell.api.openapi import problems
from runbell.api.schemas import SourceCreate
from runbell.domain.errors import NotFound, ValidationFailed
from runbell.flows import signals
from runbell.flows.context import Runbell
from runbell.flows.idempotency import once
from runbell.flows.signals import Signal
from runbell.ingress.mappers import MAPPERS
from runbell.ingress.readers import reader_from_config
from runbell.ingress.signatures import HEADER_ID, new_secret, verify_signed
from runbell.store import accounts
from runbell.store.db import Tx

router = APIRouter(prefix="/v1/sources", tags=["sources"])


def source_view(src: dict[str, Any]) -> dict[str, Any]:
    reader = src.get("reader")
    if reader:
        # Header values may be credentials: show only that they are set.
        reader = {**reader, "headers": dict.fromkeys(reader.get("headers") or {}, "***")}
    return {
        "id": src["id"],
        "name": src["name"],
        "kind": src["kind"],
        "mapper": src["mapper"],
        "trust": src["trust"],
        "reader": reader,
        "secrets": len(src.get("secrets") or []),
        "webhook_url": f"/v1/sources/{src['id']}/webhook" if src["kind"] == "webhook" else None,
    }


def check_destination(core: Runbell, url: str) -> None:
    """Refuse an unsafe URL at registration; it is checked again on every call.

    A name that does not resolve right now is accepted here (DNS may be down); the
    per-call check, which dials only the address it checked, is the real guard.
    """
    from runbell.domain.ssrf import check_url
    from runbell.outbound import make_resolver

    try:
        check_url(url, allow_hosts=core.settings.outbound_allow_hosts, resolve=make_resolver())
    except OSError:
        return


def create_source(core: Runbell, tenant_id: str, body: SourceCreate) -> dict[str, Any]:
    """Register a source (the CLI's ``runbell source create`` too)."""
    return once(core.db, core.box, None, source_creation(core, tenant_id, body)).content()


def source_creation(
    core: Runbell, tenant_id: str, body: SourceCreate
) -> Callable[[Tx], tuple[int, dict[str, Any]]]:
    """Check a new source now (outside any transaction: the SSRF check resolves names);
    the action inserts it and answers 201 with the signing secret, shown once."""
    if body.kind == "webhook" and body.mapper is None:
        raise ValidationFailed("a webhook source needs a mapper: generic or openai", field="mapper")
    if body.trust == "advisory" and body.reader is None:
        raise ValidationFailed(
            "an advisory source needs a state reader to confirm signals", field="reader"
        )
    reader = None
    if body.reader is not None:
        reader = body.reader.model_dump()
        # Build it once now: a config that cannot work is refused here, naming the field,
        # instead of failing every later signal of this source.
        with httpx.Client() as throwaway:
            try:
                reader_from_config(reader, throwaway)
            except ValidationFailed as exc:
                # Name the field as the caller wrote it: "reader.url_template".
                raise ValidationFailed(
                    exc.detail, field=f"reader.{exc.extra.get('field', 'type')}"
                ) from exc
        check_destination(core, reader["url_template"].replace("{run_id}", "probe"))
        reader["headers"] = {k: core.box.seal(v) for k, v in reader["headers"].items()}
    secret = new_secret() if body.kind == "webhook" else None

    def act(tx: Tx) -> tuple[int, dict[str, Any]]:
        source_id = accounts.create_source(
            tx.conn,
            tenant_id,
            tx.now,
            name=body.name,
            kind=body.kind,
            trust=body.trust,
            mapper=body.mapper,
            reader=reader,
            sealed_secrets=[core.box.seal(secret)] if secret else None,
        )
        out = source_view(accounts.get_source(tx.conn, tenant_id, source_id))
        if secret:
            out["signing_secret"] = secret  # shown once (and in a replay of this answer)
        return 201, out

    return act


@router.post("", status_code=201, response_model=None, responses=problems(401, 403, 413, 422, 503))
def post_source(body: SourceCreate, who: Admin, core: Core, key: IdemKey) -> Response:
    """Register a source. A webhook source answers with its signing secret, once."""
    return act_once(core, key, lambda: source_creation(core, who.tenant_id, body))


@router.get("", responses=problems(401, 403, 503))
def list_sources(who: Admin, core: Core) -> dict[str, Any]:
    with core.db.read() as conn:
        return {"sources": [source_view(s) for s in accounts.list_sources(conn, who.tenant_id)]}


@router.post(
    "/{source_id}/rotate-secret",
    response_model=None,
    responses=problems(401, 403, 404, 413, 422, 503),
)
def rotate_secret(source_id: str, who: Admin, core: Core, key: IdemKey) -> Response:
    """Add a new signing secret; the previous one stays valid until the next rotation."""

    def act(tx: Tx) -> tuple[int, dict[str, Any]]:
        secret = new_secret()
        src = accounts.get_source(tx.conn, who.tenant_id, source_id)
        if src["kind"] != "webhook":
            raise ValidationFailed("only webhook sources have signing secrets", field="source_id")
        sealed = [core.box.seal(secret), *(src.get("secrets") or [])][:2]
        accounts.update_source_secrets(tx.conn, who.tenant_id, source_id, sealed)
        src = accounts.get_source(tx.conn, who.tenant_id, source_id)
        return 200, {**source_view(src), "signing_secret": secret}

    return act_once(core, key, lambda: act)


@router.post("/{source_id}/webhook", responses=problems(401, 404, 409, 413, 422, 503))
async def provider_webhook(source_id: str, request: Request, core: Core) -> dict[str, Any]:
    """A Standard Webhooks-signed provider event, mapped to signals and accepted."""
    body = await request.body()

    def handle() -> dict[str, Any]:
        with core.db.read() as conn:
            try:
                src = accounts.get_source(conn, None, source_id)
            except NotFound:
                raise NotFound(f"no webhook source {source_id!r}") from None
        if src["kind"] != "webhook":
            raise NotFound(f"no webhook source {source_id!r}")
        secrets = [core.box.open(s) for s in src.get("secrets") or []]
        verify_signed(body, request.headers, secrets, now=core.db.clock())
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurd nesting
            raise ValidationFailed("body is not JSON", field="body") from exc
        mapped = MAPPERS[src["mapper"] or "generic"](payload, request.headers[HEADER_ID])
        results = []
        for m in mapped:
            res = signals.accept_signal(
                core,
                src["tenant_id"],
                src,
                m.run_id,
                Signal(
                    event_id=m.event_id,
                    state=m.state,
                    sequence=m.sequence,
                    at=m.at,
                    reason=m.reason,
                    error=m.error,
                ),
            )
            # No reason text here: it can name the state reader's URL, which the
            # provider has no business seeing.
            results.append({"run_id": m.run_id, "event_id": m.event_id, "outcome": res.outcome})
        return {"accepted": len(results), "results": results}

    return await run_in_threadpool(handle)
