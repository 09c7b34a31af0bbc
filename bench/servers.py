"""Temporary databases and Runbell processes for one bench run.

- :class:`Databases` makes SQLite files in a temp directory and PostgreSQL databases on
  the shared cluster (``bench_<pid>_…``, created from the admin URL and dropped at the
  end). Each kind is migrated once by ``runbell migrate`` into a template that is then
  copied (SQLite) or cloned with ``CREATE DATABASE … TEMPLATE`` (PostgreSQL).
- :class:`Server` runs ``runbell serve`` or ``runbell api`` through the bench wrapper
  below; :class:`Workers` runs ``runbell worker`` processes as they are.

The wrapper (``python -m bench.servers serve|api --port N``) runs the real command line
unchanged; the only difference is that the app it builds gets two bench-only routes:

- ``POST /bench/noop``: the no-op baseline of P2 — a JSON body in (parsed by a pydantic
  model like the signal's), a small JSON object out, no auth, and the same kind of
  handler as ``POST /v1/runs/{run_id}/signals`` (a plain ``def`` run in the threadpool
  if that one is, ``async def`` if that one is; decided by looking at the real route,
  so the baseline follows the code), and matched at the signal route's place in the
  route list (just before the router holding it), so both pay the same routing;
- ``GET /bench/stats``: statements this process sent to the database (a SQLAlchemy
  ``before_cursor_execute`` counter), how many were SELECTs reading ``feed_events``, and
  commits — P5's "database reads per commit".
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import PYTHON, REPO, RUNBELL, child_env, stop, wait_until

PG_ADMIN_URL = os.environ.get(
    "RUNBELL_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Db:
    kind: str  # sqlite | postgres
    name: str
    url: str
    data_dir: Path

    @property
    def is_pg(self) -> bool:
        return self.kind == "postgres"

    def psycopg_dsn(self) -> str:
        return self.url.replace("postgresql+psycopg://", "postgresql://", 1)


class Databases:
    def __init__(self, workdir: Path, secret_key: str, pg_admin_url: str = PG_ADMIN_URL):
        self.workdir = workdir
        self.secret_key = secret_key
        self.pg_admin_url = pg_admin_url
        self.prefix = f"bench_{os.getpid()}"
        self._sqlite_template: Path | None = None
        self._pg_template: str | None = None
        self._pg_names: list[str] = []
        self._n = 0

    # --- SQLite ------------------------------------------------------------------------

    def sqlite(self, name: str) -> Db:
        if self._sqlite_template is None:
            tmpl = self.workdir / "sqlite-template"
            url = f"sqlite:///{tmpl / 'runbell.db'}"
            self._migrate(url, tmpl)
            with contextlib.closing(sqlite3.connect(tmpl / "runbell.db")) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._sqlite_template = tmpl / "runbell.db"
        self._n += 1
        data_dir = self.workdir / f"{self._n:02d}-{name}"
        data_dir.mkdir(parents=True)
        shutil.copy(self._sqlite_template, data_dir / "runbell.db")
        return Db("sqlite", name, f"sqlite:///{data_dir / 'runbell.db'}", data_dir)

    # --- PostgreSQL --------------------------------------------------------------------

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(
            self.pg_admin_url.replace("postgresql+psycopg://", "postgresql://", 1),
            autocommit=True,
        )

    def _pg_url(self, dbname: str) -> str:
        base, _, _ = self.pg_admin_url.rpartition("/")
        return f"{base}/{dbname}"

    def postgres(self, name: str) -> Db:
        if self._pg_template is None:
            tmpl = f"{self.prefix}_tmpl"
            with self._admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{tmpl}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{tmpl}"')
            self._pg_names.append(tmpl)
            self._migrate(self._pg_url(tmpl), self.workdir / "pg-template")
            self._pg_template = tmpl
        self._n += 1
        dbname = f"{self.prefix}_{self._n:02d}_{name}"[:63]
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{dbname}" TEMPLATE "{self._pg_template}"')
        self._pg_names.append(dbname)
        data_dir = self.workdir / f"{self._n:02d}-{name}"
        data_dir.mkdir(parents=True)
        return Db("postgres", name, self._pg_url(dbname), data_dir)

    def drop(self, db: Db) -> None:
        if db.is_pg:
            dbname = db.url.rsplit("/", 1)[1]
            with self._admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            if dbname in self._pg_names:
                self._pg_names.remove(dbname)
        shutil.rmtree(db.data_dir, ignore_errors=True)

    def drop_stale(self) -> list[str]:
        """Drop ``bench_<pid>_…`` databases left by bench runs whose process is gone (a
        killed run cannot clean up after itself). Live runs' databases are left alone."""
        dropped = []
        with self._admin() as conn:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT datname FROM pg_database WHERE datname ~ '^bench_[0-9]+_'"
                ).fetchall()
            ]
            for dbname in names:
                pid = int(dbname.split("_")[1])
                if pid != os.getpid() and not _alive(pid):
                    conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
                    dropped.append(dbname)
        return dropped

    def close(self) -> None:
        if not self._pg_names:
            return
        with self._admin() as conn:
            for dbname in self._pg_names:
                conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        self._pg_names.clear()

    # --- both --------------------------------------------------------------------------

    def env(self, db: Db, **extra: str) -> dict[str, str]:
        return child_env(
            RUNBELL_DATA_DIR=str(db.data_dir),
            RUNBELL_DATABASE_URL=db.url,
            RUNBELL_SECRET_KEY=self.secret_key,
            **extra,
        )

    def _migrate(self, url: str, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        env = child_env(
            RUNBELL_DATA_DIR=str(data_dir),
            RUNBELL_DATABASE_URL=url,
            RUNBELL_SECRET_KEY=self.secret_key,
        )
        done = subprocess.run(
            [RUNBELL, "migrate"], env=env, cwd=REPO, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"runbell migrate failed:\n{done.stdout}\n{done.stderr}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- processes --------------------------------------------------------------------------


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as rsp:
        return json.loads(rsp.read())


class Server:
    """``runbell serve`` or ``runbell api`` (through the wrapper) on 127.0.0.1:port.

    The port is picked free and then handed to the command, so another process may take
    it in between (any outgoing connection can get it as its ephemeral port); a server
    that exits because its address is in use is started again on a new port.
    """

    ATTEMPTS = 3

    def __init__(self, env: dict[str, str], command: str, log: Path) -> None:
        self.command = command
        self.env = env
        self.log = log
        self._logfile = log.open("ab")
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._logfile.write(f"--- {self.command} on port {self.port}\n".encode())
        self._logfile.flush()
        argv = [PYTHON, "-m", "bench.servers", self.command, "--host", "127.0.0.1"]
        self.proc = subprocess.Popen(
            [*argv, "--port", str(self.port)],
            env=self.env,
            cwd=REPO,
            stdout=self._logfile,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ready(self, timeout: float = 90.0) -> Server:
        attempts = 1

        def up() -> bool:
            nonlocal attempts
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-3000:]
                if "address already in use" in tail and attempts < self.ATTEMPTS:
                    attempts += 1
                    self._start()
                    return False
                raise RuntimeError(f"{self.log.name} exited ({self.proc.returncode}):\n{tail}")
            try:
                return bool(get_json(self.url + "/healthz", timeout=2)["status"] == "ok")
            except OSError:
                return False

        wait_until(up, f"{self.command} to answer", timeout, every=0.1)
        return self

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = get_json(self.url + "/bench/stats")
        return out

    def stop(self) -> None:
        stop(self.proc)
        self._logfile.close()


class Workers:
    """``n`` ``runbell worker`` processes, started together, each logging to a file."""

    def __init__(self, env: dict[str, str], n: int, logdir: Path, tag: str) -> None:
        self.logs = [logdir / f"{tag}-worker{i}.log" for i in range(n)]
        self.procs: list[subprocess.Popen[bytes]] = []
        for log in self.logs:
            with log.open("wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [RUNBELL, "worker"],
                        env=env,
                        cwd=REPO,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )

    def ready(self, timeout: float = 90.0) -> Workers:
        def started() -> bool:
            for proc, log in zip(self.procs, self.logs, strict=True):
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{log.name} exited:\n{log.read_text(errors='replace')[-3000:]}"
                    )
            return all("worker.started" in log.read_text(errors="replace") for log in self.logs)

        wait_until(started, "the workers to start", timeout, every=0.1)
        return self

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            stop(proc)


# --- the wrapper (runs inside the server process) ------------------------------------------


class StatementCounter:
    """``before_cursor_execute`` / ``commit`` listener: what this process asks the database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statements = 0
        self.feed_reads = 0
        self.commits = 0

    def on_execute(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        feed = statement.lstrip()[:6].upper() == "SELECT" and "feed_events" in statement
        with self._lock:
            self.statements += 1
            self.feed_reads += feed

    def on_commit(self, conn: Any) -> None:
        with self._lock:
            self.commits += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {
                "statements": self.statements,
                "feed_reads": self.feed_reads,
                "commits": self.commits,
            }


SIGNALS_PATH = "/v1/runs/{run_id}/signals"


def _routes(routes: Any) -> Any:
    """Every route, also inside included routers (newer FastAPI keeps them nested)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _routes(inner.routes)
        else:
            yield route


def noop_route(routes: list[Any]) -> Any:
    return next(r for r in routes if getattr(r, "path", "") == "/bench/noop")


def install_bench_routes(app: Any, core: Any) -> None:
    """Add ``POST /bench/noop`` and ``GET /bench/stats`` to the app ``runbell`` built."""
    import sqlalchemy as sa
    from pydantic import BaseModel, ConfigDict, Field

    from bench import targets

    counter = StatementCounter()
    engine = targets.engine_of(core)
    sa.event.listen(engine, "before_cursor_execute", counter.on_execute)
    sa.event.listen(engine, "commit", counter.on_commit)

    signal_route = next(
        r
        for r in _routes(app.routes)
        if getattr(r, "path", "").endswith(SIGNALS_PATH) and "POST" in getattr(r, "methods", ())
    )
    signal_is_async = inspect.iscoroutinefunction(signal_route.endpoint)

    class NoopIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        event_id: str = Field(min_length=1, max_length=200)
        state: str = Field(min_length=1, max_length=20)

    def noop_sync(body: Any) -> dict[str, Any]:
        return {"outcome": "noop", "event_id": body.event_id}

    async def noop_async(body: Any) -> dict[str, Any]:
        return {"outcome": "noop", "event_id": body.event_id}

    noop = noop_async if signal_is_async else noop_sync
    noop.__annotations__ = {"body": NoopIn, "return": dict[str, Any]}

    def stats() -> dict[str, Any]:
        return {**counter.snapshot(), "pid": os.getpid(), "signal_handler_async": signal_is_async}

    stats.__annotations__ = {"return": dict[str, Any]}
    app.add_api_route("/bench/noop", noop, methods=["POST"], include_in_schema=False)
    app.add_api_route("/bench/stats", stats, methods=["GET"], include_in_schema=False)
    # The no-op is matched where the signal route is (just before it): routing checks each
    # route in turn, and the no-op appended after every API and web route paid ~118 checks
    # the signal does not — a baseline slower than it should be (issue 21's profile).
    routes = app.router.routes
    holder = next(i for i, r in enumerate(routes) if signal_route in list(_routes([r])))
    routes.insert(holder, routes.pop(routes.index(noop_route(routes))))


def main(argv: list[str]) -> None:
    from bench import targets

    if not argv or argv[0] not in ("serve", "api"):
        sys.exit("usage: python -m bench.servers serve|api [runbell options]")
    targets.run_command_with_app_hook(argv, install_bench_routes)


if __name__ == "__main__":
    main(sys.argv[1:])
