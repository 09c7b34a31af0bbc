"""The FastAPI application: routers, problem+json, body limit, lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from runbell import __version__
from runbell.api import problems
from runbell.api.limits import BodyLimit
from runbell.api.routers import events, health, notifications, policy, runs, sources
from runbell.core import Runbell
from runbell.store.wakeup import PgBridge


def create_app(core: Runbell, *, bridge: bool = True) -> FastAPI:
    """The HTTP API around ``core``. With ``bridge`` on PostgreSQL, LISTEN/NOTIFY wakes
    long-polls and streams in this process for commits made by other processes."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        pg = None
        if bridge and core.db.is_postgres:
            pg = PgBridge(
                core.db.engine.url.set(drivername="postgresql").render_as_string(
                    hide_password=False
                ),
                core.db.hub,
            )
            pg.start()
        try:
            yield
        finally:
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
        health.router,
    ):
        app.include_router(router)
    app.add_middleware(BodyLimit, max_bytes=core.settings.max_body_bytes)
    return app
