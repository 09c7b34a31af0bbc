"""Where a person can be reached: preferences (consent, quiet hours, timezone), email,
web push subscriptions and chat destinations (their own and the tenant's shared rooms)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.store import tables as t


def consent_of(conn: Connection, tenant_id: str, user_id: str) -> dict[str, Any]:
    """The person's consent record per channel ({} when they never set one)."""
    found = conn.execute(
        sa.select(t.preferences.c.consent).where(
            t.preferences.c.tenant_id == tenant_id, t.preferences.c.user_id == user_id
        )
    ).scalar()
    return dict(found or {})


def email_of(conn: Connection, user_id: str) -> str | None:
    found = conn.execute(sa.select(t.users.c.email).where(t.users.c.id == user_id)).scalar()
    return None if found is None else str(found)


def push_subscription_ids(conn: Connection, tenant_id: str, user_id: str) -> list[str]:
    p = t.push_subscriptions
    return [
        str(i)
        for i in conn.execute(
            sa.select(p.c.id).where(p.c.tenant_id == tenant_id, p.c.user_id == user_id)
        ).scalars()
    ]


def chat_destination_ids(conn: Connection, tenant_id: str, user_id: str) -> list[str]:
    """The person's own chat destinations and the tenant's shared ones (a team room)."""
    c = t.chat_destinations
    return [
        str(i)
        for i in conn.execute(
            sa.select(c.c.id).where(
                c.c.tenant_id == tenant_id,
                sa.or_(c.c.user_id == user_id, c.c.user_id.is_(None)),
            )
        ).scalars()
    ]
