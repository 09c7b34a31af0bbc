"""Where a person can be reached: preferences (consent, quiet hours, timezone), email,
web push subscriptions and chat destinations (their own and the tenant's shared rooms).

A person channel's facts (``runbell.domain.channels``) say which kind of destination it
sends to; :func:`destination_ids`, :func:`find`, :func:`mark_reached` and :func:`forget`
read by that kind, so no caller names a channel to find where a person is.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.channels import DestinationKind, facts_of
from runbell.domain.records import (
    Address,
    ChatDestination,
    Destination,
    Preferences,
    PushSubscription,
)
from runbell.store import tables as t


def destination_ids(conn: Connection, channel: str, tenant_id: str, user_id: str) -> list[str]:
    """Every destination a person channel reaches this person at, now (the outbox rows'
    ``destination``): their address, their browsers, their and their tenant's chat
    destinations."""
    return _IDS[facts_of(channel).destination](conn, tenant_id, user_id)


def find(
    conn: Connection, channel: str, tenant_id: str, user_id: str | None, destination: str
) -> Destination | None:
    """One destination of a person channel as stored now (None: it is gone). An address
    is the person's address as it is now (``user_id``'s), whatever the row was queued
    with; the other kinds are found by ``destination`` alone."""
    return _FIND[facts_of(channel).destination](conn, tenant_id, user_id, destination)


def mark_reached(conn: Connection, channel: str, destination: str, now: datetime) -> None:
    """Remember that a send to ``destination`` was accepted, where its kind keeps that
    (a browser's last success, shown on the settings page)."""
    if facts_of(channel).destination == "push_subscription":
        update_push_subscription(conn, destination, last_success_at=now)


def forget(conn: Connection, channel: str, destination: str) -> None:
    """Drop a destination whose service said it is gone for good (a browser that
    unsubscribed); kinds a person manages themselves are kept."""
    if facts_of(channel).destination == "push_subscription":
        forget_push_subscription(conn, destination)


def _address_ids(conn: Connection, _tenant_id: str, user_id: str) -> list[str]:
    address = email_of(conn, user_id)
    return [] if address is None else [address]


def _address(
    conn: Connection, _tenant_id: str, user_id: str | None, _destination: str
) -> Address | None:
    address = None if user_id is None else email_of(conn, user_id)
    return None if address is None else {"address": address}


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


def timezone_of(conn: Connection, tenant_id: str, user_id: str) -> str:
    """The person's IANA timezone name as stored, ``UTC`` when they never set one."""
    found = conn.execute(
        sa.select(t.preferences.c.timezone).where(
            t.preferences.c.tenant_id == tenant_id, t.preferences.c.user_id == user_id
        )
    ).scalar()
    return str(found or "UTC")


def timezone_and_locale(conn: Connection, tenant_id: str, user_id: str) -> tuple[str, str]:
    """The person's IANA timezone name and locale as stored (``UTC`` and ``en`` when they
    never set them): what every page they look at is worded and timed in."""
    p = t.preferences
    row = conn.execute(
        sa.select(p.c.timezone, p.c.locale).where(
            p.c.tenant_id == tenant_id, p.c.user_id == user_id
        )
    ).first()
    if row is None:
        return "UTC", "en"
    return str(row[0] or "UTC"), str(row[1] or "en")


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


# --- preferences ---------------------------------------------------------------------


def preferences(conn: Connection, tenant_id: str, user_id: str) -> Preferences | None:
    row = conn.execute(
        sa.select(t.preferences).where(
            t.preferences.c.tenant_id == tenant_id, t.preferences.c.user_id == user_id
        )
    ).first()
    return None if row is None else cast(Preferences, dict(row._mapping))


def save_preferences(
    conn: Connection, tenant_id: str, user_id: str, values: dict[str, Any]
) -> None:
    """Update the person's preferences row, creating it on their first change."""
    p = t.preferences
    done = conn.execute(
        sa.update(p).where(p.c.tenant_id == tenant_id, p.c.user_id == user_id).values(**values)
    ).rowcount
    if not done:
        conn.execute(
            p.insert().values(tenant_id=tenant_id, user_id=user_id, **{"consent": {}, **values})
        )


# --- web push subscriptions ----------------------------------------------------------


def push_subscription(conn: Connection, tenant_id: str, sub_id: str) -> PushSubscription | None:
    p = t.push_subscriptions
    row = conn.execute(sa.select(p).where(p.c.tenant_id == tenant_id, p.c.id == sub_id)).first()
    return None if row is None else cast(PushSubscription, dict(row._mapping))


def push_subscription_by_endpoint(
    conn: Connection, tenant_id: str, endpoint: str
) -> PushSubscription | None:
    p = t.push_subscriptions
    row = conn.execute(
        sa.select(p).where(p.c.tenant_id == tenant_id, p.c.endpoint == endpoint)
    ).first()
    return None if row is None else cast(PushSubscription, dict(row._mapping))


def push_subscriptions_of(conn: Connection, tenant_id: str, user_id: str) -> list[PushSubscription]:
    p = t.push_subscriptions
    rows = conn.execute(
        sa.select(p).where(p.c.tenant_id == tenant_id, p.c.user_id == user_id).order_by(p.c.id)
    ).all()
    return [cast(PushSubscription, dict(r._mapping)) for r in rows]


def insert_push_subscription(conn: Connection, values: PushSubscription) -> None:
    conn.execute(t.push_subscriptions.insert().values(**values))


def update_push_subscription(conn: Connection, sub_id: str, **values: Any) -> None:
    p = t.push_subscriptions
    conn.execute(sa.update(p).where(p.c.id == sub_id).values(**values))


def delete_push_subscription(conn: Connection, tenant_id: str, user_id: str, sub_id: str) -> bool:
    p = t.push_subscriptions
    gone = conn.execute(
        sa.delete(p).where(p.c.tenant_id == tenant_id, p.c.user_id == user_id, p.c.id == sub_id)
    ).rowcount
    return bool(gone)


def forget_push_subscription(conn: Connection, sub_id: str) -> None:
    """The browser unsubscribed (its push service answered 404/410): drop the row."""
    p = t.push_subscriptions
    conn.execute(sa.delete(p).where(p.c.id == sub_id))


# --- chat destinations ---------------------------------------------------------------


def chat_destination(conn: Connection, tenant_id: str, dest_id: str) -> ChatDestination | None:
    c = t.chat_destinations
    row = conn.execute(sa.select(c).where(c.c.tenant_id == tenant_id, c.c.id == dest_id)).first()
    return None if row is None else cast(ChatDestination, dict(row._mapping))


def chat_destinations_of(conn: Connection, tenant_id: str, user_id: str) -> list[ChatDestination]:
    """The person's own chat destinations and the tenant's shared rooms."""
    c = t.chat_destinations
    rows = conn.execute(
        sa.select(c)
        .where(c.c.tenant_id == tenant_id, sa.or_(c.c.user_id == user_id, c.c.user_id.is_(None)))
        .order_by(c.c.id)
    ).all()
    return [cast(ChatDestination, dict(r._mapping)) for r in rows]


def insert_chat_destination(conn: Connection, values: ChatDestination) -> None:
    conn.execute(t.chat_destinations.insert().values(**values))


def delete_chat_destination(
    conn: Connection, tenant_id: str, dest_id: str, *, owner: str | None
) -> bool:
    """Delete one; ``owner`` set: only if it is that person's own (not a shared room)."""
    c = t.chat_destinations
    cond = [c.c.tenant_id == tenant_id, c.c.id == dest_id]
    if owner is not None:
        cond.append(c.c.user_id == owner)
    return bool(conn.execute(sa.delete(c).where(*cond)).rowcount)


_IDS: dict[DestinationKind, Callable[[Connection, str, str], list[str]]] = {
    "address": _address_ids,
    "push_subscription": push_subscription_ids,
    "chat_destination": chat_destination_ids,
}
_FIND: dict[DestinationKind, Callable[[Connection, str, str | None, str], Destination | None]] = {
    "address": _address,
    "push_subscription": lambda conn, tenant_id, _user, dest: push_subscription(
        conn, tenant_id, dest
    ),
    "chat_destination": lambda conn, tenant_id, _user, dest: chat_destination(
        conn, tenant_id, dest
    ),
}
