"""Build the channels a worker sends through, from settings. Keys are made once and kept."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import sqlalchemy as sa

from runbell.channels.base import (
    Channel,
    Outbound,
    PermanentDeliveryError,
    Sent,
    TransientDeliveryError,
)
from runbell.channels.chat import ChatChannel
from runbell.channels.email import EmailChannel, SmtpConfig
from runbell.channels.webhook import WebhookChannel
from runbell.channels.webpush import VapidKeys, WebPushChannel
from runbell.domain.errors import UnsafeDestination
from runbell.domain.ssrf import check_url
from runbell.flows.context import Runbell
from runbell.outbound import make_resolver, safe_async_client
from runbell.store import tables as t

VAPID_KV = "vapid"


def vapid_keys(core: Runbell) -> VapidKeys:
    """The server's VAPID key pair: generated on first use, kept (private key sealed).

    Browsers bind a subscription to this public key, so it must never change silently.
    """
    stored = _stored_vapid(core)
    if stored is None:
        keys = VapidKeys.generate()
        # Another process may have been first: the insert fails, and we use theirs.
        with contextlib.suppress(sa.exc.IntegrityError), core.db.transaction() as tx:
            tx.conn.execute(
                t.kv.insert().values(
                    key=VAPID_KV,
                    value={
                        "private_pem": core.box.seal(keys.private_pem),
                        "public_key": keys.public_key,
                    },
                )
            )
        stored = _stored_vapid(core)
        assert stored is not None
    return VapidKeys.from_pem(core.box.open(stored["private_pem"]))


def _stored_vapid(core: Runbell) -> dict[str, Any] | None:
    with core.db.read() as conn:
        value = conn.execute(sa.select(t.kv.c.value).where(t.kv.c.key == VAPID_KV)).scalar()
    return None if value is None else dict(value)


def smtp_config(core: Runbell) -> SmtpConfig | None:
    s = core.settings
    if not s.smtp_host:
        return None
    return SmtpConfig(
        host=s.smtp_host,
        port=s.smtp_port,
        starttls=s.smtp_starttls,
        use_tls=s.smtp_tls,
        username=s.smtp_username,
        password=s.smtp_password,
        from_address=s.smtp_from,
        unsubscribe_url=f"{s.public_url.rstrip('/')}/settings#email",
        validate_certs=s.smtp_validate_certs,
        timeout=s.outbound_timeout_s,
    )


class GuardedWebPush:
    """Web push with the SSRF guard in front: a subscription endpoint comes from a
    browser, so it is checked before every send like any user-supplied URL, and the push
    dials the checked address (no second lookup for DNS rebinding to answer)."""

    name = "webpush"

    def __init__(self, inner: WebPushChannel, allow_hosts: frozenset[str]) -> None:
        self.inner = inner
        self.allow_hosts = allow_hosts
        self.resolve = make_resolver()

    async def send(self, msg: Outbound) -> Sent:
        try:
            checked = await asyncio.to_thread(
                check_url,
                msg.target["endpoint"],
                allow_hosts=self.allow_hosts,
                resolve=self.resolve,
            )
        except UnsafeDestination as exc:
            raise PermanentDeliveryError(exc.detail, operator_alert=True) from None
        except OSError as exc:
            raise TransientDeliveryError(
                f"push service name did not resolve: {type(exc).__name__}"
            ) from None
        return await self.inner.send(msg, dial=checked)


def build_channels(core: Runbell, **overrides: Any) -> dict[str, Channel]:
    """Every configured channel. Email only when SMTP is set (its rows are skipped with a
    clear reason otherwise); ``overrides`` replace a channel (tests, embedders)."""
    s = core.settings
    channels: dict[str, Channel] = {
        "webhook": WebhookChannel(
            safe_async_client(allow_hosts=s.outbound_allow_hosts, timeout=s.outbound_timeout_s)
        ),
        "webpush": GuardedWebPush(
            WebPushChannel(vapid_keys(core), s.vapid_subject, timeout=s.outbound_timeout_s),
            s.outbound_allow_hosts,
        ),
        "chat": ChatChannel(allow_hosts=s.outbound_allow_hosts, timeout=s.outbound_timeout_s),
    }
    smtp = smtp_config(core)
    if smtp is not None:
        channels["email"] = EmailChannel(smtp)
    channels.update(overrides)
    return channels
