"""Schedules, their instruction versions and their fired occurrences (issue 18 item 6).

The one writer of ``schedules``, ``schedule_instructions`` and ``schedule_firings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from runbell.domain.errors import NotFound
from runbell.ids import new_id
from runbell.store import tables as t


@dataclass(frozen=True, slots=True)
class Schedule:
    """One row of ``schedules`` (``secret`` sealed; never shown)."""

    tenant_id: str
    id: str
    name: str | None
    owner_user_id: str
    authority: dict[str, Any] | None
    authority_version: int
    cadence: str
    mode: str
    url: str | None
    secret: str | None
    state: str
    instruction_version: int
    next_fire_at: datetime | None
    state_reason: str | None
    created_at: datetime
    updated_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class Instruction:
    version: int
    text: str
    created_by: dict[str, str] | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Firing:
    schedule_id: str
    due_at: datetime
    webhook_id: str
    instruction_version: int
    authority_version: int
    status: str
    status_code: int | None
    error: str | None
    created_at: datetime
    settled_at: datetime | None


S = t.schedules


def create(
    conn: Connection,
    tenant_id: str,
    now: datetime,
    *,
    name: str | None,
    owner_user_id: str,
    authority: dict[str, Any] | None,
    cadence: str,
    mode: str,
    url: str | None,
    sealed_secret: str | None,
    next_fire_at: datetime | None,
) -> str:
    schedule_id = new_id("sch")
    conn.execute(
        S.insert().values(
            tenant_id=tenant_id,
            id=schedule_id,
            name=name,
            owner_user_id=owner_user_id,
            authority=authority,
            authority_version=1,
            cadence=cadence,
            mode=mode,
            url=url,
            secret=sealed_secret,
            state="active",
            instruction_version=1,
            next_fire_at=next_fire_at,
            created_at=now,
            updated_at=now,
        )
    )
    return schedule_id


def get(
    conn: Connection, tenant_id: str, schedule_id: str, *, for_update: bool = False
) -> Schedule | None:
    q = sa.select(S).where(S.c.tenant_id == tenant_id, S.c.id == schedule_id)
    if for_update:
        q = q.with_for_update()  # SQLite leaves it out: BEGIN IMMEDIATE serializes writers
    row = conn.execute(q).mappings().first()
    return None if row is None else Schedule(**row)


def require(
    conn: Connection, tenant_id: str, schedule_id: str, *, for_update: bool = False
) -> Schedule:
    found = get(conn, tenant_id, schedule_id, for_update=for_update)
    if found is None:
        raise NotFound(f"no schedule {schedule_id!r}")
    return found


def list_for(
    conn: Connection, tenant_id: str, owner_user_id: str | None, after: str | None, limit: int
) -> list[Schedule]:
    """A tenant's schedules by id (``owner_user_id``: only theirs)."""
    q = sa.select(S).where(S.c.tenant_id == tenant_id)
    if owner_user_id is not None:
        q = q.where(S.c.owner_user_id == owner_user_id)
    if after:
        q = q.where(S.c.id > after)
    rows = conn.execute(q.order_by(S.c.id).limit(limit)).mappings().all()
    return [Schedule(**r) for r in rows]


def update(conn: Connection, tenant_id: str, schedule_id: str, **values: Any) -> None:
    conn.execute(
        sa.update(S).where(S.c.tenant_id == tenant_id, S.c.id == schedule_id).values(**values)
    )


def due(conn: Connection, now: datetime, limit: int) -> list[tuple[str, str]]:
    """(tenant, schedule) of active webhook schedules whose next occurrence is due."""
    rows = conn.execute(
        sa.select(S.c.tenant_id, S.c.id)
        .where(S.c.next_fire_at <= now, S.c.state == "active", S.c.mode == "webhook")
        .order_by(S.c.next_fire_at)
        .limit(limit)
    ).all()
    return [(r.tenant_id, r.id) for r in rows]


# --- instructions ---------------------------------------------------------------------

SI = t.schedule_instructions


def add_instruction(
    conn: Connection,
    tenant_id: str,
    schedule_id: str,
    version: int,
    text: str,
    created_by: dict[str, str],
    now: datetime,
) -> None:
    conn.execute(
        SI.insert().values(
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            version=version,
            text=text,
            created_by=created_by,
            created_at=now,
        )
    )


def instructions(conn: Connection, tenant_id: str, schedule_id: str) -> list[Instruction]:
    """Every version, newest first."""
    rows = conn.execute(
        sa.select(SI.c.version, SI.c.text, SI.c.created_by, SI.c.created_at)
        .where(SI.c.tenant_id == tenant_id, SI.c.schedule_id == schedule_id)
        .order_by(SI.c.version.desc())
    ).mappings()
    return [Instruction(**r) for r in rows]


def instruction(conn: Connection, tenant_id: str, schedule_id: str, version: int) -> Instruction:
    row = (
        conn.execute(
            sa.select(SI.c.version, SI.c.text, SI.c.created_by, SI.c.created_at).where(
                SI.c.tenant_id == tenant_id,
                SI.c.schedule_id == schedule_id,
                SI.c.version == version,
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound(f"no version {version} of schedule {schedule_id!r}")
    return Instruction(**row)


# --- firings ----------------------------------------------------------------------------

F = t.schedule_firings


def record_firing(
    conn: Connection, schedule: Schedule, due_at: datetime, webhook_id: str, now: datetime
) -> bool:
    """Record the occurrence ``due_at`` as being sent; False when it already was (the
    primary key is the occurrence: at most once, whoever sweeps)."""
    dialect = conn.dialect.name
    ins = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(F)
    row = conn.execute(
        ins.values(
            tenant_id=schedule.tenant_id,
            schedule_id=schedule.id,
            due_at=due_at,
            webhook_id=webhook_id,
            instruction_version=schedule.instruction_version,
            authority_version=schedule.authority_version,
            status="sending",
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["tenant_id", "schedule_id", "due_at"])
        .returning(F.c.webhook_id)
    ).first()
    return row is not None


def settle_firing(
    conn: Connection,
    tenant_id: str,
    schedule_id: str,
    due_at: datetime,
    *,
    status: str,
    status_code: int | None,
    error: str | None,
    now: datetime,
) -> None:
    conn.execute(
        sa.update(F)
        .where(F.c.tenant_id == tenant_id, F.c.schedule_id == schedule_id, F.c.due_at == due_at)
        .values(status=status, status_code=status_code, error=error, settled_at=now)
    )


def firings(conn: Connection, tenant_id: str, schedule_id: str, limit: int = 20) -> list[Firing]:
    """The latest fired occurrences, newest first."""
    rows = conn.execute(
        sa.select(
            F.c.schedule_id,
            F.c.due_at,
            F.c.webhook_id,
            F.c.instruction_version,
            F.c.authority_version,
            F.c.status,
            F.c.status_code,
            F.c.error,
            F.c.created_at,
            F.c.settled_at,
        )
        .where(F.c.tenant_id == tenant_id, F.c.schedule_id == schedule_id)
        .order_by(F.c.due_at.desc())
        .limit(limit)
    ).mappings()
    return [Firing(**r) for r in rows]
