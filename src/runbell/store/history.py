"""Reading history: the transitions in bounded batches (the policy dry-run) and the
answers to a run's requests (its trace, `flows.run_history`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.store import tables as t

_T = t.transitions


def transitions_between(
    conn: Connection,
    tenant_id: str,
    since: datetime,
    until: datetime,
    *,
    after: tuple[datetime, str, int] | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` transitions with ``since <= at < until``, oldest first, after the
    keyset ``after`` (at, run id, version). Walks ``ix_transitions_tenant_at``."""
    stmt = sa.select(_T.c.run_id, _T.c.version, _T.c.at, _T.c.decision).where(
        _T.c.tenant_id == tenant_id, _T.c.at >= since, _T.c.at < until
    )
    if after is not None:
        at, run_id, version = after
        stmt = stmt.where(
            sa.or_(
                _T.c.at > at,
                sa.and_(_T.c.at == at, _T.c.run_id > run_id),
                sa.and_(_T.c.at == at, _T.c.run_id == run_id, _T.c.version > version),
            )
        )
    rows = conn.execute(stmt.order_by(_T.c.at, _T.c.run_id, _T.c.version).limit(limit))
    return [dict(r._mapping) for r in rows]


def answers_for_run(conn: Connection, tenant_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every answer to the run's input requests (questions and amendment proposals),
    oldest first: ``{input_request_id, purpose, user_id, decision, actor, created_at}``."""
    r, q = t.responses, t.input_requests
    rows = conn.execute(
        sa.select(
            r.c.input_request_id,
            q.c.purpose,
            r.c.user_id,
            r.c.decision,
            r.c.actor,
            r.c.created_at,
            r.c.edited,
        )
        .join(q, sa.and_(q.c.tenant_id == r.c.tenant_id, q.c.id == r.c.input_request_id))
        .where(r.c.tenant_id == tenant_id, q.c.run_id == run_id)
        .order_by(r.c.created_at, r.c.input_request_id)
    )
    return [dict(row._mapping) for row in rows]
