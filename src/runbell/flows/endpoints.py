"""Tenant webhook endpoints: register one, filter what it receives, change or disable it,
rotate its signing secrets, and recover what did not get through.

Invariants kept here (DESIGN §2):

- 14: every endpoint URL passes the SSRF guard when registered or changed (and again
  before every send); its signing secret is sealed at rest and shown once, at creation or
  rotation (and in a replay of that answer). A rotation keeps the previous secrets live
  for the overlap, so receivers can switch without a gap.
- 14: recovering re-queues failed, dead and cancelled messages under their original
  webhook-id; each gets one more try and then the normal dead-letter rules.
- Tenant isolation: another tenant's endpoint id answers 404.

The API (``/v1/webhook-endpoints``) and the demo call these.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import NotRequired, TypedDict

from runbell.domain.errors import ValidationFailed
from runbell.domain.records import Endpoint
from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey, act_once
from runbell.flows.sources import check_destination
from runbell.flows.views import iso
from runbell.signatures import new_secret, verify_signed
from runbell.store import endpoints, outbox
from runbell.store.db import Tx
from runbell.store.endpoints import WEBHOOK_EVENT_TYPES

EVENT_TYPES = WEBHOOK_EVENT_TYPES  # what an endpoint can subscribe to ([] = all)


class SecretDates(TypedDict):
    created_at: str | None
    expires_at: str | None


class EndpointView(TypedDict):
    """An endpoint as the API shows it: its live secrets' dates, never the secrets."""

    id: str
    url: str
    description: str | None
    event_types: list[str]
    status: str
    disabled_reason: str | None
    dead_streak: int
    rate_limit_per_s: float | None
    secrets: list[SecretDates]
    created_at: str | None
    updated_at: str | None
    secret: NotRequired[str]  # shown once: when made or rotated


class EndpointList(TypedDict):
    endpoints: list[EndpointView]


class Requeued(TypedDict):
    requeued: int


class EndpointChanges(TypedDict, total=False):
    """``PATCH /v1/webhook-endpoints/{id}``: the fields given change."""

    url: str
    description: str | None
    event_types: list[str]
    status: str  # enabled | disabled
    rate_limit_per_s: float | None


def endpoint_view(ep: Endpoint, now: datetime) -> EndpointView:
    """An endpoint as the API shows it: its live secrets' dates, never the secrets."""
    return {
        "id": ep["id"],
        "url": ep["url"],
        "description": ep["description"],
        "event_types": ep["event_types"],
        "status": ep["status"],
        "disabled_reason": ep["disabled_reason"],
        "dead_streak": ep["dead_streak"],
        "rate_limit_per_s": ep["rate_limit_per_s"],
        "secrets": [
            {"created_at": s["created_at"], "expires_at": s["expires_at"]}
            for s in ep["secrets"]
            if endpoints.live(s, now)
        ],
        "created_at": iso(ep["created_at"]),
        "updated_at": iso(ep["updated_at"]),
    }


def create_endpoint(
    core: Core,
    tenant_id: str,
    *,
    url: str,
    description: str | None,
    event_types: list[str],
    rate_limit_per_s: float | None,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Register an endpoint (201); the answer carries its signing secret, once."""

    def prepare() -> Act:
        check_destination(core, url, "url")
        secret = new_secret()

        def act(tx: Tx) -> tuple[int, EndpointView]:
            endpoint_id = endpoints.create(
                tx.conn,
                tenant_id,
                tx.now,
                url=url,
                description=description,
                event_types=list(event_types),
                sealed_secret=core.box.seal(secret),
                rate_limit_per_s=rate_limit_per_s,
            )
            ep = endpoints.get(tx.conn, tenant_id, endpoint_id)
            return 201, EndpointView(**endpoint_view(ep, tx.now), secret=secret)

        return act

    return act_once(core.db, core.box, key, prepare)


def list_endpoints(core: Core, tenant_id: str) -> EndpointList:
    now = core.db.clock()
    with core.db.read() as conn:
        return {"endpoints": [endpoint_view(e, now) for e in endpoints.list_all(conn, tenant_id)]}


def get_endpoint(core: Core, tenant_id: str, endpoint_id: str) -> EndpointView:
    with core.db.read() as conn:
        return endpoint_view(endpoints.get(conn, tenant_id, endpoint_id), core.db.clock())


def update_endpoint(
    core: Core, tenant_id: str, endpoint_id: str, changes: EndpointChanges
) -> EndpointView:
    """Change the fields given (url, description, event_types, status); re-enabling
    resets the dead streak. 422 for a null url, event_types or status."""
    values: dict[str, object] = {**changes}
    for name in ("url", "event_types", "status"):
        if name in values and values[name] is None:
            raise ValidationFailed(f"{name} cannot be null", field=name)
    if "url" in changes:
        check_destination(core, changes["url"], "url")
    if values.get("status") == "enabled":
        values.update(dead_streak=0, disabled_reason=None)
    elif values.get("status") == "disabled":
        values["disabled_reason"] = "disabled by an admin"
    with core.db.transaction() as tx:
        endpoints.get(tx.conn, tenant_id, endpoint_id, for_update=True)
        if values:
            endpoints.update(tx.conn, tenant_id, endpoint_id, tx.now, **values)
        ep = endpoints.get(tx.conn, tenant_id, endpoint_id)
    return endpoint_view(ep, core.db.clock())


def rotate_secret(
    core: Core,
    tenant_id: str,
    endpoint_id: str,
    overlap_s: int,
    key: IdempotencyKey | None = None,
) -> Answer:
    """A new secret (200, shown once); messages are signed with it and with the previous
    ones until they expire, ``overlap_s`` from now."""

    def act(tx: Tx) -> tuple[int, EndpointView]:
        secret = new_secret()
        endpoints.rotate(tx.conn, tenant_id, endpoint_id, tx.now, core.box.seal(secret), overlap_s)
        ep = endpoints.get(tx.conn, tenant_id, endpoint_id)
        return 200, EndpointView(**endpoint_view(ep, tx.now), secret=secret)

    return act_once(core.db, core.box, key, lambda: act)


def recover(
    core: Core,
    tenant_id: str,
    endpoint_id: str,
    since: datetime,
    until: datetime | None,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Re-queue every message of this endpoint created in [since, until) that did not get
    through (202, ``{requeued}``). Both times need a timezone offset (422)."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise ValidationFailed(f"{name} needs a timezone offset", field=name)

    def act(tx: Tx) -> tuple[int, Requeued]:
        endpoints.get(tx.conn, tenant_id, endpoint_id)
        n = outbox.requeue_for_endpoint(
            tx.conn, tenant_id, endpoint_id, tx.now, since=since, until=until
        )
        tx.wake_outbox = n > 0
        return 202, {"requeued": n}

    return act_once(core.db, core.box, key, lambda: act)


# --- Runbell's own receivers (the demo's sink) ----------------------------------------


def ensure_endpoint(core: Core, tenant_id: str, url: str, description: str) -> bool:
    """Register an endpoint for every event at ``url`` unless the tenant has one there;
    True when it was created. Its secret is never shown: only Runbell's own receiver
    (:func:`verify_own_delivery`) checks it."""
    with core.db.transaction() as tx:
        if any(e["url"] == url for e in endpoints.list_all(tx.conn, tenant_id)):
            return False
        endpoints.create(
            tx.conn,
            tenant_id,
            tx.now,
            url=url,
            description=description,
            event_types=[],
            sealed_secret=core.box.seal(new_secret()),
            rate_limit_per_s=None,
        )
    return True


def verify_own_delivery(
    core: Core, url_suffix: str, body: bytes, headers: Mapping[str, str]
) -> None:
    """Check a message Runbell sent to one of its own endpoints (any tenant's whose URL
    ends with ``url_suffix``) as any receiver would: its Standard Webhooks signature by a
    live secret (401 otherwise)."""
    with core.db.read() as conn:
        eps = endpoints.with_url_suffix(conn, url_suffix)
    now = core.db.clock()
    secrets = [
        core.box.open(s["sealed"]) for e in eps for s in e["secrets"] if endpoints.live(s, now)
    ]
    verify_signed(body, headers, secrets, now=core.db.clock())
