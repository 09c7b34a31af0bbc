"""Liveness and readiness."""

from __future__ import annotations

import hmac
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from runbell import metrics
from runbell.api.deps import Core
from runbell.api.openapi import problems
from runbell.domain.errors import RunbellError, Unauthorized
from runbell.store import outbox
from runbell.store.migrate import current_revision

router = APIRouter(tags=["operations"])


class NotReady(RunbellError):
    status = 503
    title = "Not ready"
    type_slug = "not-ready"


@router.get("/healthz")
def healthz() -> dict[str, Any]:
    return {"status": "ok"}


@router.get("/readyz", responses=problems(503))
def readyz(core: Core) -> dict[str, Any]:
    try:
        with core.db.read() as conn:
            conn.execute(sa.text("SELECT 1"))
        revision = current_revision(core.db.engine)
    except Exception as exc:
        raise NotReady(f"database unreachable: {type(exc).__name__}") from exc
    if revision is None:
        raise NotReady("database is not migrated; run `runbell migrate`")
    return {"status": "ready", "database": core.db.dialect, "schema": revision}


@router.get("/metrics", include_in_schema=False)
def metrics_endpoint(core: Core, request: Request) -> Response:
    """Prometheus text format. Counters are this process's; delivery gauges come from the
    database. Protected by ``RUNBELL_METRICS_TOKEN`` when set."""
    token = core.settings.metrics_token
    if token and not hmac.compare_digest(
        request.headers.get("authorization", ""), f"Bearer {token}"
    ):
        raise Unauthorized("metrics need Authorization: Bearer <RUNBELL_METRICS_TOKEN>")

    def counts() -> list[tuple[str, str, int]]:
        with core.db.read() as conn:
            return outbox.counts_by_status(conn)

    scrape = CollectorRegistry()
    scrape.register(metrics.DeliveryStatusCollector(counts))
    body = generate_latest(metrics.REGISTRY) + generate_latest(scrape)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
