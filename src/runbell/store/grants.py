"""Subject grants: an admin lets a member see (answer, amend) every run of a subject."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from runbell.store import tables as t

_G = t.subject_grants


@dataclass(frozen=True, slots=True)
class SubjectGrant:
    """One member's role on one subject (``subject_type`` and ``subject_id``, any
    version), granted by an admin (``created_by``; None: an admin API key)."""

    tenant_id: str
    id: str
    user_id: str
    subject_type: str
    subject_id: str
    role: str
    created_by: str | None
    created_at: datetime

    @classmethod
    def of(cls, row: RowMapping) -> SubjectGrant:
        return cls(**{f.name: row[f.name] for f in fields(cls)})


def insert(conn: Connection, grant: SubjectGrant) -> None:
    conn.execute(_G.insert().values(**asdict(grant)))


def find(
    conn: Connection, tenant_id: str, subject_type: str, subject_id: str, user_id: str, role: str
) -> SubjectGrant | None:
    """The grant of this role on this subject to this member, if there is one."""
    row = conn.execute(
        sa.select(_G).where(
            _G.c.tenant_id == tenant_id,
            _G.c.subject_type == subject_type,
            _G.c.subject_id == subject_id,
            _G.c.user_id == user_id,
            _G.c.role == role,
        )
    ).first()
    return None if row is None else SubjectGrant.of(row._mapping)


def get(conn: Connection, tenant_id: str, grant_id: str) -> SubjectGrant | None:
    row = conn.execute(
        sa.select(_G).where(_G.c.tenant_id == tenant_id, _G.c.id == grant_id)
    ).first()
    return None if row is None else SubjectGrant.of(row._mapping)


def for_subject(
    conn: Connection, tenant_id: str, subject_type: str, subject_id: str
) -> list[SubjectGrant]:
    """Every grant of the subject (the unique constraint's index), oldest first."""
    rows = conn.execute(
        sa.select(_G)
        .where(
            _G.c.tenant_id == tenant_id,
            _G.c.subject_type == subject_type,
            _G.c.subject_id == subject_id,
        )
        .order_by(_G.c.id)
    ).all()
    return [SubjectGrant.of(r._mapping) for r in rows]


def listed(
    conn: Connection, tenant_id: str, *, user_id: str | None = None, limit: int = 500
) -> list[SubjectGrant]:
    """The tenant's grants (or one member's), oldest first."""
    q = sa.select(_G).where(_G.c.tenant_id == tenant_id)
    if user_id is not None:
        q = q.where(_G.c.user_id == user_id)
    rows = conn.execute(q.order_by(_G.c.id).limit(limit)).all()
    return [SubjectGrant.of(r._mapping) for r in rows]


def delete(conn: Connection, tenant_id: str, grant_id: str) -> bool:
    res = conn.execute(sa.delete(_G).where(_G.c.tenant_id == tenant_id, _G.c.id == grant_id))
    return bool(res.rowcount)
