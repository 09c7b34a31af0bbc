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

A clone is reused (:class:`ClonePool`): CREATE DATABASE from the migrated 9.8 MB template
costs ~340 ms, a test's database about 18.8 s of the 61 s of
tests/integration/test_idempotency.py, and about 1,057 tests take one. Emptying the
clone again (``DELETE FROM`` each of its tables: ~25 ms; TRUNCATE of the same 45 tables
is ~280 ms, it rewrites their files) and checking that its schema is still the
template's is far cheaper. So at a test's teardown the clone's sessions are terminated,
it is renamed (a child process or pool the test left behind cannot reconnect to the
next test's database, as after a DROP), emptied and compared with the template; only a
clone that passes is handed to the next test of this worker. Anything unexpected (a
migration run down, an altered table, a database setting, a server restart, planner
statistics gathered with rows, an error) drops it as before, and the next test gets a
fresh clone. A test that needs one regardless asks ``pg_database(..., fresh=True)``.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from tests.timeouts import WAIT, scaled

__all__ = ["ClonePool", "TestDatabases"]

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

    def _execute(self, sql: str, params: dict[str, object] | None = None) -> list[str]:
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

    def _retrying(self, sql: str, params: dict[str, object] | None = None) -> list[str]:
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

    def rename(self, name: str, new_name: str) -> None:
        """Terminate the sessions on ``name`` and rename it ``new_name``. Not retried:
        a session that reconnects in between fails it ("being accessed by other
        users"), and the caller drops the clone instead."""
        assert name.startswith("rb_t_") and _SAFE.match(name) and _SAFE.match(new_name)
        # With a timeout, pg_terminate_backend waits for the backend to exit, as DROP …
        # WITH (FORCE) does: otherwise the rename would race the dying session.
        self._execute(
            "SELECT pg_terminate_backend(pid, :wait) FROM pg_stat_activity "
            "WHERE datname = :name AND pid <> pg_backend_pid()",
            {"name": name, "wait": int(scaled(5) * 1000)},
        )
        self._execute(f'ALTER DATABASE "{name}" RENAME TO "{new_name}"')

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


# --- reuse -----------------------------------------------------------------------------

#: Schemas that belong to PostgreSQL, not to the migrations.
_USER_SCHEMAS = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%'"
)

#: Every row of every table goes, except the migration version (part of the schema),
#: and every sequence starts again where a fresh clone's would. One statement, one round
#: trip; ``session_replication_role = replica`` (set by the caller, in the same
#: transaction) skips the foreign-key triggers, so the order of the tables does not
#: matter. DELETE, not TRUNCATE: TRUNCATE makes new files for each table and its indexes
#: (~280 ms for the 45 tables, against ~25 ms).
_EMPTY = f"""
DO $$
DECLARE t record;
BEGIN
  FOR t IN SELECT n.nspname, c.relname FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relkind = 'r' AND {_USER_SCHEMAS}
             AND NOT (n.nspname = 'public' AND c.relname = 'alembic_version')
  LOOP
    EXECUTE format('DELETE FROM %I.%I', t.nspname, t.relname);
  END LOOP;
  FOR t IN SELECT schemaname, sequencename, start_value FROM pg_sequences LOOP
    PERFORM setval(format('%I.%I', t.schemaname, t.sequencename), t.start_value, false);
  END LOOP;
END $$
"""

#: What must be as in the template for a clone to pass as fresh, one row per aspect.
#: Each is text compared whole: a mismatch names the aspect that differs.
_FINGERPRINT: dict[str, str] = {
    "relations": f"""
        SELECT string_agg(format('%s.%s %s %s %s %s %s %s', n.nspname, c.relname, c.relkind,
                 c.relpersistence, c.reloptions, c.relrowsecurity, c.relforcerowsecurity,
                 CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END),
               E'\\n' ORDER BY n.nspname, c.relname)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_USER_SCHEMAS}""",
    # attnum too: a column dropped and added again (a migration down and up) moves.
    "columns": f"""
        SELECT string_agg(format('%s.%s %s %s %s %s %s %s %s', n.nspname, c.relname,
                 a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                 a.attidentity, a.attgenerated, pg_get_expr(d.adbin, d.adrelid)),
               E'\\n' ORDER BY n.nspname, c.relname, a.attnum)
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attnum > 0 AND NOT a.attisdropped AND {_USER_SCHEMAS}""",
    "indexes": """
        SELECT string_agg(indexdef, E'\\n' ORDER BY schemaname, tablename, indexname)
        FROM pg_indexes WHERE schemaname NOT IN ('pg_catalog', 'information_schema')""",
    "constraints": f"""
        SELECT string_agg(format('%s %s %s', o.conrelid::regclass, o.conname,
                 pg_get_constraintdef(o.oid)), E'\\n' ORDER BY 1)
        FROM pg_constraint o JOIN pg_namespace n ON n.oid = o.connamespace
        WHERE {_USER_SCHEMAS}""",
    "triggers": """
        SELECT string_agg(pg_get_triggerdef(oid), E'\\n' ORDER BY 1)
        FROM pg_trigger WHERE NOT tgisinternal""",
    "functions": f"""
        SELECT string_agg(format('%s %s', p.oid::regprocedure, md5(p.prosrc)), E'\\n'
               ORDER BY 1)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {_USER_SCHEMAS}""",
    "types": f"""
        SELECT string_agg(format('%s.%s %s %s', n.nspname, t.typname, t.typtype,
                 (SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder)
                  FROM pg_enum WHERE enumtypid = t.oid)), E'\\n' ORDER BY 1)
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE t.typtype IN ('e', 'd') AND {_USER_SCHEMAS}""",
    # last_value too: a fresh clone's sequences start at their start (none today).
    "sequences": """
        SELECT string_agg(format('%s.%s %s %s %s %s %s %s %s', schemaname, sequencename,
                 data_type, start_value, min_value, max_value, increment_by, cycle,
                 last_value), E'\\n' ORDER BY 1)
        FROM pg_sequences""",
    "policies": """
        SELECT string_agg(format('%s %s %s %s %s', polrelid::regclass, polname, polcmd,
                 pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)),
               E'\\n' ORDER BY 1)
        FROM pg_policy""",
    "extensions": """
        SELECT string_agg(format('%s %s', extname, extversion), E'\\n' ORDER BY 1)
        FROM pg_extension""",
    "database": """
        SELECT format('%s %s %s %s %s', d.datallowconn, d.datconnlimit, d.datistemplate,
                 d.datcollate, (SELECT string_agg(array_to_string(s.setconfig, ','), ';'
                                ORDER BY s.setrole)
                                FROM pg_db_role_setting s WHERE s.setdatabase = d.oid))
        FROM pg_database d WHERE d.datname = current_database()""",
    # A restart since the template was looked at: drop, as the suite did before reuse.
    "server": "SELECT pg_postmaster_start_time()::text",
}

#: Planner statistics that an ANALYZE (a plan test's, or autovacuum's) gathered while
#: rows were there: they would survive the DELETE and steer the next test's plans.
_ANALYZED_WITH_ROWS = f"""
    SELECT string_agg(c.relname, ', ' ORDER BY c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind = 'r' AND c.reltuples > 0 AND {_USER_SCHEMAS}
      AND NOT (n.nspname = 'public' AND c.relname = 'alembic_version')"""

#: Growth over the template past which a fresh clone beats the dead rows left behind
#: (DELETE frees no space; the next tests would scan it).
BLOAT_LIMIT = 8 * 1024 * 1024


@dataclass
class Look:
    """What a clone looks like after :func:`_look`: its schema fingerprint and size."""

    fingerprint: dict[str, str]
    size: int
    analyzed: str | None = None


def _look(conn: sa.Connection) -> Look:
    prints = {
        aspect: str(conn.execute(sa.text(sql)).scalar()) for aspect, sql in _FINGERPRINT.items()
    }
    # alembic_version is read here, not in _FINGERPRINT: a test may have dropped it.
    has_version = conn.execute(sa.text("SELECT to_regclass('public.alembic_version')")).scalar()
    prints["alembic_version"] = (
        ",".join(
            conn.execute(sa.text("SELECT version_num FROM alembic_version ORDER BY 1")).scalars()
        )
        if has_version is not None
        else "(no table)"
    )
    size = int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())
    analyzed = conn.execute(sa.text(_ANALYZED_WITH_ROWS)).scalar()
    return Look(prints, size, analyzed)


@dataclass
class ClonePool:
    """One worker's clones of one template, kept between tests (see the module
    docstring). :meth:`take` hands out a spare or a new clone; :meth:`give_back` empties
    and checks it, keeping it only when it is as good as new."""

    dbs: TestDatabases
    spares: list[str] = field(default_factory=list)
    #: The template as a fresh clone of it looks (None: look at the next new clone).
    template: Look | None = None
    reused: int = 0
    created: int = 0
    #: Why each clone that was dropped rather than kept was not reusable.
    refusals: list[str] = field(default_factory=list)

    _pools: ClassVar[dict[tuple[str, str], ClonePool]] = {}

    @classmethod
    def of(cls, dbs: TestDatabases) -> ClonePool:
        """This process's pool for ``dbs``'s server and template."""
        key = (dbs.admin_url, dbs.template)
        if key not in cls._pools:
            cls._pools[key] = cls(dbs)
        return cls._pools[key]

    @classmethod
    def forget(cls, dbs: TestDatabases) -> ClonePool | None:
        """Forget the pool of ``dbs`` (its databases are being swept); returns it."""
        return cls._pools.pop((dbs.admin_url, dbs.template), None)

    def summary(self) -> str:
        """One line: clones created and reused, and the reasons given for dropping."""
        reasons = sorted({r: self.refusals.count(r) for r in self.refusals}.items())
        return f"created={self.created} reused={self.reused} refused={reasons}"

    def take(self) -> str:
        """The name of an empty clone of the template, for one test."""
        if self.spares:
            self.reused += 1
            return self.spares.pop()
        name = self.dbs.new_clone_name()
        self.dbs.create(name, template=self.dbs.template)
        self.created += 1
        if self.template is None:
            # A new clone is the template, byte for byte; looking at the template itself
            # would hold a session on it, and CREATE … TEMPLATE refuses while one exists.
            self.template = self._look_at(name)
        return name

    def give_back(self, name: str) -> None:
        """End a test's use of clone ``name``: keep it for the next test if it resets
        to the template's state, else drop it (retried across a server restart)."""
        new_name = self.dbs.new_clone_name()
        try:
            self.dbs.rename(name, new_name)
        except sa.exc.SQLAlchemyError as exc:
            self.refusals.append(f"rename: {type(exc).__name__}")
            self.dbs.drop(name)
            return
        problem = self._reset(new_name)
        if problem is None:
            self.spares.append(new_name)
            return
        self.refusals.append(problem)
        self.dbs.drop(new_name)

    def _reset(self, name: str) -> str | None:
        """Empty clone ``name``; None if it now passes for a fresh one, else why not."""
        try:
            engine = self._engine(name)
            try:
                with engine.begin() as conn:
                    conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
                    # A lock nobody releases (it should not happen: every session was
                    # terminated) fails the reset, and the clone is dropped, not waited on.
                    conn.execute(sa.text("SET LOCAL lock_timeout = '5s'"))
                    conn.execute(sa.text(_EMPTY))
                    look = _look(conn)
            finally:
                engine.dispose()
        except sa.exc.SQLAlchemyError as exc:
            return f"reset failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        if self.template is None:
            return "no template fingerprint"
        differ = [k for k, v in look.fingerprint.items() if self.template.fingerprint.get(k) != v]
        if differ:
            # A restart changes "server" for every later clone too: look again.
            self.template = None
            return "schema differs: " + ", ".join(differ)
        if look.analyzed:
            return f"analyzed with rows: {look.analyzed}"
        if look.size - self.template.size > BLOAT_LIMIT:
            return f"grew by {(look.size - self.template.size) // 1024} kB"
        return None

    def _look_at(self, name: str) -> Look | None:
        try:
            engine = self._engine(name)
            try:
                with engine.connect() as conn:
                    return _look(conn)
            finally:
                engine.dispose()
        except sa.exc.SQLAlchemyError:
            return None  # then nothing is reused until a later clone can be looked at

    def _engine(self, name: str) -> sa.Engine:
        return sa.create_engine(
            self.dbs.url(name), poolclass=NullPool, connect_args={"connect_timeout": int(scaled(5))}
        )
