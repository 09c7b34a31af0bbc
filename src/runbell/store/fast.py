"""Hot statements compiled once per dialect and run on the driver's cursor.

Building a SQLAlchemy Core statement, computing its cache key and setting up an execution
context costs 100-700 µs a call on this kind of machine; the driver itself needs ~10 µs.
For the few statements the write path runs for every signal (BENCHMARKS.md, "Where the
time goes"), :class:`Statement` compiles the Core statement once per dialect and reuses
SQLAlchemy's own bind and result processors, so values go in and come out exactly as
through ``conn.execute`` (aware UTC datetimes, JSON) — only the per-call overhead is gone.

It runs on the connection's current transaction (and savepoint), and fires the engine's
``before_cursor_execute``/``after_cursor_execute`` events like any statement (with no
execution context), so statement counters and tracing see it. A driver error comes back
as SQLAlchemy's own ``DBAPIError`` subclass (``IntegrityError``, ``OperationalError``…),
with the connection invalidated when the driver says it was lost, so callers and
:func:`runbell.store.db.unavailable_reason` treat it as they treat any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect


class _Compiled:
    __slots__ = ("binds", "columns", "fixed", "names", "positional", "results", "sql")

    def __init__(self, stmt: sa.Executable, dialect: Dialect) -> None:
        compiled = stmt.compile(dialect=dialect)  # type: ignore[attr-defined]
        self.sql: str = compiled.string
        self.positional = bool(compiled.positional)
        self.names: tuple[str, ...] = tuple(
            compiled.positiontup if compiled.positional else compiled.binds
        )
        self.binds: dict[str, Callable[[Any], Any]] = dict(compiled._bind_processors)
        # Values written into the statement itself (``state == "open"``).
        self.fixed: dict[str, Any] = {
            name: bp.effective_value for name, bp in compiled.binds.items() if not bp.required
        }
        self.columns: tuple[str, ...] = tuple(c[0] for c in compiled._result_columns)
        self.results: tuple[Callable[[Any], Any] | None, ...] = tuple(
            c[3]._cached_result_processor(dialect, None) for c in compiled._result_columns
        )

    def params(self, given: Mapping[str, Any]) -> Any:
        binds = self.binds
        values = {**self.fixed, **given} if self.fixed else given
        if self.positional:
            out = []
            for name in self.names:
                value = values[name]
                proc = binds.get(name)
                out.append(value if proc is None or value is None else proc(value))
            return out
        named = {}
        for name in self.names:
            value = values[name]
            proc = binds.get(name)
            named[name] = value if proc is None or value is None else proc(value)
        return named

    def row(self, raw: Sequence[Any]) -> dict[str, Any]:
        return {
            name: value if proc is None or value is None else proc(value)
            for name, proc, value in zip(self.columns, self.results, raw, strict=False)
        }


class Statement:
    """A Core statement with ``sa.bindparam`` placeholders, compiled once per dialect."""

    def __init__(self, build: Callable[[], sa.Executable] | None = None) -> None:
        self._build = build
        self._compiled: dict[str, _Compiled] = {}

    @classmethod
    def per_dialect(cls, build: Callable[[str], sa.Executable]) -> Statement:
        """A statement whose text differs by dialect (``build`` gets its name)."""
        stmt = cls()
        stmt._build_for = build  # type: ignore[attr-defined]
        return stmt

    def _for(self, conn: Connection) -> _Compiled:
        name = conn.dialect.name
        found = self._compiled.get(name)
        if found is None:
            built = self._build() if self._build is not None else self._build_for(name)  # type: ignore[attr-defined]
            found = self._compiled[name] = _Compiled(built, conn.dialect)
        return found

    def _run(
        self, conn: Connection, params: Iterable[Mapping[str, Any]], many: bool
    ) -> tuple[_Compiled, Any]:
        c = self._for(conn)
        dbapi_conn = conn.connection.dbapi_connection
        assert dbapi_conn is not None
        cursor = dbapi_conn.cursor()
        args = [c.params(p) for p in params]
        sent = args if many else args[0]
        # Listeners (statement counters, tracing) see these statements as they see any.
        observed = conn._has_events or conn.engine._has_events
        if observed:
            conn.dispatch.before_cursor_execute(conn, cursor, c.sql, sent, None, many)
        try:
            if many:
                cursor.executemany(c.sql, args)
            else:
                cursor.execute(c.sql, args[0])
        except conn.dialect.loaded_dbapi.Error as exc:
            cursor.close()
            raise _wrapped(conn, c.sql, exc, dbapi_conn, cursor) from exc
        if observed:
            conn.dispatch.after_cursor_execute(conn, cursor, c.sql, sent, None, many)
        return c, cursor

    def rows(self, conn: Connection, **params: Any) -> list[dict[str, Any]]:
        c, cursor = self._run(conn, [params], many=False)
        try:
            return [c.row(r) for r in cursor.fetchall()]
        finally:
            cursor.close()

    def first(self, conn: Connection, **params: Any) -> dict[str, Any] | None:
        c, cursor = self._run(conn, [params], many=False)
        try:
            raw = cursor.fetchone()
            return None if raw is None else c.row(raw)
        finally:
            cursor.close()

    def execute(self, conn: Connection, **params: Any) -> int:
        """Run it; the rowcount (-1 when the driver does not know)."""
        _, cursor = self._run(conn, [params], many=False)
        count = int(cursor.rowcount)
        cursor.close()
        return count

    def many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            _, cursor = self._run(conn, rows, many=True)
            cursor.close()


def _wrapped(
    conn: Connection, sql: str, exc: Any, dbapi_conn: Any, cursor: Any
) -> sa.exc.DBAPIError:
    dialect = conn.dialect
    lost = dialect.is_disconnect(exc, dbapi_conn, cursor)
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


def insert(table: sa.Table, columns: Iterable[str] | None = None) -> Statement:
    """``INSERT INTO table (columns…) VALUES (:column…)`` — every row names every column."""
    names = list(columns) if columns is not None else [c.name for c in table.columns]
    return Statement(
        lambda: table.insert().values(
            {name: sa.bindparam(name, type_=table.c[name].type) for name in names}
        )
    )
