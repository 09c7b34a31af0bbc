"""Shared fixtures: one parametrized engine fixture runs every database test on SQLite and
PostgreSQL. Outside CI, the PostgreSQL half skips with a clear message when no server is
reachable; in CI (CI=true) it fails instead, so it can never be skipped silently.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from runbell.app import build, create_app
from runbell.config import Settings
from runbell.flows.context import Core
from runbell.store.db import make_engine
from runbell.store.migrate import upgrade
from runbell.testing import Clock, TenantCreds, make_tenant
from tests import sdk as sdk_variants
from tests.pgdatabases import ClonePool, TestDatabases
from tests.ports import free_port as free_port  # re-exported: the suite imports it from here
from tests.timeouts import WAIT, scaled

PG_URL = os.environ.get(
    "RUNBELL_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
IN_CI = os.environ.get("CI", "").lower() == "true"
SECRET_KEY = Fernet.generate_key().decode()

# Hypothesis: no deadline and no too_slow health check anywhere in the suite. Both are
# timing limits (a deadline is a timing assertion) that fail on a loaded machine and pass
# on rerun; most property tests here do I/O (a database, HTTP). Loaded before any test
# module is imported, so every @settings(...) inherits it; a test that lists its own
# suppress_health_check must list too_slow too. HYPOTHESIS_PROFILE picks another profile.
hypothesis.settings.register_profile(
    "runbell", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow]
)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "runbell"))


def _pg_problem() -> str | None:
    try:
        engine = sa.create_engine(PG_URL, connect_args={"connect_timeout": int(scaled(5))})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _run_and_worker(config: pytest.Config) -> tuple[str, str]:
    """This run's id (shared by its xdist workers) and this process's worker id."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return str(workerinput["testrunuid"])[:8], str(workerinput["workerid"])
    return str(config.option.testrunuid)[:8], "main"


def pytest_configure(config: pytest.Config) -> None:
    # xdist hands the controller's --testrunuid to every worker; set one when none was
    # given, so the controller knows it too and can sweep what its workers left.
    if not hasattr(config, "workerinput") and not getattr(config.option, "testrunuid", None):
        # (also without xdist, e.g. -p no:xdist: then it is this process's own id)
        config.option.testrunuid = uuid.uuid4().hex


#: The files that take longest (each runs as one unit on one xdist worker: --dist
#: loadfile), longest first. They are handed out before everything else, so the suite
#: does not end waiting for one of them: xdist's own order (most tests first) put these
#: one-test files last, and the two schemathesis runs were a run's tail. The Makefile
#: passes --no-loadscope-reorder so that xdist keeps this order.
FIRST = (
    "tests/integration/test_schemathesis_postgres.py",
    "tests/integration/test_schemathesis_postgres_runs.py",
    "tests/integration/test_schemathesis.py",
    "tests/browser/test_accessibility.py",
    "tests/acceptance/test_scaleout.py",
    "tests/acceptance/test_worker_processes.py",
    "tests/acceptance/test_start_banner.py",
    "tests/acceptance/test_docs_run.py",
    "tests/acceptance/test_bench_smoke.py",
    "tests/realclients/test_agent_clis.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (:data:`FIRST`), then the others with the most tests first
    (what xdist's reorder does), each file's tests kept together in their own order."""
    rank = {path: i for i, path in enumerate(FIRST)}
    root = config.rootpath

    def path_of(item: pytest.Item) -> str:
        try:
            return item.path.relative_to(root).as_posix()
        except ValueError:
            return str(item.path)

    sizes: dict[str, int] = {}
    for item in items:
        sizes[path_of(item)] = sizes.get(path_of(item), 0) + 1
    items.sort(
        key=lambda item: (rank.get(path_of(item), len(FIRST)), -sizes[path_of(item)], path_of(item))
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop every database this run made that is still there (a worker that crashed, a
    drop that failed): in the xdist controller once all workers are done, else here."""
    if hasattr(session.config, "workerinput") or _pg_problem() is not None:
        return
    run, worker = _run_and_worker(session.config)
    TestDatabases(PG_URL, run, worker).sweep(whole_run=True)


@pytest.fixture(scope="session")
def pg_template(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """A migrated template database; each test gets a clone of it (``pg_database``)."""
    problem = _pg_problem()
    if problem is not None:
        yield None
        return
    dbs = TestDatabases(PG_URL, *_run_and_worker(request.config))
    dbs.drop(dbs.template)
    engine = make_engine(dbs.create(dbs.template))
    upgrade(engine)
    engine.dispose()
    yield dbs.template
    pool = ClonePool.forget(dbs)
    if pool is not None and os.environ.get("RUNBELL_TEST_POOL_LOG"):
        # How often a clone was reused, and why not: the reuse is only worth it if most are.
        with open(os.environ["RUNBELL_TEST_POOL_LOG"], "a") as log:
            print(dbs.worker, pool.summary(), file=log)
    dbs.sweep()  # the template, the spare clones, any clone whose own drop did not succeed


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tmpl") / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()  # closing the last connection checkpoints the WAL into the file
    return path


def pg_database(pg_template: str | None, *, fresh: bool = False) -> Iterator[str]:
    """The URL of an empty clone of ``pg_template`` for one test: one this worker's
    earlier tests used and emptied again (tests/pgdatabases.py ``ClonePool``: a CREATE
    costs ~340 ms, the reset ~25 ms), or with ``fresh`` always a new one, dropped after."""
    if pg_template is None:
        reason = (
            f"PostgreSQL not reachable at {sa.make_url(PG_URL).render_as_string()} "
            f"({_pg_problem()}); set RUNBELL_TEST_DATABASE_URL or start it"
        )
        if IN_CI:
            pytest.fail("CI requires PostgreSQL: " + reason)
        pytest.skip(reason)
    dbs = TestDatabases.of_template(PG_URL, pg_template)
    if fresh:
        name = dbs.new_clone_name()
        url = dbs.create(name, template=pg_template)
        try:
            yield url
        finally:
            dbs.drop(name)  # reconnects and retries across a server restart
        return
    pool = ClonePool.of(dbs)
    name = pool.take()
    try:
        yield dbs.url(name)
    finally:
        pool.give_back(name)  # kept if it resets to the template's state, else dropped


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path, pg_template: str | None
) -> Iterator[str]:
    """The parametrized engine fixture: each dependent test runs on both databases."""
    if request.param == "sqlite":
        target = tmp_path / "runbell.db"
        shutil.copy(sqlite_template, target)
        yield f"sqlite:///{target}"
    else:
        yield from pg_database(pg_template)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=sdk_variants.VARIANTS)
def sdk(request: pytest.FixtureRequest) -> sdk_variants.Connect:
    """Makes an SDK client: the sync one, then (a second run of the test) the async one
    behind the same surface (tests/sdk.py). ``with sdk(url, key, owner, …) as client:``."""
    return functools.partial(sdk_variants.connected, request.param)


def make_settings(tmp_path: Path, url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "database_url": url,
        "secret_key": SECRET_KEY,
        "outbound_allow_hosts": frozenset({"127.0.0.1"}),
        "public_url": "http://testserver",
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return make_settings(tmp_path, db_url)


@pytest.fixture
def core(settings: Settings, clock: Clock) -> Iterator[Core]:
    rb = build(settings, clock=clock, migrate=False)
    yield rb
    rb.db.dispose()


@pytest.fixture
def mailing(core: Core, monkeypatch: pytest.MonkeyPatch) -> None:
    """This server sends email: an SMTP relay is configured (nothing is sent unless a
    worker runs). Without one, no email rows are queued at all."""
    monkeypatch.setattr(
        core, "settings", core.settings.model_copy(update={"smtp_host": "127.0.0.1"})
    )


@pytest.fixture
def creds(core: Core) -> TenantCreds:
    return make_tenant(core)


@pytest.fixture
def client(core: Core) -> Iterator[TestClient]:
    with TestClient(create_app(core, bridge=False)) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class LiveServer:
    """The real app under uvicorn in a thread: for long-polls, SSE and real HTTP clients."""

    #: The bound listening socket uvicorn serves (None: uvicorn binds ``port`` itself,
    #: as a subclass that must serve a given port does).
    sock: socket.socket | None = None

    def __init__(self, core: Core, *, bridge: bool = True) -> None:
        import uvicorn

        # The listening socket is bound here and handed to uvicorn: a port merely found
        # free (free_port) can be taken by another worker's process before uvicorn binds
        # it, which failed a CI run once ("address already in use").
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_app(core, bridge=bridge),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + WAIT
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("live server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=WAIT)
        if self.sock is not None:
            self.sock.close()


@pytest.fixture
def live(core: Core) -> Iterator[LiveServer]:
    with LiveServer(core) as server:
        yield server


@dataclass
class Env:
    """An app and its core on the parametrized database, with settings of its own (an
    SMTP relay, a policy knob, …), its first tenant and the test clock."""

    core: Core
    client: TestClient
    creds: TenantCreds
    clock: Clock

    @property
    def admin(self) -> dict[str, str]:
        return bearer(self.creds.admin_key)

    @property
    def runtime(self) -> dict[str, str]:
        return bearer(self.creds.runtime_key)

    @property
    def owner(self) -> dict[str, str]:
        return bearer(self.creds.owner_token)

    def dispatcher(self) -> Any:
        """A real delivery worker on this core (``tests.peers.Dispatcher``)."""
        from tests.peers import Dispatcher

        return Dispatcher(self.core, self.clock)


@pytest.fixture
def make_env(tmp_path: Path, db_url: str, clock: Clock) -> Iterator[Callable[..., Env]]:
    """``make_env(**settings)``: an :class:`Env` with those settings; closed at teardown."""
    made: list[Env] = []

    def make(**overrides: Any) -> Env:
        core = build(make_settings(tmp_path, db_url, **overrides), clock=clock, migrate=False)
        client = TestClient(create_app(core, bridge=False))
        client.__enter__()
        env = Env(core, client, make_tenant(core), clock)
        made.append(env)
        return env

    yield make
    for env in made:
        env.client.__exit__(None, None, None)
        env.core.db.dispose()
