"""Liveness and readiness."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from runbell import metrics
from runbell.api.deps import CoreDep
from runbell.api.openapi import problems
from runbell.domain.errors import RunbellError, Unauthorized
from runbell.flows import health

router = APIRouter(tags=["operations"])


class NotReady(RunbellError):
    status = 503
    title = "Not ready"
    type_slug = "not-ready"


class MetricsDisabled(RunbellError):
    status = 404
    title = "Not found"
    type_slug = "metrics-disabled"


def is_loopback(host: str) -> bool:
    """True when ``host`` (a ``--host`` value) only accepts connections from this machine."""
    host = host.strip().lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # 0.0.0.0, ::, "" and names: reachable from elsewhere, as far as we know


def metrics_refusal(listen_host: str | None, token: str | None) -> str | None:
    """Why ``/metrics`` stays closed, or None when it may answer.

    Metrics hold every tenant's delivery counts, so without ``RUNBELL_METRICS_TOKEN`` they
    are served only to this machine: ``listen_host`` None (in-process, tests) or loopback.
    """
    if token or listen_host is None or is_loopback(listen_host):
        return None
    return (
        "/metrics is off: this server listens beyond loopback and RUNBELL_METRICS_TOKEN is "
        "not set. Set RUNBELL_METRICS_TOKEN and scrape with Authorization: Bearer <token>"
    )


@router.get("/healthz")
def healthz() -> Mapping[str, Any]:
    return {"status": "ok"}


@router.get("/readyz", responses=problems(503))
def readyz(core: CoreDep) -> Mapping[str, Any]:
    try:
        revision = health.schema_revision(core)
    except Exception as exc:
        raise NotReady(f"database unreachable: {type(exc).__name__}") from exc
    if revision is None:
        raise NotReady("database is not migrated; run `runbell migrate`")
    return {"status": "ready", "database": core.db.dialect, "schema": revision}


@router.get("/metrics", include_in_schema=False)
def metrics_endpoint(core: CoreDep, request: Request) -> Response:
    """Prometheus text format. Counters are this process's; delivery gauges come from the
    database. Protected by ``RUNBELL_METRICS_TOKEN`` when set; without one, answered only
    when the server listens on loopback (``metrics_refusal``)."""
    refusal = getattr(request.app.state, "metrics_refusal", None)
    if refusal:
        raise MetricsDisabled(refusal)
    token = core.settings.metrics_token
    if token and not hmac.compare_digest(
        request.headers.get("authorization", ""), f"Bearer {token}"
    ):
        raise Unauthorized("metrics need Authorization: Bearer <RUNBELL_METRICS_TOKEN>")

    scrape = CollectorRegistry()
    scrape.register(metrics.DeliveryStatusCollector(lambda: health.delivery_counts(core)))
    body = generate_latest(metrics.REGISTRY) + generate_latest(scrape)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
