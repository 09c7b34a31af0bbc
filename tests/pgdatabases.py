"""The suite's PostgreSQL test databases: named per run, dropped even across a restart.

Every database the suite makes on a shared server is named after the run and the xdist
worker that made it::

    rb_tmpl_<run>_<worker>          the migrated template of one worker (session-scoped)
    rb_t_<run>_<worker>_<random>    one test's clone of it

``<run>`` is shared by all workers of one ``pytest`` invocation (xdist's ``testrunuid``)
and ``<worker>`` is ``gw0``, ``gw1``… or ``main``. So a run can tell its own databases
from another run's or another engineer's, and a sweep at the end drops only its own.

Each admin statement goes through a fresh connection (no pool to hold one that a server
restart has killed) and a drop is retried, with backoff, until it succeeds or
:data:`tests.timeouts.WAIT` has passed: a restart in the middle of a run (or a server
still starting up) no longer leaves ``rb_t_*`` / ``rb_tmpl_*`` databases behind.
"""

from __future__ import annotations

import re
import time
import uuid

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from tests.timeouts import WAIT, scaled

__all__ = ["TestDatabases"]

_SAFE = re.compile(r"^[a-z0-9_]+$")


class TestDatabases:
    """The databases of one run (``run``) and worker (``worker``) on ``admin_url``."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, admin_url: str, run: str, worker: str) -> None:
        assert _SAFE.match(run) and _SAFE.match(worker), (run, worker)
        self.admin_url = admin_url
        self.run = run
        self.worker = worker

    @classmethod
    def of_template(cls, admin_url: str, template: str) -> TestDatabases:
        """The run and worker that ``template`` (``rb_tmpl_<run>_<worker>``) belongs to."""
        run, _, worker = template.removeprefix("rb_tmpl_").partition("_")
        return cls(admin_url, run, worker)

    @property
    def template(self) -> str:
        return f"rb_tmpl_{self.run}_{self.worker}"

    def new_clone_name(self) -> str:
        return f"rb_t_{self.run}_{self.worker}_{uuid.uuid4().hex[:12]}"

    def url(self, name: str) -> str:
        return sa.make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    # --- statements ------------------------------------------------------------------

    def _execute(self, sql: str, params: dict[str, str] | None = None) -> list[str]:
        """One statement on a fresh AUTOCOMMIT connection; the first column of its rows."""
        engine = sa.create_engine(
            self.admin_url,
            isolation_level="AUTOCOMMIT",
            poolclass=NullPool,
            connect_args={"connect_timeout": int(scaled(5))},
        )
        try:
            with engine.connect() as conn:
                result = conn.execute(sa.text(sql), params or {})
                return [row[0] for row in result] if result.returns_rows else []
        finally:
            engine.dispose()

    def _retrying(self, sql: str, params: dict[str, str] | None = None) -> list[str]:
        """:meth:`_execute` until it succeeds; only for statements safe to repeat."""
        deadline = time.monotonic() + WAIT
        delay = 0.1
        while True:
            try:
                return self._execute(sql, params)
            except sa.exc.OperationalError:  # refused, starting up, terminated, in use
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def create(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE ``name`` (a clone of ``template``); returns its URL. Not
        retried: a failure may have created it, and the sweep removes it either way."""
        assert name.startswith(("rb_t_", "rb_tmpl_")) and _SAFE.match(name), name
        clause = f' TEMPLATE "{template}"' if template else ""
        self._execute(f'CREATE DATABASE "{name}"{clause}')
        return self.url(name)

    def drop(self, name: str) -> None:
        """DROP DATABASE ``name``, its sessions terminated; reconnects and retries across
        a server restart (bounded by ``WAIT``)."""
        assert _SAFE.match(name), name
        self._retrying(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    # --- leftovers -------------------------------------------------------------------

    def leftovers(self, *, whole_run: bool = False) -> list[str]:
        """This worker's databases that still exist (every worker's with ``whole_run``)."""
        if whole_run:
            clones, templates = f"rb_t_{self.run}_", f"rb_tmpl_{self.run}_"
            match = "left(datname, length(:c)) = :c OR left(datname, length(:m)) = :m"
        else:
            clones, templates = f"rb_t_{self.run}_{self.worker}_", self.template
            match = "left(datname, length(:c)) = :c OR datname = :m"
        return self._retrying(
            f"SELECT datname FROM pg_database WHERE {match} ORDER BY datname",
            {"c": clones, "m": templates},
        )

    def sweep(self, *, whole_run: bool = False) -> list[str]:
        """Drop this worker's leftovers (every worker's of the run with ``whole_run``:
        only once all workers have finished); returns the names dropped."""
        found = self.leftovers(whole_run=whole_run)
        for name in found:
            self.drop(name)
        return found
