"""Browser sign-in: one-time sign-in links, the sessions they open, and signing out.

A sign-in link is a 256-bit secret stored only as its hash, valid for :data:`LINK_TTL`
and usable once; using it opens a session (another secret, with its own CSRF token) valid
for :data:`SESSION_TTL`.

The links a person asks for by email go out like every other email: an outbox delivery
(event type :data:`~runbell.domain.channels.SIGN_IN`) written in the same transaction as
the links, its links sealed at rest, rendered by the email channel and sent by a worker
(``runbell.flows.delivery_prepare`` opens them for the send and cancels the mail once
they have expired).

Invariants kept here (DESIGN §2): 8 — every session lookup joins the membership, so a
revoked member's session stops on their very next request, and a link made before the
revocation opens nothing; sign-in links by email are rate-limited per person and the
answer never says whether an address belongs to anyone; 12 — the links and the email
that carries them commit together.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

from runbell import i18n
from runbell.domain.channels import SIGN_IN
from runbell.domain.principal import LinkRefused, WebSession
from runbell.domain.records import Delivery
from runbell.flows.context import Core
from runbell.store import destinations, outbox
from runbell.store import sessions as store

LINK_TTL = store.LINK_TTL
SESSION_TTL = store.SESSION_TTL
#: The one channel sign-in links are sent on.
SIGN_IN_CHANNEL = "email"

__all__ = [
    "LINK_TTL",
    "SESSION_TTL",
    "SIGN_IN_CHANNEL",
    "LinkRefused",
    "SignedIn",
    "WebSession",
    "lookup",
    "open_links",
    "request_sign_in",
    "sign_in",
    "sign_in_url",
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


def sign_in_url(core: Core, token: str, next_path: str = "/") -> str:
    """The absolute link that uses ``token``, then goes to ``next_path``."""
    url = f"{core.public_url}/auth/{token}"
    return url if next_path == "/" else f"{url}?next={quote(next_path, safe='/')}"


def request_sign_in(core: Core, address: str, next_path: str = "/") -> str | None:
    """Queue the sign-in email for ``address``: a new one-time link for every active
    membership, all in one email (sealed at rest), in one transaction with the links.
    Returns the delivery's id; None for an address that belongs to nobody, or a person
    already sent :data:`store.LINKS_PER_WINDOW` links within :data:`LINK_TTL` (the
    earlier ones still work, and the sign-in form cannot flood a mailbox)."""
    with core.db.transaction() as tx:
        links: list[tuple[str, str]] = []
        tenant_id = destination = None
        for member_of, tenant_name, user_id in store.memberships_for_email(tx.conn, address):
            if store.recent_links(tx.conn, user_id, tx.now) >= store.LINKS_PER_WINDOW:
                continue
            token = store.create_login_link(tx.conn, member_of, user_id, tx.now)
            links.append((tenant_name, sign_in_url(core, token, next_path)))
            # The delivery is listed with the first workspace; the others' names are in
            # the sealed links only.
            tenant_id = tenant_id or member_of
            destination = destination or destinations.email_of(tx.conn, user_id)
        if not links or tenant_id is None or destination is None:
            return None
        row = outbox.delivery_row(tenant_id, None, SIGN_IN_CHANNEL, destination, "queued", tx.now)
        row.update(
            {
                "event_type": SIGN_IN,
                "urgency": "normal",
                "payload": {
                    "sealed": core.box.seal(json.dumps({"links": links})),
                    # The language of the page that asked (runbell.i18n: Accept-Language
                    # there): the email is worded in it.
                    "locale": i18n.current(),
                },
            }
        )
        outbox.add_deliveries(tx.conn, [row])
        tx.wake_outbox = True
    delivery_id: str = row["id"]
    return delivery_id


def open_links(core: Core, row: Delivery) -> list[list[str]]:
    """A sign-in delivery's links, unsealed for its send: ``[[workspace, url], ...]``."""
    sealed = (row["payload"] or {}).get("sealed")
    if not isinstance(sealed, str):
        return []
    links: list[list[str]] = json.loads(core.box.open(sealed))["links"]
    return links
