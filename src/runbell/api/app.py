"""The HTTP API (``/v1``, ``/healthz``, ``/metrics``, ``/openapi.json``): its routers,
problem+json for every error and the body limit, added to the application that
``runbell.app.create_app`` builds."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.routing import BaseRoute, Route

from runbell.api import openapi, problems, routing
from runbell.api.deps import KnownQuery
from runbell.api.limits import BodyLimit
from runbell.api.responses import JSON
from runbell.api.routers import (
    amendments,
    cancellation,
    credentials,
    deliveries,
    events,
    grants,
    health,
    hooks,
    input_requests,
    me,
    notifications,
    operations,
    policy,
    push_actions,
    runs,
    schedules,
    signals,
    sources,
    webhook_endpoints,
)
from runbell.api.sse import StreamHandoff
from runbell.flows.context import Core


def install(app: FastAPI, core: Core, *, listen_host: str | None = None) -> None:
    """Add the HTTP API to ``app``: problem+json for every error, the OpenAPI document,
    the routers, and the body limit.

    ``listen_host`` is the interface the server binds (None: in-process); beyond loopback,
    ``/metrics`` needs ``RUNBELL_METRICS_TOKEN`` to answer at all.
    """
    app.state.core = core
    app.state.metrics_refusal = health.metrics_refusal(listen_host, core.settings.metrics_token)
    problems.install(app)
    openapi.install(app)
    _serve_openapi_as_json(app)
    routing.include(app, include_routers)
    app.add_middleware(BodyLimit, max_bytes=core.settings.max_body_bytes)
    app.add_middleware(StreamHandoff)  # outermost: streams outlive the framework's frames


def include_routers(app: FastAPI) -> None:
    """The API's routers, in matching order (added through :func:`routing.include`)."""
    # Signals first, without KnownQuery: its route's one dependency checks the query too
    # (deps.runtime_caller); every dependency node and route match costs per request.
    app.include_router(signals.router)
    for router in (
        runs.router,
        input_requests.router,
        cancellation.router,
        amendments.router,
        operations.router,
        sources.router,
        notifications.router,
        notifications.inbox_router,
        events.router,
        policy.router,
        deliveries.router,
        deliveries.operator_router,
        webhook_endpoints.router,
        schedules.router,
        grants.router,
        me.router,
        health.router,
        credentials.router,
        push_actions.router,
        hooks.router,
    ):
        app.include_router(router, dependencies=[KnownQuery])


def _serve_openapi_as_json(app: FastAPI) -> None:
    """``/openapi.json`` through the same renderer as every other JSON answer.

    FastAPI's own route builds a plain ``JSONResponse``; it is swapped for one that ends in
    a newline too (Swagger UI at ``/docs`` and ReDoc keep reading the same path).
    """
    path = app.openapi_url
    if path is None:
        return

    async def openapi(_: object) -> JSON:
        return JSON(app.openapi())

    routes: list[BaseRoute] = [r for r in app.router.routes if getattr(r, "path", None) != path]
    routes.append(Route(path, openapi, include_in_schema=False))
    app.router.routes = routes
