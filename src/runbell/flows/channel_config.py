"""What the channels are configured with: the server's VAPID key pair (made once, the
private half sealed) and the SMTP relay from settings (``channels.email.smtp_config``).

Kept here rather than in the worker's wiring because the faces need them too: browsers
subscribe with the VAPID public key, and the sign-in page offers email only with an SMTP
relay set. The wiring hands the key pair to the channels it builds
(``dispatch.wiring.setup_of``).

Invariants kept here (DESIGN §2): secrets sealed at rest — the VAPID private key is
stored only through the secret box, and a second process that races the first start uses
the first key (browsers bind subscriptions to it, so it never changes silently).
"""

from __future__ import annotations

import contextlib

import sqlalchemy as sa

from runbell.channels.email import SmtpConfig
from runbell.channels.email import smtp_config as config_from_settings
from runbell.channels.vapid import VapidKeys  # not .webpush: pywebpush pulls in aiohttp
from runbell.flows.context import Core
from runbell.store import kv

VAPID_KV = "vapid"


def vapid_keys(core: Core) -> VapidKeys:
    """The server's VAPID key pair: generated on first use, kept (private key sealed).

    Browsers bind a subscription to this public key, so it must never change silently.
    """
    with core.db.read() as conn:
        stored = kv.get(conn, VAPID_KV)
    if stored is None:
        keys = VapidKeys.generate()
        # Another process may have been first: the insert fails, and we use theirs.
        with contextlib.suppress(sa.exc.IntegrityError), core.db.transaction() as tx:
            kv.insert(
                tx.conn,
                VAPID_KV,
                {"private_pem": core.box.seal(keys.private_pem), "public_key": keys.public_key},
            )
        with core.db.read() as conn:
            stored = kv.get(conn, VAPID_KV)
        assert stored is not None
    return VapidKeys.from_pem(core.box.open(stored["private_pem"]))


def smtp_config(core: Core) -> SmtpConfig | None:
    """The SMTP relay email goes through, or None when none is set (email is then off)."""
    return config_from_settings(core.settings, core.public_url)
