"""The FastAPI application: routers, problem+json, body limit, lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from starlette.routing import BaseRoute, Route

from runbell import __version__
from runbell.api import openapi, problems
from runbell.api.limits import BodyLimit, reject_lone_surrogates
from runbell.api.responses import JSON
from runbell.api.routers import (
    deliveries,
    events,
    health,
    input_requests,
    me,
    notifications,
    policy,
    runs,
    sources,
    webhook_endpoints,
)
from runbell.core import Runbell
from runbell.dispatch.worker import Worker
from runbell.store.wakeup import start_bridge
from runbell.web import apidocs
from runbell.web.routes import install as install_web

Background = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


def create_app(
    core: Runbell,
    *,
    bridge: bool = True,
    worker: Worker | None = None,
    background: Sequence[Background] = (),
    routers: Sequence[APIRouter] = (),
    listen_host: str | None = None,
) -> FastAPI:
    """The HTTP API around ``core``.

    With ``bridge`` on PostgreSQL, LISTEN/NOTIFY wakes long-polls, streams and workers in
    this process for commits made by other processes. With ``worker``, the delivery
    worker runs on the server's event loop for the app's lifetime (``runbell serve``);
    ``background`` tasks (the demo agent) run alongside and get the same stop event.
    ``listen_host`` is the interface the server binds (None: in-process); beyond loopback,
    ``/metrics`` needs ``RUNBELL_METRICS_TOKEN`` to answer at all.
    """

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        pg = start_bridge(core.db) if bridge else None
        stop = asyncio.Event()
        jobs = [*([worker.run] if worker else []), *background]
        tasks = [asyncio.create_task(job(stop)) for job in jobs]
        try:
            yield
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            if pg:
                pg.stop()

    app = FastAPI(
        dependencies=[Depends(reject_lone_surrogates)],
        default_response_class=JSON,
        title="Runbell",
        version=__version__,
        lifespan=lifespan,
        description="Trustworthy attention for background AI-agent work.",
        # /docs and /redoc are ours (runbell.web.apidocs): FastAPI's load from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.core = core
    app.state.metrics_refusal = health.metrics_refusal(listen_host, core.settings.metrics_token)
    problems.install(app)
    openapi.install(app)
    _serve_openapi_as_json(app)
    for router in (
        runs.router,
        input_requests.router,
        sources.router,
        notifications.router,
        events.router,
        policy.router,
        deliveries.router,
        deliveries.operator_router,
        webhook_endpoints.router,
        me.router,
        health.router,
        *routers,
    ):
        app.include_router(router)
    install_web(app)
    apidocs.install(app)
    app.add_middleware(BodyLimit, max_bytes=core.settings.max_body_bytes)
    return app


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
