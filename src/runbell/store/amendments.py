"""Amendments: changes to a run proposed by someone else, each with its input request."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from runbell.store import tables as t

am = t.amendments


@dataclass(frozen=True, slots=True)
class Amendment:
    """A change to a run someone other than its owner proposed, and what became of it.
    ``changes`` are the run fields it would set, ``base`` their values when proposed."""

    tenant_id: str
    id: str
    run_id: str
    input_request_id: str
    proposed_by: str
    text: str
    changes: dict[str, Any] | None
    base: dict[str, Any] | None
    run_version: int
    state: str
    created_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    applied_version: int | None = None
    actor: dict[str, Any] | None = None  # the credential the proposal came through
    proposed_by_email: str | None = None  # read with the row, not stored on it

    @classmethod
    def of(cls, row: RowMapping) -> Amendment:
        return cls(**row)


def insert(conn: Connection, amendment: Amendment) -> None:
    values = asdict(amendment)
    del values["proposed_by_email"]
    conn.execute(am.insert().values(**values))


def get(
    conn: Connection, tenant_id: str, amendment_id: str, *, for_update: bool = False
) -> Amendment | None:
    """The amendment with its proposer's email (``proposed_by_email``)."""
    q = (
        sa.select(am, t.users.c.email.label("proposed_by_email"))
        .join(t.users, t.users.c.id == am.c.proposed_by)
        .where(am.c.tenant_id == tenant_id, am.c.id == amendment_id)
    )
    if for_update:
        q = q.with_for_update(of=am)
    row = conn.execute(q).first()
    return None if row is None else Amendment.of(row._mapping)


def for_run(
    conn: Connection, tenant_id: str, run_id: str, *, states: tuple[str, ...] = ("pending",)
) -> list[Amendment]:
    """The run's amendments in ``states``, oldest first, with proposers' emails.

    Sorted here, not by the database: a run has a handful, and with an ``ORDER BY
    created_at`` SQLite's planner walked ``ix_amendments_tenant_created`` (every amendment
    of the tenant) to spare itself that sort, instead of ``ix_amendments_run``."""
    rows = conn.execute(
        sa.select(am, t.users.c.email.label("proposed_by_email"))
        .join(t.users, t.users.c.id == am.c.proposed_by)
        .where(am.c.tenant_id == tenant_id, am.c.run_id == run_id, am.c.state.in_(states))
    ).all()
    return sorted((Amendment.of(r._mapping) for r in rows), key=lambda a: (a.created_at, a.id))


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
