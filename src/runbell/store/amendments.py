"""Amendments: changes to a run proposed by someone else, each with its input request."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.store import tables as t

am = t.amendments


def insert(conn: Connection, values: dict[str, Any]) -> None:
    conn.execute(am.insert().values(**values))


def get(
    conn: Connection, tenant_id: str, amendment_id: str, *, for_update: bool = False
) -> dict[str, Any] | None:
    """The amendment with its proposer's email (``proposed_by_email``)."""
    q = (
        sa.select(am, t.users.c.email.label("proposed_by_email"))
        .join(t.users, t.users.c.id == am.c.proposed_by)
        .where(am.c.tenant_id == tenant_id, am.c.id == amendment_id)
    )
    if for_update:
        q = q.with_for_update(of=am)
    row = conn.execute(q).first()
    return None if row is None else dict(row._mapping)


def for_run(
    conn: Connection, tenant_id: str, run_id: str, *, states: tuple[str, ...] = ("pending",)
) -> list[dict[str, Any]]:
    """The run's amendments in ``states``, oldest first, with proposers' emails."""
    rows = conn.execute(
        sa.select(am, t.users.c.email.label("proposed_by_email"))
        .join(t.users, t.users.c.id == am.c.proposed_by)
        .where(am.c.tenant_id == tenant_id, am.c.run_id == run_id, am.c.state.in_(states))
        .order_by(am.c.created_at, am.c.id)
    ).all()
    return [dict(r._mapping) for r in rows]


def decide(
    conn: Connection,
    tenant_id: str,
    amendment_id: str,
    state: str,
    *,
    by: str | None,
    at: datetime,
    applied_version: int | None = None,
) -> bool:
    """Move a pending amendment to ``state``; False if it was no longer pending."""
    res = conn.execute(
        sa.update(am)
        .where(am.c.tenant_id == tenant_id, am.c.id == amendment_id, am.c.state == "pending")
        .values(state=state, decided_by=by, decided_at=at, applied_version=applied_version)
    )
    return bool(res.rowcount)
