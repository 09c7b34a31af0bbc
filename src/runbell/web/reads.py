"""Read models for the web pages: the few queries pages need that the API does not.

Read-only, on the caller's connection. Access decisions stay where they are
(``runbell.store.runs.can_see_run``, the recipient check in ``runbell.core``); these
functions only fetch what a page then filters.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.principal import Principal
from runbell.store import notifications as notes
from runbell.store import tables as t

CLOSED_STATES = ("acknowledged", "resolved", "expired", "superseded", "revoked")


def timezone_of(conn: Connection, tenant_id: str, user_id: str) -> str:
    tz = conn.execute(
        sa.select(t.preferences.c.timezone).where(
            t.preferences.c.tenant_id == tenant_id, t.preferences.c.user_id == user_id
        )
    ).scalar()
    return str(tz or "UTC")


def email_of(conn: Connection, user_id: str) -> str:
    return str(conn.execute(sa.select(t.users.c.email).where(t.users.c.id == user_id)).scalar())


def runs_by_id(conn: Connection, tenant_id: str, run_ids: set[str]) -> dict[str, dict[str, Any]]:
    if not run_ids:
        return {}
    rows = conn.execute(
        sa.select(t.runs).where(t.runs.c.tenant_id == tenant_id, t.runs.c.run_id.in_(run_ids))
    ).all()
    return {r.run_id: dict(r._mapping) for r in rows}


def visible_runs(conn: Connection, who: Principal, run_ids: set[str]) -> set[str]:
    """The subset of ``run_ids`` this person may see right now."""
    if who.sees_all_runs:
        return set(run_ids)
    if not run_ids:
        return set()
    rows = conn.execute(
        sa.select(t.run_access.c.run_id).where(
            t.run_access.c.tenant_id == who.tenant_id,
            t.run_access.c.user_id == who.user_id,
            t.run_access.c.run_id.in_(run_ids),
        )
    )
    return {r[0] for r in rows}


def inbox(
    conn: Connection, who: Principal, *, open_limit: int = 200, closed_limit: int = 20
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(open notifications, recently closed ones), newest first."""
    assert who.user_id is not None
    opened = notes.list_for_recipient(
        conn, who.tenant_id, who.user_id, states=["open"], before=None, limit=open_limit
    )
    closed = notes.list_for_recipient(
        conn,
        who.tenant_id,
        who.user_id,
        states=list(CLOSED_STATES),
        before=None,
        limit=closed_limit,
    )
    return opened, closed


def notes_for_run(conn: Connection, who: Principal, run_id: str) -> list[dict[str, Any]]:
    """This person's notifications about one run, newest first, each with its deliveries."""
    n = t.notifications
    rows = conn.execute(
        sa.select(n)
        .where(
            n.c.tenant_id == who.tenant_id,
            n.c.run_id == run_id,
            n.c.recipient_user_id == who.user_id,
        )
        .order_by(n.c.id.desc())
        .limit(50)
    ).all()
    out = []
    for r in rows:
        note = dict(r._mapping)
        note["deliveries"] = notes.deliveries_for(conn, who.tenant_id, note["id"])
        out.append(note)
    return out
