"""Build the channels a worker sends through, from settings (VAPID keys and the SMTP relay
come from ``runbell.flows.channel_config``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from runbell.channels.base import (
    Channel,
    Outbound,
    PermanentDeliveryError,
    Sent,
    TransientDeliveryError,
)
from runbell.channels.chat import ChatChannel
from runbell.channels.email import EmailChannel
from runbell.channels.webhook import ClientLanes, WebhookChannel
from runbell.channels.webpush import WebPushChannel
from runbell.domain.errors import UnsafeDestination
from runbell.domain.ssrf import check_url
from runbell.flows.channel_config import smtp_config, vapid_keys
from runbell.flows.context import Core
from runbell.outbound import make_resolver, safe_async_client

_ONE_CONNECTION = httpx.Limits(max_connections=1, max_keepalive_connections=1)


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


def build_channels(core: Core, **overrides: Any) -> dict[str, Channel]:
    """Every configured channel. Email only when SMTP is set (its rows are skipped with a
    clear reason otherwise); ``overrides`` replace a channel (tests, embedders)."""
    s = core.settings
    channels: dict[str, Channel] = {
        # One single-connection keep-alive client per concurrent send (ClientLanes).
        "webhook": WebhookChannel(
            ClientLanes(
                [
                    safe_async_client(
                        allow_hosts=s.outbound_allow_hosts,
                        timeout=s.outbound_timeout_s,
                        limits=_ONE_CONNECTION,
                    )
                    for _ in range(s.worker_concurrency)
                ]
            )
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
