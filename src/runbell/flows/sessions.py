"""Browser sign-in: one-time sign-in links, the sessions they open, and signing out.

A sign-in link is a 256-bit secret stored only as its hash, valid for :data:`LINK_TTL`
and usable once; using it opens a session (another secret, with its own CSRF token) valid
for :data:`SESSION_TTL`.

Invariants kept here (DESIGN §2): 8 — every session lookup joins the membership, so a
revoked member's session stops on their very next request, and a link made before the
revocation opens nothing; sign-in links by email are rate-limited per person and the
answer never says whether an address belongs to anyone.
"""

from __future__ import annotations

from dataclasses import dataclass

from runbell.domain.principal import LinkRefused, WebSession
from runbell.flows.context import Core
from runbell.store import sessions as store
from runbell.store.db import Database

LINK_TTL = store.LINK_TTL
SESSION_TTL = store.SESSION_TTL

__all__ = [
    "LINK_TTL",
    "SESSION_TTL",
    "LinkRefused",
    "SignedIn",
    "WebSession",
    "links_for_email",
    "lookup",
    "sign_in",
    "sign_out",
]


@dataclass(frozen=True)
class SignedIn:
    """A session opened by a sign-in link: the cookie value (the secret's only copy)."""

    tenant_id: str
    user_id: str
    cookie: str


def lookup(core: Core, token: str) -> WebSession | None:
    """The live session for a cookie value, or None (unknown, expired, signed out, or
    the membership was revoked)."""
    with core.db.read() as conn:
        return store.lookup_session(conn, token, core.db.clock())


def sign_in(core: Core, token: str) -> SignedIn | LinkRefused:
    """Use a one-time sign-in link: a new session, or why the link opens nothing."""
    with core.db.transaction() as tx:
        outcome = store.consume_login_link(tx.conn, token[:200], tx.now)
        if isinstance(outcome, LinkRefused):
            return outcome
        tenant_id, user_id = outcome
        cookie = store.create_session(tx.conn, tenant_id, user_id, tx.now)
    return SignedIn(tenant_id, user_id, cookie)


def sign_out(core: Core, session_id: str) -> None:
    """End a session: its cookie stops working at once, wherever it was copied to."""
    with core.db.transaction() as tx:
        store.revoke_session(tx.conn, session_id, tx.now)


def links_for_email(db: Database, address: str) -> list[tuple[str, str]]:
    """New one-time sign-in tokens for every active membership of ``address``:
    ``[(tenant name, token)]``. A person already sent :data:`store.LINKS_PER_WINDOW` links
    within :data:`LINK_TTL` gets none (the earlier ones still work), so the sign-in form
    cannot flood a mailbox. Empty for an address that belongs to nobody."""
    tokens: list[tuple[str, str]] = []
    with db.transaction() as tx:
        for tenant_id, tenant_name, user_id in store.memberships_for_email(tx.conn, address):
            if store.recent_links(tx.conn, user_id, tx.now) >= store.LINKS_PER_WINDOW:
                continue
            tokens.append(
                (tenant_name, store.create_login_link(tx.conn, tenant_id, user_id, tx.now))
            )
    return tokens
