"""Tenant webhook endpoints: URL, event-type filter, signing secrets with rotation."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from runbell.domain.errors import NotFound
from runbell.domain.records import Endpoint
from runbell.ids import new_id
from runbell.store import fast
from runbell.store import tables as t

WEBHOOK_EVENT_TYPES = (
    "run.created",
    "run.transitioned",
    "run.finished",
    "run.mismatch",
    "run.mismatch_closed",
    "run.stalled",
    "run.recovered",
    "notification.created",
    "notification.closed",
    "input_request.opened",
    "input_request.answered",
    "input_request.expired",
    "input_request.superseded",
    "input_request.cancelled",
    "run.cancel_requested",
    "amendment.proposed",
    "amendment.approved",
    "amendment.rejected",
    "operation.updated",
    "run.reviewed",
    "run.review_decided",
    "run.owner_changed",
    "operation.superseded",
)


def create(
    conn: Connection,
    tenant_id: str,
    now: datetime,
    *,
    url: str,
    description: str | None,
    event_types: list[str],
    sealed_secret: str,
    rate_limit_per_s: float | None,
) -> str:
    endpoint_id = new_id("ep")
    conn.execute(
        t.webhook_endpoints.insert().values(
            id=endpoint_id,
            tenant_id=tenant_id,
            url=url,
            description=description,
            event_types=event_types,
            secrets=[{"sealed": sealed_secret, "created_at": now.isoformat(), "expires_at": None}],
            status="enabled",
            dead_streak=0,
            rate_limit_per_s=rate_limit_per_s,
            created_at=now,
            updated_at=now,
        )
    )
    return endpoint_id


def get(
    conn: Connection, tenant_id: str, endpoint_id: str, *, for_update: bool = False
) -> Endpoint:
    q = sa.select(t.webhook_endpoints).where(
        t.webhook_endpoints.c.tenant_id == tenant_id, t.webhook_endpoints.c.id == endpoint_id
    )
    if for_update and conn.dialect.name == "postgresql":
        q = q.with_for_update()
    row = conn.execute(q).first()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id!r}")
    return _row(row._mapping)


def get_many(conn: Connection, keys: set[tuple[str, str]]) -> dict[tuple[str, str], Endpoint]:
    """Endpoints by ``(tenant_id, endpoint_id)``, in one read (a claimed batch's)."""
    if not keys:
        return {}
    ep = t.webhook_endpoints
    rows = conn.execute(sa.select(ep).where(ep.c.id.in_(sorted({k[1] for k in keys})))).all()
    return {(r.tenant_id, r.id): _row(r._mapping) for r in rows if (r.tenant_id, r.id) in keys}


def reset_dead_streak(conn: Connection, keys: set[tuple[str, str]], now: datetime) -> None:
    """A delivery got through: the endpoints' dead-letter streaks start again. Rows already
    at 0 are not written, so concurrent settles of one endpoint do not queue on its row."""
    ep = t.webhook_endpoints
    for tenant_id, endpoint_id in sorted(keys):
        conn.execute(
            sa.update(ep)
            .where(ep.c.tenant_id == tenant_id, ep.c.id == endpoint_id, ep.c.dead_streak != 0)
            .values(dead_streak=0, updated_at=now)
        )


def list_all(conn: Connection, tenant_id: str) -> list[Endpoint]:
    rows = conn.execute(
        sa.select(t.webhook_endpoints)
        .where(t.webhook_endpoints.c.tenant_id == tenant_id)
        .order_by(t.webhook_endpoints.c.id)
    ).all()
    return [_row(r._mapping) for r in rows]


def with_url_suffix(conn: Connection, suffix: str) -> list[Endpoint]:
    """Endpoints of every tenant whose URL ends with ``suffix`` (the demo's own sink)."""
    # Compared here, not with LIKE: SQLite's LIKE ignores case.
    rows = conn.execute(sa.select(t.webhook_endpoints).order_by(t.webhook_endpoints.c.id)).all()
    return [_row(r._mapping) for r in rows if r.url.endswith(suffix)]


def update(
    conn: Connection, tenant_id: str, endpoint_id: str, now: datetime, **values: Any
) -> None:
    conn.execute(
        sa.update(t.webhook_endpoints)
        .where(
            t.webhook_endpoints.c.tenant_id == tenant_id, t.webhook_endpoints.c.id == endpoint_id
        )
        .values(updated_at=now, **values)
    )


def rotate(
    conn: Connection, tenant_id: str, endpoint_id: str, now: datetime, sealed: str, overlap_s: float
) -> None:
    """A new secret first; the previous ones stay valid for ``overlap_s`` (both signatures
    are sent meanwhile, so receivers can switch without a gap)."""
    ep = get(conn, tenant_id, endpoint_id, for_update=True)
    until = (now + timedelta(seconds=overlap_s)).isoformat()
    kept = [
        {**s, "expires_at": s.get("expires_at") or until} for s in ep["secrets"] if live(s, now)
    ]
    update(
        conn,
        tenant_id,
        endpoint_id,
        now,
        secrets=[{"sealed": sealed, "created_at": now.isoformat(), "expires_at": None}, *kept],
    )


def live(secret: dict[str, Any], now: datetime) -> bool:
    expires = secret.get("expires_at")
    return expires is None or datetime.fromisoformat(expires) > now


_FOR_FANOUT = fast.Statement(
    lambda: sa.select(
        t.webhook_endpoints.c.id,
        t.webhook_endpoints.c.event_types,
        t.webhook_endpoints.c.status,
    ).where(t.webhook_endpoints.c.tenant_id == sa.bindparam("tenant_id"))
)


def for_fanout(conn: Connection, tenant_id: str) -> list[dict[str, Any]]:
    """Every endpoint of the tenant with what fan-out needs (id, event types, status):
    one read per tenant per transaction, filtered by :func:`wants` per event."""
    return _FOR_FANOUT.rows(conn, tenant_id=tenant_id)


def wants(endpoint: Mapping[str, Any], event_type: str) -> bool:
    return not endpoint["event_types"] or event_type in endpoint["event_types"]


def _row(mapping: RowMapping) -> Endpoint:
    return cast(Endpoint, dict(mapping))  # every column of webhook_endpoints
