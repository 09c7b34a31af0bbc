"""Input requests, their one committed response, and receipts."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from runbell.domain.records import InputRequest, Receipt
from runbell.store import fast
from runbell.store import tables as t

ir = t.input_requests


_REQUEST = sa.select(ir).where(
    ir.c.tenant_id == sa.bindparam("tenant_id"), ir.c.id == sa.bindparam("request_id")
)
# Compiled once (store.fast): an answer reads its request three times, an open twice
# (issue 21, the mixed agent workload).
_GET = fast.Statement(lambda: _REQUEST)
_LOCK = fast.Statement(lambda: _REQUEST.with_for_update())
_ANSWER = fast.Statement(
    lambda: (
        sa.select(
            t.responses.c.user_id,
            t.responses.c.created_at,
            t.responses.c.decision,
            t.responses.c.value,
            t.responses.c.edited,
            t.responses.c.actor,
            t.users.c.email,
        )
        .outerjoin(t.users, t.users.c.id == t.responses.c.user_id)
        .where(
            t.responses.c.tenant_id == sa.bindparam("tenant_id"),
            t.responses.c.input_request_id == sa.bindparam("request_id"),
        )
    )
)


def get(
    conn: Connection, tenant_id: str, request_id: str, *, for_update: bool = False
) -> InputRequest | None:
    """The request with its answer (``answered_by_id``, ``answered_by_email``,
    ``answered_at``, ``decision``, ``value``; all None while unanswered)."""
    row = (_LOCK if for_update else _GET).first(conn, tenant_id=tenant_id, request_id=request_id)
    if row is None:
        return None
    return _with_answer(conn, row)


def _with_answer(conn: Connection, row: RowMapping | dict[str, Any]) -> InputRequest:
    answer = _ANSWER.first(conn, tenant_id=row["tenant_id"], request_id=row["id"])
    if answer is None:
        return InputRequest(**row)
    # A machine's answer (no person): the callback's or the key's id stands in.
    actor = answer["actor"] or {}
    machine = None if answer["user_id"] is not None else str(actor.get("kind") or "machine")
    return InputRequest(
        **row,
        answered_by_id=answer["user_id"] or actor.get("credential_id") or "machine",
        answered_by_email=answer["email"],
        answered_at=answer["created_at"],
        decision=answer["decision"],
        value=answer["value"],
        edited=bool(answer["edited"]),
        answered_by_machine=machine,
    )


def pending_for_run(
    conn: Connection,
    tenant_id: str,
    run_id: str,
    *,
    for_update: bool = False,
    purpose: str = "run",
) -> list[InputRequest]:
    """The run's pending requests of ``purpose``: ``run`` (the runtime's own questions,
    which block it) unless asked for ``amendment`` (proposals put to the owner)."""
    q = (
        sa.select(ir)
        .where(
            ir.c.tenant_id == tenant_id,
            ir.c.run_id == run_id,
            ir.c.state == "pending",
            ir.c.purpose == purpose,
        )
        .order_by(ir.c.created_at)
    )
    if for_update:
        q = q.with_for_update()
    return [_with_answer(conn, r._mapping) for r in conn.execute(q).all()]


def asked(conn: Connection, tenant_id: str, run_id: str) -> tuple[bool, bool]:
    """Whether the run has ever asked its own question (a request of purpose ``run``), and
    whether one is pending now."""
    pending = sa.func.coalesce(sa.func.sum(sa.case((ir.c.state == "pending", 1), else_=0)), 0)
    row = conn.execute(
        sa.select(sa.func.count(), pending).where(
            ir.c.tenant_id == tenant_id, ir.c.run_id == run_id, ir.c.purpose == "run"
        )
    ).one()
    return bool(row[0]), bool(row[1])


def last_answered(
    conn: Connection, tenant_id: str, run_id: str, purpose: str
) -> InputRequest | None:
    """The run's most recently answered request of ``purpose``, with its answer."""
    row = conn.execute(
        sa.select(ir)
        .where(
            ir.c.tenant_id == tenant_id,
            ir.c.run_id == run_id,
            ir.c.state == "answered",
            ir.c.purpose == purpose,
        )
        .order_by(ir.c.closed_at.desc())
        .limit(1)
    ).first()
    return None if row is None else _with_answer(conn, row._mapping)


def insert(conn: Connection, values: dict[str, Any]) -> None:
    conn.execute(ir.insert().values(**values))


def close(
    conn: Connection,
    tenant_id: str,
    request_id: str,
    state: str,
    now: datetime,
    *,
    superseded_by: str | None = None,
) -> bool:
    """Move a pending request to ``state``; False if it was no longer pending."""
    res = conn.execute(
        sa.update(ir)
        .where(ir.c.tenant_id == tenant_id, ir.c.id == request_id, ir.c.state == "pending")
        .values(state=state, closed_at=now, superseded_by=superseded_by)
    )
    return bool(res.rowcount)


def due_for_expiry(conn: Connection, now: datetime, limit: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        sa.select(ir.c.tenant_id, ir.c.id, ir.c.run_id)
        .where(ir.c.state == "pending", ir.c.expires_at <= now)
        .order_by(ir.c.expires_at)
        .limit(limit)
    ).all()
    return [dict(r._mapping) for r in rows]


def insert_response(conn: Connection, values: dict[str, Any]) -> None:
    """The one answer: the primary key is the request, so a second insert fails."""
    conn.execute(t.responses.insert().values(**values))


# --- receipts (channel telemetry, never a decision) ----------------------------------


def add_receipt(conn: Connection, values: Receipt) -> None:
    conn.execute(t.receipts.insert().values(**values))


def receipts_for(conn: Connection, tenant_id: str, notification_id: str) -> list[Receipt]:
    rc = t.receipts
    rows = conn.execute(
        sa.select(rc)
        .where(rc.c.tenant_id == tenant_id, rc.c.notification_id == notification_id)
        .order_by(rc.c.at, rc.c.id)
    ).all()
    return [cast(Receipt, dict(r._mapping)) for r in rows]
