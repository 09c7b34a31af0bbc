"""Mismatches: advisory claims the state reader did not confirm, and their re-checks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from runbell.store import tables as t

mt = t.mismatches


@dataclass(frozen=True, slots=True)
class Mismatch:
    """An advisory source's claim its state reader did not confirm (``claimed`` is the
    signal as sent), re-checked on a schedule until it resolves or escalates."""

    id: str
    tenant_id: str
    run_id: str
    source_id: str
    event_id: str
    claimed: dict[str, Any]
    observed: dict[str, Any] | None
    status: str
    checks: int
    next_check_at: datetime | None
    last_error: str | None
    created_at: datetime
    resolved_at: datetime | None

    @classmethod
    def of(cls, row: RowMapping) -> Mismatch:
        return cls(**row)


def open_for_claim(conn: Connection, tenant_id: str, run_id: str, state: str) -> str | None:
    """The open mismatch of ``run_id`` that claims ``state``, if one is being reconciled."""
    found = conn.execute(
        sa.select(mt.c.id)
        .where(mt.c.tenant_id == tenant_id, mt.c.run_id == run_id, mt.c.status == "open")
        .where(mt.c.claimed["state"].as_string() == state)
    ).scalar()
    return None if found is None else str(found)


def count_open(conn: Connection, tenant_id: str, run_id: str) -> int:
    return int(
        conn.execute(
            sa.select(sa.func.count())
            .select_from(mt)
            .where(mt.c.tenant_id == tenant_id, mt.c.run_id == run_id, mt.c.status == "open")
        ).scalar_one()
    )


def insert(conn: Connection, values: dict[str, Any]) -> None:
    conn.execute(mt.insert().values(**values))


def due(conn: Connection, now: datetime, limit: int) -> list[Mismatch]:
    rows = conn.execute(
        sa.select(mt)
        .where(mt.c.status == "open", mt.c.next_check_at <= now)
        .order_by(mt.c.next_check_at)
        .limit(limit)
    ).all()
    return [Mismatch.of(r._mapping) for r in rows]


def status_of(conn: Connection, mismatch_id: str) -> str | None:
    found = conn.execute(sa.select(mt.c.status).where(mt.c.id == mismatch_id)).scalar()
    return None if found is None else str(found)


def update(conn: Connection, mismatch_id: str, **values: Any) -> None:
    conn.execute(sa.update(mt).where(mt.c.id == mismatch_id).values(**values))
