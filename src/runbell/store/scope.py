"""A scoped credential's runs as SQL (domain.capabilities.Scope, written as a query).

Run-id glob patterns become ``GLOB`` on SQLite (case-sensitive, ``*`` and ``?`` native)
and ``LIKE … ESCAPE`` on PostgreSQL (case-sensitive; ``_`` and ``%`` escaped), so a
listing filters exactly as :meth:`Scope.run_in_scope` decides one run.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement

from runbell.domain.capabilities import Scope
from runbell.domain.principal import Principal
from runbell.store import tables as t


class _Glob(ColumnElement[bool]):
    """``column`` matches the run-id glob ``pattern`` (``*``, ``?``)."""

    inherit_cache = True
    type = sa.Boolean()

    def __init__(self, column: ColumnElement[Any], pattern: str) -> None:
        self.column = column
        self.pattern = pattern


@compiles(_Glob, "sqlite")
def _glob_sqlite(element: _Glob, compiler: Any, **kw: Any) -> str:
    # Run ids cannot hold ``[``, ``*`` or ``?``: the pattern is the glob as it is.
    value = compiler.process(sa.literal(element.pattern), **kw)
    return f"({compiler.process(element.column, **kw)} GLOB {value})"


@compiles(_Glob)
def _glob_like(element: _Glob, compiler: Any, **kw: Any) -> str:
    escaped = element.pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    like = escaped.replace("*", "%").replace("?", "_")
    value = compiler.process(sa.literal(like), **kw)
    return f"({compiler.process(element.column, **kw)} LIKE {value} ESCAPE '\\')"


def condition(
    scope: Scope, run_id: ColumnElement[Any], created_by: ColumnElement[Any]
) -> ColumnElement[bool]:
    """The runs ``scope`` reaches, on a runs-table's ``run_id`` and creator columns."""
    parts: list[ColumnElement[bool]] = []
    if scope.bound_run is not None:
        parts.append(run_id == scope.bound_run)
    if scope.run_patterns is not None:
        parts.append(sa.or_(*(_Glob(run_id, p) for p in scope.run_patterns)))
    if scope.own_runs:
        parts.append(created_by == (scope.creator_id or ""))
    return sa.and_(sa.true(), *parts)


def run_ids(who: Principal) -> sa.Select[tuple[str]]:
    """The ids of the runs of ``who``'s tenant its scope reaches."""
    assert who.scope is not None
    return sa.select(t.runs.c.run_id).where(
        t.runs.c.tenant_id == who.tenant_id,
        condition(who.scope, t.runs.c.run_id, t.runs.c.created_by_credential),
    )
