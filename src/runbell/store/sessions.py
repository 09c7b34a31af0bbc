"""Browser sign-in: one-time sign-in links and the sessions they open.

A sign-in link (``/auth/{token}``) is a 256-bit secret, stored only as its hash, valid
for :data:`LINK_TTL` and usable once. Consuming it opens a web session: another 256-bit
secret kept in the browser's session cookie (HttpOnly, SameSite=Lax), valid for
:data:`SESSION_TTL`, with its own CSRF token. Every lookup joins the membership, so a
revoked member's session stops working on the very next request (invariant 8).

Repositories: they take a connection and never commit; the caller owns the transaction.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.errors import ValidationFailed
from runbell.domain.principal import LinkRefused, WebSession
from runbell.ids import new_id, new_token, token_hash
from runbell.store import tables as t
from runbell.store.accounts import normalize_email

LINK_TTL = timedelta(minutes=15)
SESSION_TTL = timedelta(hours=12)
# Sign-in links a person can be sent per LINK_TTL; more requests send nothing new (the
# earlier links still work), so the form cannot be used to flood a mailbox.
LINKS_PER_WINDOW = 5


def memberships_for_email(conn: Connection, email: str) -> list[tuple[str, str, str]]:
    """(tenant id, tenant name, user id) of every active membership of ``email``."""
    try:
        email = normalize_email(email)
    except ValidationFailed:  # not an address at all: nobody to sign in
        return []
    rows = conn.execute(
        sa.select(t.memberships.c.tenant_id, t.tenants.c.name, t.users.c.id)
        .join(t.users, t.users.c.id == t.memberships.c.user_id)
        .join(t.tenants, t.tenants.c.id == t.memberships.c.tenant_id)
        .where(t.users.c.email == email, t.memberships.c.revoked_at.is_(None))
        .order_by(t.tenants.c.name)
    ).all()
    return [(r[0], r[1], r[2]) for r in rows]


def create_login_link(conn: Connection, tenant_id: str, user_id: str, now: datetime) -> str:
    """A one-time sign-in token for a member; returns the secret (shown or sent once)."""
    token = new_token("rbl")
    conn.execute(
        t.login_links.insert().values(
            id=new_id("lnk"),
            tenant_id=tenant_id,
            user_id=user_id,
            token_hash=token_hash(token),
            created_at=now,
            expires_at=now + LINK_TTL,
        )
    )
    return token


def recent_links(conn: Connection, user_id: str, now: datetime) -> int:
    """How many sign-in links ``user_id`` was given within the last :data:`LINK_TTL`."""
    ll = t.login_links
    return int(
        conn.execute(
            sa.select(sa.func.count())
            .select_from(ll)
            .where(ll.c.user_id == user_id, ll.c.created_at > now - LINK_TTL)
        ).scalar_one()
    )


def consume_login_link(
    conn: Connection, token: str, now: datetime
) -> tuple[str, str] | LinkRefused:
    """Use a sign-in link: (tenant id, user id), or why not.

    The conditional UPDATE is the one-use guarantee: of two concurrent uses exactly one
    changes the row, on both databases.
    """
    ll = t.login_links
    digest = token_hash(token)
    row = conn.execute(
        sa.select(ll.c.id, ll.c.tenant_id, ll.c.user_id, ll.c.expires_at, ll.c.used_at).where(
            ll.c.token_hash == digest
        )
    ).first()
    if row is None:
        return LinkRefused("unknown")
    if row.used_at is not None:
        return LinkRefused("used")
    if row.expires_at <= now:
        return LinkRefused("expired")
    won = conn.execute(
        sa.update(ll).where(ll.c.id == row.id, ll.c.used_at.is_(None)).values(used_at=now)
    ).rowcount
    if not won:
        return LinkRefused("used")
    active = conn.execute(
        sa.select(t.memberships.c.role).where(
            t.memberships.c.tenant_id == row.tenant_id,
            t.memberships.c.user_id == row.user_id,
            t.memberships.c.revoked_at.is_(None),
        )
    ).first()
    if active is None:
        return LinkRefused("no_access")
    return row.tenant_id, row.user_id


def create_session(conn: Connection, tenant_id: str, user_id: str, now: datetime) -> str:
    """Open a session; returns the cookie value (the only copy of the secret)."""
    token = new_token("rbs")
    conn.execute(
        t.web_sessions.insert().values(
            id=new_id("wss"),
            tenant_id=tenant_id,
            user_id=user_id,
            token_hash=token_hash(token),
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + SESSION_TTL,
        )
    )
    return token


def lookup_session(conn: Connection, token: str, now: datetime) -> WebSession | None:
    """The live session for a cookie value, or None (unknown, expired, signed out, or the
    membership was revoked). One indexed lookup joined with the membership."""
    if not token.startswith("rbs_") or len(token) > 100:
        return None
    ws = t.web_sessions
    row = conn.execute(
        sa.select(
            ws.c.id,
            ws.c.tenant_id,
            ws.c.user_id,
            ws.c.csrf_token,
            ws.c.expires_at,
            t.memberships.c.role,
        )
        .join(
            t.memberships,
            sa.and_(
                t.memberships.c.tenant_id == ws.c.tenant_id,
                t.memberships.c.user_id == ws.c.user_id,
            ),
        )
        .where(
            ws.c.token_hash == token_hash(token),
            ws.c.revoked_at.is_(None),
            t.memberships.c.revoked_at.is_(None),
        )
    ).first()
    if row is None or row.expires_at <= now:
        return None
    return WebSession(
        id=row.id,
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        role=row.role,
        csrf_token=row.csrf_token,
        expires_at=row.expires_at,
    )


def revoke_session(conn: Connection, session_id: str, now: datetime) -> None:
    """Sign out: the cookie stops working at once, wherever it was copied to."""
    conn.execute(
        sa.update(t.web_sessions)
        .where(t.web_sessions.c.id == session_id, t.web_sessions.c.revoked_at.is_(None))
        .values(revoked_at=now)
    )


def end_for_member(conn: Connection, tenant_id: str, user_id: str, now: datetime) -> None:
    """End a removed member's browser sessions and unused sign-in links: re-adding the
    member later must not revive an old (possibly copied) session cookie."""
    conn.execute(
        sa.update(t.web_sessions)
        .where(
            t.web_sessions.c.tenant_id == tenant_id,
            t.web_sessions.c.user_id == user_id,
            t.web_sessions.c.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )
    conn.execute(
        sa.update(t.login_links)
        .where(
            t.login_links.c.tenant_id == tenant_id,
            t.login_links.c.user_id == user_id,
            t.login_links.c.used_at.is_(None),
        )
        .values(used_at=now)
    )
