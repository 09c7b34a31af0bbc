"""The FastAPI application: routers, problem+json, body limit, lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from runbell import __version__
from runbell.api import problems
from runbell.api.limits import BodyLimit
from runbell.api.routers import (
    deliveries,
    events,
    health,
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


def create_app(core: Runbell, *, bridge: bool = True, worker: Worker | None = None) -> FastAPI:
    """The HTTP API around ``core``.

    With ``bridge`` on PostgreSQL, LISTEN/NOTIFY wakes long-polls, streams and workers in
    this process for commits made by other processes. With ``worker``, the delivery
    worker runs on the server's event loop for the app's lifetime (``runbell serve``).
    """

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        pg = start_bridge(core.db) if bridge else None
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop)) if worker else None
        try:
            yield
        finally:
            stop.set()
            if task:
                await task
            if pg:
                pg.stop()

    app = FastAPI(
        title="Runbell",
        version=__version__,
        lifespan=lifespan,
        description="Trustworthy attention for background AI-agent work.",
    )
    app.state.core = core
    problems.install(app)
    for router in (
        runs.router,
        sources.router,
        notifications.router,
        events.router,
        policy.router,
        deliveries.router,
        deliveries.operator_router,
        webhook_endpoints.router,
        me.router,
        health.router,
    ):
        app.include_router(router)
    app.add_middleware(BodyLimit, max_bytes=core.settings.max_body_bytes)
    return app
