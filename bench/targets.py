"""The one adapter between the benchmarks and Runbell's Python code.

Everything the suite does *in-process* goes through here; every other bench module
speaks HTTP, runs the ``runbell`` CLI, or reads the database with plain SQL. When the
code moves (``Runbell`` in ``runbell.core`` splitting into ``runbell.flows``), this file
changes and nothing else does.

What lives here:

- opening a :class:`Core` on a database the CLI migrated, and the engine Runbell builds
  (the same PRAGMAs and ``BEGIN IMMEDIATE`` on SQLite) for the raw baselines;
- set-up that is not measured: a tenant with keys, working runs, a webhook endpoint,
  queued webhook messages — written by Runbell's own functions, the way the code writes
  them, in big transactions so set-up stays cheap;
- **the P1 call**: one ``completed`` signal through the core transaction, no HTTP;
- the server wrapper's hooks: running the real ``runbell serve`` / ``runbell api``
  command with a callback that may add bench-only routes to the app it builds, and the
  engine to count statements on.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

if TYPE_CHECKING:
    from runbell.store.accounts import Source

Core = Any  # runbell.flows.context.Core today; kept opaque so callers never reach inside
_bridges: dict[int, Any] = {}  # open_core's LISTEN/NOTIFY bridge per core


@dataclass(frozen=True)
class Tenant:
    tenant_id: str
    admin_key: str
    runtime_key: str
    owner_id: str
    owner_email: str
    owner_token: str
    source: Source  # the tenant's authoritative API source (signals' source)


def configure_logging(path: Path) -> None:
    """Log like the CLI does (same processors, INFO), into ``path`` instead of stderr:
    the in-process core pays the same logging cost as a server, out of the way."""
    import structlog

    from runbell.logging import configure

    configure()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=path.open("a")))


def new_secret_key() -> str:
    """A Fernet key for RUNBELL_SECRET_KEY, shared by this process and the servers."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def new_webhook_secret() -> str:
    from runbell.signatures import new_secret

    return new_secret()


def open_core(url: str, data_dir: Path, secret_key: str, **settings: Any) -> Core:
    """Runbell's core on an already migrated database (``runbell migrate`` did that).

    On PostgreSQL the LISTEN/NOTIFY bridge is started too, so commits made here wake the
    worker and API processes exactly as their own commits would.
    """
    from runbell.app import build
    from runbell.config import Settings
    from runbell.runtime.wakeup import start_bridge

    core = build(
        Settings(data_dir=data_dir, database_url=url, secret_key=secret_key, **settings),
        migrate=False,
    )
    _bridges[id(core)] = start_bridge(core.db, core.hub)
    return core


def close_core(core: Core) -> None:
    bridge = _bridges.pop(id(core), None)
    if bridge is not None:
        bridge.stop()
    core.db.dispose()


def engine_of(core: Core) -> sa.Engine:
    engine: sa.Engine = core.db.engine
    return engine


def make_engine(url: str) -> sa.Engine:
    """The engine Runbell would build for ``url`` (SQLite: WAL, synchronous=NORMAL,
    busy_timeout, BEGIN IMMEDIATE for writes) — the raw baselines' driver set-up."""
    from runbell.store.db import make_engine as runbell_engine

    return runbell_engine(url)


# --- set-up (not measured) ---------------------------------------------------------------


def setup_tenant(core: Core, name: str = "bench") -> Tenant:
    """A tenant with an admin key, a runtime key and an owner with a user token."""
    from runbell.store import accounts
    from runbell.testing import make_tenant

    creds = make_tenant(core, name)
    with core.db.read() as conn:
        source = accounts.get_source(
            conn, creds.tenant_id, accounts.api_source_id(conn, creds.tenant_id)
        )
    return Tenant(
        tenant_id=creds.tenant_id,
        admin_key=creds.admin_key,
        runtime_key=creds.runtime_key,
        owner_id=creds.owner_id,
        owner_email=creds.owner_email,
        owner_token=creds.owner_token,
        source=source,
    )


def create_runs(core: Core, tenant: Tenant, run_ids: Sequence[str], batch: int = 500) -> None:
    """Working runs owned by the tenant's owner, created by the code path of
    ``PUT /v1/runs/{id}`` (run row, first transition, access, ``run.created``), many per
    transaction: set-up must cost little next to what is measured."""
    from runbell.domain.principal import Principal
    from runbell.flows import runs
    from runbell.flows.inputs import RunFields

    who = Principal(tenant_id=tenant.tenant_id, kind="key", role="runtime")
    body: RunFields = {"owner": tenant.owner_email, "state": "working", "title": "bench run"}
    for start in range(0, len(run_ids), batch):
        with core.db.transaction() as tx:
            for run_id in run_ids[start : start + batch]:
                runs._create_run(core, tx, who, run_id, tenant.owner_id, body, {}, {})


def add_webhook_endpoint(
    core: Core, tenant: Tenant, url: str, secret: str, event_types: Sequence[str]
) -> str:
    """A tenant webhook endpoint (no per-endpoint rate limit) signing with ``secret``."""
    from runbell.store import endpoints

    with core.db.transaction() as tx:
        endpoint_id: str = endpoints.create(
            tx.conn,
            tenant.tenant_id,
            tx.now,
            url=url,
            description="bench receiver",
            event_types=list(event_types),
            sealed_secret=core.box.seal(secret),
            rate_limit_per_s=None,
        )
    return endpoint_id


def queue_webhook_messages(
    core: Core, tenant: Tenant, endpoint_id: str, run_ids: Sequence[str], status: str = "queued"
) -> None:
    """One ``run.finished`` webhook message per run id, written the way the feed fan-out
    writes them (same row shape and payload), in one transaction that wakes the workers.

    ``status`` other than ``queued`` parks the rows where no worker claims them (the raw
    claim loop's own rows, in the same table)."""
    from runbell.flows.fanout import messages
    from runbell.flows.views import iso
    from runbell.ids import new_id
    from runbell.store import outbox
    from runbell.store.db import PendingEvent

    base = core.settings.public_url.rstrip("/")
    with core.db.transaction() as tx:
        rows = []
        for run_id in run_ids:
            event = PendingEvent(
                "run.transitioned",
                {
                    "run_id": run_id,
                    "state": "completed",
                    "version": 2,
                    "kind": None,
                    "terminal": True,
                    "stop_reason": None,
                    "report": None,
                    "from": "working",
                    "reason": None,
                    "notification_ids": [],
                },
                run_id=run_id,
            )
            for event_type, key, data in messages(tenant.tenant_id, event, base):
                if event_type != "run.finished":
                    continue
                row = outbox.delivery_row(
                    tenant.tenant_id, None, "webhook", endpoint_id, "queued", tx.now
                )
                row.update(
                    {
                        "id": new_id("dlv"),
                        "run_id": run_id,
                        "event_type": event_type,
                        "event_key": key,
                        "payload": {"type": event_type, "timestamp": iso(tx.now), "data": data},
                    }
                )
                row["status"] = status
                rows.append(row)
        outbox.add_deliveries(tx.conn, rows)
        tx.wake_outbox = status == "queued"


# --- P1: the measured in-process call -------------------------------------------------------


def writer_batches(core: Core) -> int:
    """Batches the core's group-commit writer has committed so far."""
    batches: int = core.writer.batches
    return batches


def saved_round_trips() -> int:
    """Round trips this process's PostgreSQL pipelines have saved so far."""
    from runbell.store import fast

    return fast.saved_round_trips


def writer_cpu_s(core: Core) -> float:
    """CPU seconds the core's writer thread has used so far (0 before it started)."""
    thread = core.writer._thread
    if thread is None or thread.ident is None:
        return 0.0
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def complete_run(core: Core, tenant: Tenant, run_id: str, event_id: str) -> str:
    """One ``completed`` signal through the core transaction (dedupe, judge, apply,
    attention, outbox, feed — one commit). Returns the outcome (``applied`` expected)."""
    from runbell.flows.signals import Signal, accept_signal

    result = accept_signal(
        core, tenant.tenant_id, tenant.source, run_id, Signal(event_id=event_id, state="completed")
    )
    outcome: str = result.outcome
    return outcome


# --- the server wrapper's hooks -------------------------------------------------------------


def run_command_with_app_hook(argv: Sequence[str], hook: Callable[[Any, Core], None]) -> None:
    """Run the real ``runbell`` command line (``serve …`` or ``api …``) in this process,
    calling ``hook(app, core)`` on the FastAPI app the command builds, before it serves.

    The command itself is untouched (its settings, bootstrap, worker, scheduler and
    uvicorn configuration); only the app factory it calls is wrapped.
    """
    import runbell.app as app_module
    from runbell import cli

    real = app_module.create_app

    def create_app(core: Core, **kwargs: Any) -> Any:
        app = real(core, **kwargs)
        hook(app, core)
        return app

    setattr(app_module, "create_app", create_app)  # noqa: B010 (a typed module attribute)
    sys.exit(cli.main(list(argv)))


def asgi_app_from_env() -> Any:
    """The API app on the database the environment names (``BENCH_URL``, ``BENCH_DIR``,
    ``BENCH_KEY``), with the bench routes — for :mod:`bench.asgi_servers`, which serves the
    same app under different ASGI servers."""
    import os

    from bench.servers import install_bench_routes
    from runbell.app import create_app
    from runbell.logging import configure

    configure(level="WARNING")
    core = open_core(
        os.environ["BENCH_URL"], Path(os.environ["BENCH_DIR"]), os.environ["BENCH_KEY"]
    )
    app = create_app(core)
    install_bench_routes(app, core)
    return app
