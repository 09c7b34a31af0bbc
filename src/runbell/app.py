"""Wiring: settings → database → secret box → the flows' dependencies → the faces.

:func:`build` makes the :class:`~runbell.flows.context.Core` one process runs on;
:func:`create_app` puts the HTTP API and the web app around it (and, for ``runbell
serve``, the delivery worker and background jobs on the same event loop). The CLI, the
tests and ``runbell.testing`` start here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from runbell.config import Settings
from runbell.crypto import SecretBox, load_or_create_key
from runbell.flows.context import Core
from runbell.store import kv
from runbell.store.availability import StillUnavailable as StillUnavailable  # for the CLI
from runbell.store.availability import wait_while_unavailable
from runbell.store.db import Database
from runbell.store.migrate import upgrade

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI
    from sqlalchemy.engine import Engine

    from runbell.dispatch.worker import Worker
    from runbell.runtime.wakeup import PgBridge

Background = Callable[[asyncio.Event], Coroutine[Any, Any, None]]
T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


def build(
    settings: Settings, *, clock: Callable[[], datetime] = utcnow, migrate: bool = True
) -> Core:
    db = open_database(settings, clock=clock, migrate=migrate)
    try:
        key = settings.secret_key or load_or_create_key(settings.data_dir)
        box = SecretBox(key)
        if migrate:
            check_secret_key(db, box)
    except BaseException:
        db.dispose()  # a start that waits out an outage tries again with a new one
        raise
    return Core(settings, db, box=box)


def when_reachable(settings: Settings, start: Callable[[], T]) -> T:
    """``start()`` (a process's start-up: open and migrate the database, first writes),
    tried again with backoff while the database is unavailable, one ``database.waiting``
    warning per failed attempt, for ``RUNBELL_DB_START_TIMEOUT_S``; then
    :class:`StillUnavailable`. ``start`` disposes of what it opened when it fails."""
    return wait_while_unavailable(start, timeout_s=settings.db_start_timeout_s)


def prepare_data_dir(settings: Settings) -> None:
    """Create the SQLite data directory private (0700): it holds the database, which keeps
    run and request details in clear, and the secret key. An existing one is left as is."""
    if settings.resolved_database_url().startswith("sqlite"):
        settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)


def open_database(
    settings: Settings, *, clock: Callable[[], datetime] = utcnow, migrate: bool = True
) -> Database:
    """The database alone (no secret key needed), migrated unless told otherwise."""
    prepare_data_dir(settings)
    db = Database(
        settings.resolved_database_url(), clock=clock, writer_max_batch=settings.writer_max_batch
    )
    pooler_safe(db.engine, settings)
    if migrate:
        try:
            upgrade(db.engine)
        except BaseException:
            db.dispose()
            raise
    return db


def pooler_safe(engine: Engine, settings: Settings) -> None:
    """With ``RUNBELL_DATABASE_PREPARED_STATEMENTS=false``, psycopg never prepares a
    statement on the server: a pooler in transaction mode that does not track them
    (PgBouncer < 1.21) would hand one connection's prepared statements to another client
    (``prepared statement "_pg3_0" already exists``)."""
    if settings.database_prepared_statements or engine.dialect.name != "postgresql":
        return
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_prepare(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.prepare_threshold = None


def migrate(settings: Settings) -> tuple[str | None, str]:
    """Create or upgrade the schema of the database ``settings`` name (``runbell
    migrate``; idempotent): its revision now, and the dialect."""
    from runbell.store.db import make_engine
    from runbell.store.migrate import current_revision

    prepare_data_dir(settings)
    engine = make_engine(settings.resolved_database_url())
    pooler_safe(engine, settings)
    try:
        upgrade(engine)
        return current_revision(engine), engine.dialect.name
    finally:
        engine.dispose()


def start_wakeups(core: Core, listen_url: str | None = None) -> PgBridge | None:
    """On PostgreSQL, start the LISTEN/NOTIFY bridge that wakes this process's waiters
    (workers, long-polls, streams) for commits made by other processes; None on SQLite.
    ``listen_url`` is ``RUNBELL_LISTEN_DATABASE_URL`` (default: the database's). Stop it with
    ``.stop()``."""
    from runbell.runtime.wakeup import start_bridge

    return start_bridge(core.db, core.hub, listen_url)


SERVED_URL = "served_url"


def record_served_url(db: Database, url: str) -> None:
    """Remember the base of links `runbell serve` uses (RUNBELL_PUBLIC_URL, or where it
    listens), so commands run from another terminal link to the same place."""
    with db.transaction() as tx:
        kv.put(tx.conn, SERVED_URL, {"url": url, "at": tx.now.isoformat()})


def links_base(settings: Settings, db: Database) -> str:
    """The base of links a command prints or sends: RUNBELL_PUBLIC_URL when it is set,
    else what `runbell serve` last recorded, else the default."""
    if "public_url" in settings.model_fields_set:
        return settings.public_url.rstrip("/")
    with db.read() as conn:
        served = kv.get(conn, SERVED_URL)
    return str(served["url"] if served else settings.public_url).rstrip("/")


KEY_CHECK = "secret_key_check"


def check_secret_key(db: Database, box: SecretBox) -> None:
    """Refuse to start with a secret key other than the one that sealed the stored
    secrets (a second host without RUNBELL_SECRET_KEY would otherwise fail every signed
    webhook, reader and chat send at runtime)."""
    from sqlalchemy.exc import IntegrityError

    from runbell.domain.errors import RunbellError

    with db.read() as conn:
        sealed = kv.get(conn, KEY_CHECK)
    if sealed is None:
        with contextlib.suppress(IntegrityError), db.transaction() as tx:
            kv.insert(tx.conn, KEY_CHECK, {"sealed": box.seal("ok")})  # first process wins
        return
    try:
        box.open(sealed["sealed"])
    except RunbellError as exc:
        raise SystemExit(
            "runbell: this process's secret key is not the one that sealed the stored "
            "secrets. Set RUNBELL_SECRET_KEY (or share the data directory's secret.key) "
            "to the same value in every process."
        ) from exc


def create_app(
    core: Core,
    *,
    bridge: bool = True,
    worker: Worker | None = None,
    background: Sequence[Background] = (),
    routers: Sequence[APIRouter] = (),
    listen_host: str | None = None,
) -> FastAPI:
    """The ASGI application: the HTTP API, the web app and the API reference around ``core``.

    With ``bridge`` on PostgreSQL, LISTEN/NOTIFY wakes long-polls, streams and workers in
    this process for commits made by other processes. With ``worker``, the delivery
    worker runs on the server's event loop for the app's lifetime (``runbell serve``);
    ``background`` tasks (the demo agent) run alongside and get the same stop event;
    ``routers`` are extra pages (the demo's sinks). ``listen_host`` is the interface the
    server binds (None: in-process); beyond loopback, ``/metrics`` needs
    ``RUNBELL_METRICS_TOKEN`` to answer at all.
    """
    from fastapi import Depends, FastAPI

    from runbell import __version__, api, web
    from runbell.api.limits import reject_unstorable
    from runbell.api.responses import JSON
    from runbell.mcp.http import McpMount
    from runbell.runtime.wakeup import start_bridge

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        pg = start_bridge(core.db, core.hub, core.settings.listen_database_url) if bridge else None
        stop = asyncio.Event()
        jobs = [*([worker.run] if worker else []), *background]
        tasks = [asyncio.create_task(job(stop)) for job in jobs]
        try:
            async with mcp.lifespan():
                yield
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            core.presence.close()  # other processes stop counting this one's viewers now
            if pg:
                pg.stop()

    app = FastAPI(
        dependencies=[Depends(reject_unstorable)],
        default_response_class=JSON,
        title="Runbell",
        version=__version__,
        lifespan=lifespan,
        description="Trustworthy attention for background AI-agent work.",
        # /docs and /redoc are ours (runbell.web.apidocs): FastAPI's load from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    api.install(app, core, listen_host=listen_host)
    # /mcp: the MCP tools over streamable HTTP; the SDK loads on the first call there
    # (runbell.mcp.http), not here.
    mcp = McpMount(core)
    app.router.routes.extend(mcp.routes())
    # Whether deliveries queued by a request are sent by this process's own worker loop
    # (the sign-in page sends its email itself otherwise: runbell.web.signin).
    app.state.worker = worker
    for router in routers:
        app.include_router(router)
    web.install(app)
    return app
