"""Signal sources: register one (its trust, its state reader, its signing secret), list
them, rotate a webhook source's secret, and take a provider's signed webhook in.

Invariants kept here (DESIGN §2):

- 3: an advisory source cannot be registered without a state reader to confirm its
  signals, and a reader config that cannot work is refused at registration, naming the
  field, instead of failing every later signal.
- 14 and 11: a reader's URL passes the SSRF guard when registered (and again on every
  call); its header values may be credentials, so they are sealed at rest and shown only
  as ``***``. A signing secret is shown once (and in a replay of that answer).
- A provider webhook is accepted only with a valid Standard Webhooks signature from one
  of the source's live secrets; each mapped signal then goes through
  :func:`runbell.flows.signals.accept_signal` (dedupe, reconcile, one transaction each).

The API (``/v1/sources``) and ``runbell source create`` both call these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import httpx

from runbell.domain.errors import NotFound, Unauthorized, UnsafeDestination, ValidationFailed
from runbell.flows import auth_failures, signals
from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey, act_once
from runbell.flows.inputs import SourceBody
from runbell.flows.signals import Signal
from runbell.ingress import reader_kinds
from runbell.ingress.mappers import MAPPERS
from runbell.signatures import HEADER_ID, check_secret, new_secret, verify_signed
from runbell.store import accounts
from runbell.store.accounts import Source
from runbell.store.db import Tx


class SourceView(TypedDict):
    """A source as the API shows it: reader header values masked, secrets counted."""

    id: str
    name: str
    kind: str
    mapper: str | None
    trust: str
    reader: dict[str, Any] | None  # the state reader's config, credentials masked
    secrets: int
    webhook_url: str | None
    signing_secret: NotRequired[str]  # shown once, when made


class SourceList(TypedDict):
    sources: list[SourceView]


class ProviderResult(TypedDict):
    run_id: str
    event_id: str
    outcome: str


class ProviderAnswer(TypedDict):
    """A provider webhook's answer: no reason texts (they can name the reader's URL)."""

    accepted: int
    results: list[ProviderResult]


def source_view(src: Source) -> SourceView:
    """A source as the API shows it: reader header values masked, secrets counted."""
    reader = src.reader
    if reader:
        # Header values, API keys and bearer tokens are credentials: shown only as set.
        reader = reader_kinds.masked(reader)
    return {
        "id": src.id,
        "name": src.name,
        "kind": src.kind,
        "mapper": src.mapper,
        "trust": src.trust,
        "reader": reader,
        "secrets": len(src.secrets or []),
        "webhook_url": f"/v1/sources/{src.id}/webhook" if src.kind == "webhook" else None,
    }


#: Each reader kind's URL field, for a refused destination's problem.
_URL_FIELD = {"http_json": "url_template", "openai_responses": "base_url", "mcp_tasks": "url"}


def check_destination(core: Core, url: str, field: str | None = None) -> None:
    """Refuse an unsafe URL at registration; it is checked again on every call.

    A name that does not resolve right now is accepted here (DNS may be down); the
    per-call check, which dials only the address it checked, is the real guard.
    """
    from runbell.domain.ssrf import check_url
    from runbell.outbound import make_resolver

    try:
        check_url(
            url,
            allow_hosts=core.settings.outbound_allow_hosts,
            resolve=make_resolver(),
            field=field,
        )
    except OSError:
        return


def create_source(
    core: Core, tenant_id: str, body: SourceBody, key: IdempotencyKey | None = None
) -> Answer:
    """Register a source (201); a webhook source's answer carries its signing secret, once.

    ``body`` is ``{name, kind, mapper, trust, reader}`` as the API schema parsed it
    (``reader``: the state reader config, or None). The checks run outside any
    transaction (the SSRF check resolves names), after a retry's stored answer."""
    return act_once(core.db, core.box, key, lambda: _creation(core, tenant_id, body))


def _creation(core: Core, tenant_id: str, body: SourceBody) -> Act:
    kind, mapper, trust = body["kind"], body.get("mapper"), body["trust"]
    if kind == "webhook" and mapper is None:
        raise ValidationFailed("a webhook source needs a mapper: generic or openai", field="mapper")
    if trust == "advisory" and body.get("reader") is None:
        raise ValidationFailed(
            "an advisory source needs a state reader to confirm signals", field="reader"
        )
    reader = None
    given = body.get("reader")
    if given is not None:
        reader = dict(given)
        url_field = _URL_FIELD.get(str(reader.get("type")), "type")
        # Build it once now: a config that cannot work is refused here, naming the field,
        # instead of failing every later signal of this source.
        with httpx.Client() as throwaway:
            try:
                reader_kinds.build(
                    reader, throwaway, allow_hosts=core.settings.outbound_allow_hosts
                )
            except UnsafeDestination as exc:
                # Name the field as the caller wrote it: "reader.url_template".
                exc.extra["field"] = f"reader.{exc.extra.get('field') or url_field}"
                raise
            except ValidationFailed as exc:
                raise ValidationFailed(
                    exc.detail, field=f"reader.{exc.extra.get('field', 'type')}"
                ) from exc
        check_destination(core, reader_kinds.destination(reader), f"reader.{url_field}")
        reader = reader_kinds.seal(reader, core.box.seal)
    provided = body.get("signing_secret")
    if provided is not None and kind != "webhook":
        raise ValidationFailed("only webhook sources have signing secrets", field="signing_secret")
    # A provider that makes its own secret (OpenAI does) hands it over; otherwise we make
    # one and show it once.
    secret = check_secret(provided) if provided is not None else None
    if secret is None and kind == "webhook":
        secret = new_secret()

    def act(tx: Tx) -> tuple[int, SourceView]:
        source_id = accounts.create_source(
            tx.conn,
            tenant_id,
            tx.now,
            name=body["name"],
            kind=kind,
            trust=trust,
            mapper=mapper,
            reader=reader,
            sealed_secrets=[core.box.seal(secret)] if secret else None,
        )
        out = source_view(accounts.get_source(tx.conn, tenant_id, source_id))
        if secret and provided is None:
            out["signing_secret"] = secret  # shown once (and in a replay of this answer)
        return 201, out

    return act


def list_sources(core: Core, tenant_id: str) -> SourceList:
    """The tenant's sources, as views."""
    with core.db.read() as conn:
        return {"sources": [source_view(s) for s in accounts.list_sources(conn, tenant_id)]}


def rotate_secret(
    core: Core,
    tenant_id: str,
    source_id: str,
    key: IdempotencyKey | None = None,
    provided: str | None = None,
) -> Answer:
    """A new signing secret (200; ours is shown once, a ``provided`` one — the provider's,
    after it rotated — is not echoed); the previous one stays valid until the next
    rotation."""
    if provided is not None:
        check_secret(provided)

    def act(tx: Tx) -> tuple[int, SourceView]:
        secret = provided if provided is not None else new_secret()
        src = accounts.get_source(tx.conn, tenant_id, source_id)
        if src.kind != "webhook":
            raise ValidationFailed("only webhook sources have signing secrets", field="source_id")
        sealed = [core.box.seal(secret), *(src.secrets or [])][:2]
        accounts.update_source_secrets(tx.conn, tenant_id, source_id, sealed)
        src = accounts.get_source(tx.conn, tenant_id, source_id)
        if provided is not None:
            return 200, source_view(src)
        return 200, {**source_view(src), "signing_secret": secret}

    return act_once(core.db, core.box, key, lambda: act)


def provider_webhook(
    core: Core,
    source_id: str,
    body: bytes,
    headers: Mapping[str, str],
    address: str | None = None,
) -> ProviderAnswer:
    """A Standard Webhooks-signed provider event: verified against the source's live
    secrets (401 otherwise; 429 past the failed-authentication burst of ``address`` or of
    the source, :mod:`runbell.flows.auth_failures`), mapped to signals, each accepted in
    its own transaction. Returns ``{accepted, results: [{run_id, event_id, outcome}]}``."""
    with core.db.read() as conn:
        try:
            src = accounts.get_source(conn, None, source_id)
        except NotFound:
            raise NotFound(f"no webhook source {source_id!r}") from None
    if src.kind != "webhook":
        raise NotFound(f"no webhook source {source_id!r}")
    secrets = [core.box.open(s) for s in src.secrets or []]
    try:
        verify_signed(body, headers, secrets, now=core.db.clock())
    except Unauthorized:
        throttled = auth_failures.failed(core, "webhook_signature", address, source_id=source_id)
        if throttled is not None:
            raise throttled from None
        raise
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurd nesting
        raise ValidationFailed("body is not JSON", field="body") from exc
    mapped = MAPPERS[src.mapper or "generic"](payload, headers[HEADER_ID])
    results: list[ProviderResult] = []
    for m in mapped:
        res = signals.accept_signal(
            core,
            src.tenant_id,
            src,
            m.run_id,
            Signal(
                event_id=m.event_id,
                state=m.state,
                sequence=m.sequence,
                at=m.at,
                reason=m.reason,
                error=m.error,
                effects_verified=m.effects_verified,
            ),
        )
        # No reason text here: it can name the state reader's URL, which the
        # provider has no business seeing.
        results.append({"run_id": m.run_id, "event_id": m.event_id, "outcome": res.outcome})
    return {"accepted": len(results), "results": results}
