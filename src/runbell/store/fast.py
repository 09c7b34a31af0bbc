"""Hot statements compiled once per dialect and run on the driver's cursor.

Building a SQLAlchemy Core statement, computing its cache key and setting up an execution
context costs 100-700 µs a call on this kind of machine; the driver itself needs ~10 µs.
For the few statements the write path runs for every signal (BENCHMARKS.md, "Where the
time goes"), :class:`Statement` compiles the Core statement once per dialect and takes
each value's bind and result processor from its type, so values go in and come out as
through ``conn.execute`` (aware UTC datetimes, JSON, SQLite booleans) — only the per-call
overhead is gone. One difference, kept on purpose: a ``None`` goes to the driver as SQL
NULL without its type's processor (``conn.execute`` would write the JSON ``'null'`` into a
JSON column); both read back as ``None``.

Only public SQLAlchemy API is used, listed here because an upgrade that changes any of it
must fail ``tests/integration/test_fast_seam.py`` (pyproject bounds SQLAlchemy ``<2.2``):

- ``ClauseElement.compile(dialect=…)`` and, of the result, ``string``, ``positional``,
  ``positiontup``, ``params`` (every bind name in the SQL, with the values the statement
  fixes itself, e.g. ``state == "open"``) and ``binds`` (name → ``BindParameter``:
  ``type``, ``required``);
- ``TypeEngine.dialect_impl(dialect)`` with ``bind_processor(dialect)`` and
  ``result_processor(dialect, None)``;
- ``exported_columns`` of the statement (a SELECT's columns, a DML statement's
  RETURNING): the row keys, in the order the driver returns them. Every unnamed
  expression is labelled (``count(*)`` would otherwise be keyed ``count`` here and
  ``count_1`` by ``conn.execute``);
- ``Connection.get_transaction()`` and ``Connection.begin()`` (a statement with no
  transaction begins one, as ``conn.execute`` would),
  ``Connection.connection.dbapi_connection`` (the driver connection, in the current
  transaction and savepoint), ``Dialect.loaded_dbapi``, ``Dialect.is_disconnect``,
  ``DBAPIError.instance`` and ``Connection.invalidate``;
- ``Connection.dispatch.before_cursor_execute`` / ``after_cursor_execute``: the
  listeners of the connection and its engine (falsy when there are none).

When there are cursor listeners (statement counters, tracing), they are called with what
SQLAlchemy gives them — ``(conn, cursor, statement, parameters, context, executemany)``,
with no execution context (and a ``retval=True`` listener's return value is not used) —
so they see these statements as they see any. A driver error comes back as SQLAlchemy's
own ``DBAPIError`` subclass (``IntegrityError``, ``OperationalError``…), with the
connection invalidated when the driver says it was lost, so callers and
:func:`runbell.store.db.unavailable_reason` treat it as they treat any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

from runbell.store.tables import UTCDateTime

#: What a :class:`Statement` builds: a SELECT, or DML with or without RETURNING.
Built = sa.Select[Any] | sa.TextualSelect | sa.Insert | sa.Update | sa.Delete

_Processor = Callable[[Any], Any]


class Compiled:
    """One statement compiled for one dialect: its SQL, how its parameters are sent and
    how its rows are read."""

    __slots__ = ("fixed", "keys", "names", "plan", "positional", "results", "sql")

    def __init__(self, stmt: Built, dialect: Dialect) -> None:
        compiled = stmt.compile(dialect=dialect)
        self.sql: str = compiled.string
        self.positional = bool(compiled.positional)
        # Every bind parameter by the name it has in the SQL, with its value when the
        # statement fixes it (a literal such as ``state == "open"``).
        embedded = compiled.params
        names = compiled.positiontup if self.positional else embedded
        assert names is not None
        self.names: tuple[str, ...] = tuple(str(name) for name in names)
        binds = compiled.binds
        unknown = [name for name in self.names if name not in binds]
        if unknown:  # an escaped name (odd characters): not something the seam sends
            raise ValueError(f"bind parameters the seam cannot name: {unknown}")
        self.fixed: dict[str, Any] = {
            name: embedded[name] for name in self.names if not binds[name].required
        }
        self.plan: tuple[tuple[str, _Processor | None], ...] = tuple(
            (name, _bind_processor(binds[name].type, dialect)) for name in self.names
        )
        columns = stmt.exported_columns
        keys = list(columns.keys())
        if not all(isinstance(key, str) for key in keys):
            raise ValueError(f"result columns without a name: {keys}")
        self.keys: tuple[str, ...] = tuple(str(key) for key in keys)
        self.results: tuple[tuple[str, _Processor], ...] = tuple(
            (key, proc)
            for key, proc in (
                (key, col.type.dialect_impl(dialect).result_processor(dialect, None))
                for key, col in zip(self.keys, columns, strict=True)
            )
            if proc is not None
        )

    def params(self, given: Mapping[str, Any]) -> Any:
        """The driver's parameters (a list for a positional paramstyle, else a dict)."""
        values = {**self.fixed, **given} if self.fixed else given
        if self.positional:
            out = []
            for name, proc in self.plan:
                value = values[name]
                out.append(value if proc is None or value is None else proc(value))
            return out
        named = {}
        for name, proc in self.plan:
            value = values[name]
            named[name] = value if proc is None or value is None else proc(value)
        return named

    def row(self, raw: Sequence[Any]) -> dict[str, Any]:
        row = dict(zip(self.keys, raw, strict=False))
        for key, proc in self.results:
            value = row[key]
            if value is not None:
                row[key] = proc(value)
        return row


_UTC_BINDS: dict[str, _Processor] = {}
_UTC_MEMO = 256  # values each dialect's UTC bind remembers


def _bind_processor(type_: Any, dialect: Dialect) -> _Processor | None:
    if isinstance(type_, UTCDateTime):
        # One function per dialect, shared by every column: its memo then serves a
        # transaction's ``now`` across the columns and statements that bind it.
        found_utc = _UTC_BINDS.get(dialect.name)
        if found_utc is None:
            found_utc = _UTC_BINDS[dialect.name] = _utc_bind(dialect)
        return found_utc
    found: _Processor | None = type_.dialect_impl(dialect).bind_processor(dialect)
    return found


def _utc_bind(dialect: Dialect) -> _Processor:
    """:class:`~runbell.store.tables.UTCDateTime`'s bind as one function: a signal binds
    about 14 timestamps, and the type's own chain (TypeDecorator, ``process_bind_param``,
    then SQLite's DATETIME formatting a dict of seven fields) cost ~3 µs each. The same
    value comes out (``test_fast_seam``): SQLite's storage text
    ``YYYY-MM-DD HH:MM:SS.ffffff`` is ``isoformat`` with a space and microseconds always
    shown; PostgreSQL gets the aware UTC datetime and psycopg adapts it."""
    sqlite = dialect.name == "sqlite"
    # SQLite: the text it gave for the UTC values it saw lately. A transaction stamps every
    # row it writes with its one ``now`` and the run's UPDATE re-binds the times it read:
    # a signal binds ~14 timestamps of ~4 values. Keyed only by values whose tzinfo is
    # UTC, where equal means the same instant (with any other zone two equal datetimes of
    # one tzinfo may be different instants across a DST fold). Bounded; threads share it
    # (a dict's get and set are atomic).
    memo: dict[datetime, str] = {}

    def bind(value: datetime) -> Any:
        tz = value.tzinfo
        if tz is UTC:
            if not sqlite:
                return value  # what ``astimezone(UTC)`` gives for it: itself
            found = memo.get(value)
            if found is None:
                if len(memo) >= _UTC_MEMO:
                    memo.clear()
                found = memo[value] = value.replace(tzinfo=None).isoformat(" ", "microseconds")
            return found
        if tz is None:
            raise ValueError("naive datetime given to the store; pass an aware UTC datetime")
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None).isoformat(" ", "microseconds") if sqlite else utc

    return bind


def _same_for_every_dialect(build: Callable[[], Built]) -> Callable[[str], Built]:
    return lambda _dialect: build()


class Statement:
    """A Core statement with ``sa.bindparam`` placeholders, compiled once per dialect.

    Its result columns are table columns or labelled (``sa.func.count().label("n")``), so
    the seam keys rows as ``conn.execute`` does."""

    __slots__ = ("_build", "_compiled")

    def __init__(
        self,
        build: Callable[[], Built] | None = None,
        *,
        build_for: Callable[[str], Built] | None = None,
    ) -> None:
        """``build()`` makes the statement; or ``build_for(dialect_name)``, when its text
        differs by dialect (:meth:`per_dialect`)."""
        if build is not None and build_for is None:
            build_for = _same_for_every_dialect(build)
        elif build is not None or build_for is None:
            raise TypeError("Statement needs one of build and build_for")
        self._build: Callable[[str], Built] = build_for
        self._compiled: dict[str, Compiled] = {}

    @classmethod
    def per_dialect(cls, build: Callable[[str], Built]) -> Statement:
        """A statement whose text differs by dialect (``build`` gets its name)."""
        return cls(build_for=build)

    def statement(self, dialect: str) -> Built:
        """The Core statement for a dialect name, as :meth:`compiled` compiles it."""
        return self._build(dialect)

    def compiled(self, dialect: Dialect) -> Compiled:
        """Compiled for this dialect (once; later calls reuse it)."""
        found = self._compiled.get(dialect.name)
        if found is None:
            found = self._compiled[dialect.name] = Compiled(self._build(dialect.name), dialect)
        return found

    def _run(
        self, conn: Connection, params: Iterable[Mapping[str, Any]], many: bool
    ) -> tuple[Compiled, Any]:
        p = self.compiled(conn.dialect)
        if conn.get_transaction() is None:
            # Begin as conn.execute would (autobegin). Without it a read's first statement
            # ran before the read's BEGIN on SQLite, in a snapshot of its own.
            conn.begin()
        dbapi_conn = conn.connection.dbapi_connection
        assert dbapi_conn is not None
        cursor = dbapi_conn.cursor()
        args = [p.params(given) for given in params]
        sql = p.sql
        sent: Any = args if many else args[0]
        # Listeners (statement counters, tracing) see these statements as they see any.
        dispatch = conn.dispatch
        if dispatch.before_cursor_execute:
            dispatch.before_cursor_execute(conn, cursor, sql, sent, None, many)
        try:
            if many:
                cursor.executemany(sql, sent)
            else:
                cursor.execute(sql, sent)
        except conn.dialect.loaded_dbapi.Error as exc:
            cursor.close()
            raise _wrapped(conn, sql, exc, dbapi_conn, cursor) from exc
        if dispatch.after_cursor_execute:
            dispatch.after_cursor_execute(conn, cursor, sql, sent, None, many)
        if _PIPES:
            pipe = _PIPES.get(id(dbapi_conn))
            if pipe is not None:
                pipe.sent += 1
                pipe.queued = True
        return p, cursor

    def _fetch(self, conn: Connection, cursor: Any, one: bool) -> Any:
        """The cursor's rows (in a pipeline: the first fetch waits for everything sent so
        far — one round trip — and a server error surfaces here, wrapped as ``_run``'s)."""
        if not _PIPES:
            return cursor.fetchone() if one else cursor.fetchall()
        dbapi_conn = conn.connection.dbapi_connection
        pipe = _PIPES.get(id(dbapi_conn))
        if pipe is not None and pipe.queued:
            pipe.trips += 1
            pipe.queued = False
        try:
            return cursor.fetchone() if one else cursor.fetchall()
        except conn.dialect.loaded_dbapi.Error as exc:
            # Still inside the pipeline: its mode is no sign of a broken connection here.
            raise _wrapped(conn, "(pipeline)", exc, dbapi_conn, cursor, piped=True) from exc

    def rows(self, conn: Connection, **params: Any) -> list[dict[str, Any]]:
        p, cursor = self._run(conn, [params], many=False)
        try:
            return [p.row(r) for r in self._fetch(conn, cursor, False)]
        finally:
            cursor.close()

    def first(self, conn: Connection, **params: Any) -> dict[str, Any] | None:
        p, cursor = self._run(conn, [params], many=False)
        try:
            raw = self._fetch(conn, cursor, True)
            return None if raw is None else p.row(raw)
        finally:
            cursor.close()

    def execute(self, conn: Connection, **params: Any) -> int:
        """Run it; the rowcount (-1 when the driver does not know). Inside a pipeline
        it waits for its answer (the rowcount is only known then)."""
        _, cursor = self._run(conn, [params], many=False)
        if _PIPES:
            _wait(conn, cursor)
        count = int(cursor.rowcount)
        cursor.close()
        return count

    def send(self, conn: Connection, **params: Any) -> Pending:
        """Send the statement now, read its rows later (:meth:`Pending.rows`): inside
        :func:`pipeline`, statements sent one after the other share one round trip."""
        p, cursor = self._run(conn, [params], many=False)
        return Pending(self, conn, p, cursor)

    def post(self, conn: Connection, **params: Any) -> None:
        """Run it without reading any answer: inside :func:`pipeline` it is not waited
        for (it rides with the next read; a server error surfaces there)."""
        _, cursor = self._run(conn, [params], many=False)
        pipe = _PIPES.get(id(conn.connection.dbapi_connection)) if _PIPES else None
        if pipe is None:
            cursor.close()
        else:
            pipe.posted.append(cursor)  # closed when the pipeline ends

    def many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            _, cursor = self._run(conn, rows, many=True)
            cursor.close()


def _wait(conn: Connection, cursor: Any) -> None:
    """Inside a pipeline: wait for everything sent so far (one round trip), so
    ``cursor`` has its result; a server error is raised here, wrapped."""
    dbapi_conn = conn.connection.dbapi_connection
    pipe = _PIPES.get(id(dbapi_conn))
    if pipe is None:
        return
    if pipe.queued:
        pipe.trips += 1
        pipe.queued = False
    try:
        pipe.driver.sync()
    except conn.dialect.loaded_dbapi.Error as exc:
        cursor.close()
        raise _wrapped(conn, "(pipeline)", exc, dbapi_conn, cursor, piped=True) from exc


class Pending:
    """A statement sent whose rows are not read yet (:meth:`Statement.send`)."""

    __slots__ = ("_compiled", "_conn", "_cursor", "_stmt")

    def __init__(self, stmt: Statement, conn: Connection, compiled: Compiled, cursor: Any):
        self._stmt, self._conn, self._compiled, self._cursor = stmt, conn, compiled, cursor

    def rows(self) -> list[dict[str, Any]]:
        try:
            raw = self._stmt._fetch(self._conn, self._cursor, False)
            return [self._compiled.row(r) for r in raw]
        finally:
            self._cursor.close()


class _Pipe:
    __slots__ = ("driver", "posted", "queued", "sent", "trips")

    def __init__(self, began: bool) -> None:
        self.driver: Any = None  # psycopg's Pipeline
        self.posted: list[Any] = []  # cursors of Statement.post, answers not read
        self.sent = int(began)  # statements sent in it (and the BEGIN psycopg queued)
        self.queued = began  # sent since the last wait for results
        self.trips = 0


#: Open pipelines by driver connection (one per writer transaction at most; empty
#: otherwise, so a statement outside pipelines pays one truth test).
_PIPES: dict[int, _Pipe] = {}
#: Round trips this process's pipelines saved: statements (and BEGINs) sent in them,
#: less the waits for results they made. Read by the bench (bench/p1_core.py) to count
#: round trips per signal; written by the writer thread only.
saved_round_trips = 0


def _sync_sqlalchemy_statement(
    conn: Connection, cursor: Any, statement: str, params: Any, context: Any, many: bool
) -> None:
    """A statement run through ``conn.execute`` inside a pipeline: SQLAlchemy reads the
    cursor's description and rows right after this event, so wait for its results here."""
    if context is None:
        return  # one of ours: counted by Statement._run, read by Statement._fetch
    dbapi_conn = conn.connection.dbapi_connection
    pipe = _PIPES.get(id(dbapi_conn))
    if pipe is None:
        return
    pipe.driver.sync()
    pipe.sent += 1
    pipe.trips += 1
    pipe.queued = False


def pipelined(conn: Connection) -> bool:
    """Whether ``conn`` is inside :func:`pipeline` (PostgreSQL): a statement posted now is
    not waited for."""
    return bool(_PIPES) and id(conn.connection.dbapi_connection) in _PIPES


@contextmanager
def pipeline(conn: Connection) -> Iterator[None]:
    """On PostgreSQL, send the statements run inside without waiting for each one's
    answer (psycopg 3 pipeline mode): they go in one round trip, up to the first read of
    a result (:meth:`Statement.rows`, :meth:`Pending.rows`), and the block's end waits
    for the rest. A server error ends the pipeline; it is raised (as a ``DBAPIError``,
    like any other) at the next read or at the block's end, and the transaction is then
    failed, as after any error. Elsewhere (SQLite) it does nothing."""
    global saved_round_trips
    if conn.dialect.name != "postgresql":
        yield
        return
    if conn.get_transaction() is None:
        conn.begin()
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    key = id(dbapi_conn)
    if key in _PIPES:  # nested: ride the open one
        yield
        return
    began = dbapi_conn.info.transaction_status == 0  # IDLE: psycopg queues the BEGIN
    pipe = _Pipe(began)
    _PIPES[key] = pipe
    sa.event.listen(conn, "after_cursor_execute", _sync_sqlalchemy_statement)
    try:
        try:
            with dbapi_conn.pipeline() as pipe.driver:
                yield
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _wrapped(conn, "(pipeline)", exc, dbapi_conn, None) from exc
    finally:
        del _PIPES[key]
        for cursor in pipe.posted:
            cursor.close()
        sa.event.remove(conn, "after_cursor_execute", _sync_sqlalchemy_statement)
    if pipe.queued:
        pipe.trips += 1
    saved_round_trips += max(0, pipe.sent - pipe.trips)


def _wrapped(
    conn: Connection, sql: str, exc: Any, dbapi_conn: Any, cursor: Any, *, piped: bool = False
) -> sa.exc.DBAPIError:
    dialect = conn.dialect
    lost = dialect.is_disconnect(exc, dbapi_conn, cursor) or (
        bool(getattr(dbapi_conn, "broken", False)) if piped else _unusable(dbapi_conn)
    )
    err = sa.exc.DBAPIError.instance(
        sql,
        None,
        exc,
        dialect.loaded_dbapi.Error,
        hide_parameters=True,
        dialect=dialect,
        connection_invalidated=lost,
    )
    if lost:
        conn.invalidate(exc)
    assert isinstance(err, sa.exc.DBAPIError)
    return err


def _unusable(dbapi_conn: Any) -> bool:
    """A psycopg connection that cannot even roll back: broken, not OK, or left inside a
    pipeline (an ``executemany`` the server cut off mid-way — "cannot exit pipeline mode
    while busy"). Invalidated, the pool discards it instead of resetting it (which would
    fail again and log a traceback). False for drivers without these attributes."""
    if getattr(dbapi_conn, "broken", False):
        return True
    pgconn = getattr(dbapi_conn, "pgconn", None)
    if pgconn is None:
        return False
    return bool(getattr(pgconn, "status", 0)) or bool(getattr(pgconn, "pipeline_status", 0))


def insert(table: sa.Table, columns: Iterable[str] | None = None) -> Statement:
    """``INSERT INTO table (columns…) VALUES (:column…)`` — every row names every column."""
    names = list(columns) if columns is not None else [c.name for c in table.columns]
    return Statement(
        lambda: table.insert().values(
            {name: sa.bindparam(name, type_=table.c[name].type) for name in names}
        )
    )
