"""Tenant webhooks: one signed POST of the thin event payload to the tenant's endpoint.

The contract is DESIGN §6 "Outbound webhooks" and invariant 14: every request carries
Standard Webhooks headers (``webhook-id`` = the delivery's stable identity, so a
receiver can drop a retry it already processed; ``webhook-timestamp`` = this attempt's
time; one ``v1,`` signature per live secret, so rotation never breaks a receiver that
still holds the old secret). The client is injected and must be SSRF-guarded: the
worker's own :class:`~runbell.channels.webhook_http.KeepAliveLanes` (what ``SPEC``
builds), or an httpx client from ``runbell.outbound.safe_async_client``; either dials
only checked addresses and never follows redirects, and both give the same outcomes.

How a result maps onto the typed errors of ``runbell.channels.base``:

=====================================  =================================================
2xx                                    ``Sent``
3xx                                    transient: a redirect is never followed
410                                    permanent, ``gone`` (the endpoint is disabled)
429, 502, 503, 504                     transient, ``retry_after_s`` from ``Retry-After``
any other status                       transient (receivers fix bugs; the schedule is long)
``UnsafeDestination``, bad target      permanent, ``operator_alert``
connect error / connect timeout        transient: nothing was sent
anything after the connection opened   ``DeliveryUnknown``: the request may have arrived
=====================================  =================================================

Nothing here logs, and no error detail carries the URL (its path or query may hold a
token), a secret or the payload; the endpoint's host is named instead.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from datetime import datetime
from typing import Any, cast

import httpx

from runbell.channels.base import (
    ChannelSpec,
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    Setup,
    TransientDeliveryError,
    refuse_oversized,
)
from runbell.channels.webhook_http import (
    ConnectFailed,
    ExchangeFailed,
    KeepAliveLanes,
    RequestRefused,
)
from runbell.domain.channels import FACTS
from runbell.domain.errors import UnsafeDestination
from runbell.domain.retry import parse_retry_after
from runbell.signatures import HEADER_SIGNATURE, sign_headers

__all__ = ["SPEC", "USER_AGENT", "WebhookChannel", "sign_all"]

FACTS_WEBHOOK = FACTS["webhook"]

USER_AGENT = "Runbell-Webhooks/1"
EXCERPT_CHARS = 500
# Read at most this much of a response: enough for the excerpt, and a hostile
# receiver cannot make us buffer an endless body.
_EXCERPT_READ_BYTES = 4 * EXCERPT_CHARS
_RETRY_AFTER_STATUSES = frozenset({429, 502, 503, 504})


def sign_all(body: bytes, secrets: Sequence[str], msg_id: str, at: datetime) -> dict[str, str]:
    """The three Standard Webhooks headers, with one ``v1,`` signature per secret.

    ``secrets`` are every live secret, newest first; a receiver accepts the request if
    any entry matches the secret it holds. Duplicates are signed once. ``at`` must be
    timezone-aware. Raises ``ValueError`` for no secrets (an unsigned webhook is never
    sent) or a malformed one; the message never contains a secret.

    Example::

        headers = sign_all(b'{"type":"run.finished"}', [new, old], "dlv_1", now)
        assert headers["webhook-signature"].count("v1,") == 2
    """
    unique = list(dict.fromkeys(secrets))
    if not unique:
        raise ValueError("no signing secret is configured for this endpoint")
    signed = [sign_headers(body, secret, msg_id, at) for secret in unique]
    headers = dict(signed[0])
    headers[HEADER_SIGNATURE] = " ".join(h[HEADER_SIGNATURE] for h in signed)
    return headers


class WebhookChannel:
    """Deliver one :class:`Outbound` to a tenant webhook endpoint.

    ``msg.target`` holds ``url`` (the endpoint) and ``secrets`` (plaintext ``whsec_``
    secrets, newest first); ``msg.payload`` is the JSON body; ``msg.identity`` is the
    ``webhook-id``; ``msg.now`` is the attempt time.
    """

    name = "webhook"

    def __init__(self, client: httpx.AsyncClient | KeepAliveLanes) -> None:
        self._client = client

    def payload_size(self, msg: Outbound) -> int:
        """The bytes of the JSON body, exactly as signed and sent."""
        return len(_body(msg))

    async def send(self, msg: Outbound) -> Sent:
        url, body, headers = _prepare(msg)
        if isinstance(self._client, KeepAliveLanes):
            return await _send_lean(self._client, url, body, headers, msg.now)
        try:
            async with self._client.stream("POST", url, content=body, headers=headers) as rsp:
                excerpt = await _read_excerpt(rsp)
        except UnsafeDestination as exc:
            raise _refused(exc) from exc
        except httpx.InvalidURL as exc:
            # httpx rejects some spellings (e.g. the octal "0177.0.0.1") before the guard
            # sees them; the message may quote the URL, so it is not passed on.
            raise PermanentDeliveryError(
                "endpoint refused (invalid-url): the URL does not parse",
                operator_alert=True,
                rule="invalid-url",
            ) from exc
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as exc:
            raise PermanentDeliveryError(
                f"cannot send to {_host_of(url)}: {_describe(exc, url)}", operator_alert=True
            ) from exc
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise TransientDeliveryError(
                f"could not connect to {_host_of(url)}: {_describe(exc, url)}"
            ) from exc
        except httpx.TransportError as exc:
            raise DeliveryUnknown(
                f"no answer from {_host_of(url)} after sending: {_describe(exc, url)}"
            ) from exc
        return _outcome(rsp.status_code, rsp.headers, excerpt, url, msg.now)


async def _send_lean(
    client: KeepAliveLanes, url: str, body: bytes, headers: dict[str, str], now: datetime
) -> Sent:
    """The same send through the worker's own keep-alive client, the same outcomes."""
    try:
        reply = await client.post(url, body, headers)
    except UnsafeDestination as exc:
        raise _refused(exc) from exc
    except RequestRefused as exc:
        raise PermanentDeliveryError(
            f"cannot send to {_host_of(url)}: {_describe(exc, url)}", operator_alert=True
        ) from exc
    except ConnectFailed as exc:
        raise TransientDeliveryError(
            f"could not connect to {_host_of(url)}: {_describe(exc, url)}"
        ) from exc
    except ExchangeFailed as exc:
        raise DeliveryUnknown(
            f"no answer from {_host_of(url)} after sending: {_describe(exc, url)}"
        ) from exc
    excerpt = reply.body.decode("utf-8", "replace").strip()[:EXCERPT_CHARS]
    return _outcome(reply.status, reply.headers, excerpt, url, now)


def _refused(exc: UnsafeDestination) -> PermanentDeliveryError:
    return PermanentDeliveryError(
        f"endpoint refused by the SSRF guard: {exc.detail}",
        operator_alert=True,
        rule=exc.extra.get("rule"),
    )


def _prepare(msg: Outbound) -> tuple[str, bytes, dict[str, str]]:
    """The URL, exact body bytes and headers; a target that can never work is permanent."""
    url = msg.target.get("url")
    if not isinstance(url, str) or not url.strip():
        raise PermanentDeliveryError("the webhook target has no url", operator_alert=True)
    secrets = msg.target.get("secrets")
    if not isinstance(secrets, list | tuple) or not all(isinstance(s, str) for s in secrets):
        raise PermanentDeliveryError(
            "the webhook target's secrets must be a list of strings", operator_alert=True
        )
    body = _body(msg)
    refuse_oversized(FACTS_WEBHOOK, len(body))
    try:
        signed = sign_all(body, secrets, msg.identity, msg.now)
    except ValueError as exc:
        raise PermanentDeliveryError(
            f"cannot sign the webhook: {exc}", operator_alert=True
        ) from exc
    headers = {"content-type": "application/json", "user-agent": USER_AGENT, **signed}
    return url, body, headers


def _body(msg: Outbound) -> bytes:
    """Compact and ASCII-only JSON (non-ASCII is \\u-escaped, so the bytes are also
    UTF-8): these exact bytes are both signed and sent."""
    if not isinstance(msg.payload, dict):
        raise PermanentDeliveryError("the webhook delivery has no payload", operator_alert=True)
    try:
        return json.dumps(msg.payload, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise PermanentDeliveryError(
            f"the webhook payload is not JSON: {type(exc).__name__}", operator_alert=True
        ) from exc


async def _read_excerpt(response: httpx.Response) -> str:
    """The start of the response body, at most ``EXCERPT_CHARS`` characters.

    The status is already known here, so a body that breaks off does not make the
    outcome uncertain: whatever arrived is kept.
    """
    buffer = bytearray()
    try:
        # aiter_bytes is an async generator; closing it promptly after ``break`` keeps
        # its cleanup out of the garbage collector.
        chunks_iter = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
        async with aclosing(chunks_iter) as chunks:
            async for chunk in chunks:
                buffer += chunk
                if len(buffer) >= _EXCERPT_READ_BYTES:
                    break
    except httpx.HTTPError:
        pass
    return buffer.decode("utf-8", "replace").strip()[:EXCERPT_CHARS]


def _outcome(
    status: int, headers: Mapping[str, str], excerpt: str, url: str, now: datetime
) -> Sent:
    common: dict[str, Any] = {"status_code": status, "response_excerpt": excerpt or None}
    if 200 <= status < 300:
        return Sent(**common)
    host = _host_of(url)  # named in errors only
    if 300 <= status < 400:
        # Following would let a receiver steer us elsewhere; the Location is not echoed
        # because it may carry a token like the endpoint URL itself.
        raise TransientDeliveryError(
            f"{host} answered {status}: redirects are not followed", **common
        )
    if status == 410:
        raise PermanentDeliveryError(
            f"{host} answered 410: the endpoint is gone", gone=True, **common
        )
    retry_after = None
    if status in _RETRY_AFTER_STATUSES:
        retry_after = parse_retry_after(headers.get("retry-after"), now)
    raise TransientDeliveryError(f"{host} answered {status}", retry_after_s=retry_after, **common)


def _host_of(url: str) -> str:
    """The endpoint's host, which is safe to name; never the path or query."""
    try:
        return httpx.URL(url).host or "the endpoint"
    except httpx.InvalidURL:
        return "the endpoint"


def _describe(exc: Exception, url: str) -> str:
    """The error's class and message, with the URL cut out should a library quote it."""
    text = str(exc).replace(url, "<url>")[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _build(setup: Setup) -> WebhookChannel:
    """The worker's client: one SSRF-guarded keep-alive connection per concurrent send
    (:class:`~runbell.channels.webhook_http.KeepAliveLanes`: a fraction of httpx's CPU
    per POST, the same guard and outcomes)."""
    s = setup.settings
    return WebhookChannel(
        KeepAliveLanes(
            s.worker_concurrency,
            allow_hosts=s.outbound_allow_hosts,
            timeout=s.outbound_timeout_s,
        )
    )


SPEC = ChannelSpec(
    facts=FACTS_WEBHOOK,
    build=_build,
    # ``found``: the endpoint with its live secrets (flows.delivery_prepare), opened here.
    target=lambda found, open_: {
        "url": found["url"],
        "secrets": [open_(s["sealed"]) for s in found["secrets"]],
        "rate_limit_per_s": found["rate_limit_per_s"],
    },
)
