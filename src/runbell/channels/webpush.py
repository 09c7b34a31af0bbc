"""Web push (RFC 8030, VAPID RFC 8292, aes128gcm RFC 8291) to a browser subscription.

What goes over the wire is a *pointer*, not the notification: an opaque id, the neutral
title/body, the deep link and display hints (:func:`push_payload`). It can show on a lock
screen, so it never carries run details (invariant 11); the page behind the link loads
those after authentication.

Headers the push service acts on:

* ``TTL`` is always set (pywebpush defaults to 0, which silently drops the message when
  the browser is offline): until the request expires for time-sensitive and urgent
  messages, ``default_ttl_s`` otherwise.
* ``Urgency``: low→low, normal→normal, time_sensitive|urgent→high.
* ``Topic`` (:func:`collapse_topic`): a newer push with the same topic replaces an
  undelivered older one; the service worker uses the same value as the notification
  ``tag``, so a newer alert for the same run replaces the old one on screen too. That is
  also what makes a repeated send (after :class:`DeliveryUnknown`) harmless.

Outcomes (DESIGN §6): 2xx sent; 404/410 the subscription is gone (the dispatcher deletes
it); 403 the push service rejected our VAPID key (operator alert); 413 and other 4xx
permanent; 429 and 5xx transient, honouring ``Retry-After``; connection failures before
anything was sent transient; a timeout or reset after sending :class:`DeliveryUnknown`.

The endpoint URL is a capability (whoever has it can push to that browser), so it never
appears in errors, excerpts or logs; only its host does.

The endpoint comes from a browser, so :class:`GuardedWebPush` (what ``SPEC`` builds)
checks it with the SSRF guard before every send and passes the verdict as ``dial``: pywebpush then
gets a ``requests`` session whose :class:`~runbell.outbound.PinnedAdapter` dials the
checked address (SNI, certificate check and ``Host`` on the name), so a DNS answer that
changes after the check (rebinding) is never used.

Example::

    keys = VapidKeys.generate()            # once; stored sealed by the wiring
    channel = WebPushChannel(keys, "mailto:ops@example.com")
    sent = await channel.send(outbound)    # outbound.target = {"endpoint", "p256dh", "auth"}
"""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3.exceptions
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid, VapidException
from pywebpush import WebPushException, webpush

from runbell import i18n
from runbell.channels.base import (
    ChannelSpec,
    DeliveryError,
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    Setup,
    TransientDeliveryError,
    refuse_oversized,
)
from runbell.channels.vapid import (
    VapidKeys,
    b64url,
    b64url_decode,
    load_private_key,
    public_key_b64,
)
from runbell.domain.channels import FACTS
from runbell.domain.errors import UnsafeDestination
from runbell.domain.escalation import RETRACTED
from runbell.domain.retry import parse_retry_after
from runbell.domain.ssrf import Target, check_url
from runbell.outbound import PinnedAdapter, make_resolver

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "SPEC",
    "URGENCY_HEADER",
    "GuardedWebPush",
    "VapidKeys",
    "WebPushChannel",
    "collapse_topic",
    "encode_payload",
    "push_payload",
    "ttl_seconds",
]

FACTS_WEBPUSH = FACTS["webpush"]
# Push services must accept 4096 bytes of ciphertext; aes128gcm adds an 86-byte header
# and a 17-byte tag+delimiter, and pywebpush does not pad. 3 KB leaves room to spare.
MAX_PAYLOAD_BYTES = FACTS_WEBPUSH.payload_limit_bytes
MIN_TTL_S = 60
EXCERPT_CHARS = 500

URGENCY_HEADER: dict[str, str] = {
    "low": "low",
    "normal": "normal",
    "time_sensitive": "high",
    "urgent": "high",
}
_INTERRUPTING = frozenset({"time_sensitive", "urgent"})


def collapse_topic(key: str) -> str:
    """The ``Topic`` header (and notification ``tag``) for a collapse key.

    RFC 8030 allows at most 32 base64url characters; hashing fits any key into that and
    keeps the key itself (which may name a run) off the push service. 24 bytes encode to
    exactly 32 characters with no padding.

    >>> len(collapse_topic("run_01JD"))
    32
    """
    return b64url(hashlib.sha256(key.encode("utf-8")).digest()[:24])


def _topic_source(msg: Outbound) -> str:
    # identity is always present: a message with neither key still gets a stable topic,
    # so a retry replaces (rather than duplicates) an undelivered first try.
    return msg.collapse_key or msg.notification_id or msg.identity


#: sw.js's own words for a refused button (its English fallback), sent worded for the
#: recipient with every push that has buttons.
NOT_DONE_TITLE = i18n.N_("Not done")
NOT_DONE_BODY = i18n.N_("This changed since it was sent. Open Runbell to see it now.")


def push_payload(msg: Outbound) -> dict[str, Any]:
    """The pointer the service worker receives: exactly these fields, nothing else.

    ``tag`` equals the ``Topic`` header; ``require_interaction`` keeps interrupting alerts
    on screen until the person acts. A retraction (someone handled the notification on
    another device) adds ``replace_only``: the service worker swaps it in for a shown
    notification with the same tag, silently, and shows nothing new otherwise.
    """
    payload: dict[str, Any] = {
        "v": 1,
        "id": msg.notification_id,
        "tag": collapse_topic(_topic_source(msg)),
        "title": msg.title,
        "body": msg.body,
        "url": msg.deep_link,
        "urgency": msg.urgency,
        "require_interaction": msg.urgency in _INTERRUPTING and msg.event_type != RETRACTED,
        "ts": int(msg.now.timestamp()),
    }
    if msg.event_type == RETRACTED or msg.replace_only:
        payload["replace_only"] = True
    if msg.actions and msg.action_token:
        # Inside the encrypted payload only (RFC 8291): the token is the actions'
        # credential, so it never goes in a URL, a title or a body (flows.push_actions).
        payload["actions"] = [{"action": a, "title": title} for a, title in msg.actions]
        payload["token"] = msg.action_token
        # What the service worker shows when the server refuses a button (changed since,
        # used, expired), in the recipient's language: sw.js has no catalogue.
        with i18n.using(msg.locale):
            payload["not_done"] = {"title": i18n._(NOT_DONE_TITLE), "body": i18n._(NOT_DONE_BODY)}
    return payload


def encode_payload(payload: dict[str, Any]) -> str:
    """Compact JSON with UTF-8 text as is: ``\\uXXXX`` escapes would triple the size of
    non-Latin titles and push a legitimate message over the size limit."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def ttl_seconds(msg: Outbound, default_ttl_s: int) -> int:
    """How long the push service may hold the message for an offline browser.

    An interrupting message is worthless after its request expires, so it lives until
    then (at least a minute, so a message about to expire is not dropped on the floor);
    computed from ``msg.now``, the dispatcher's clock, not the wall clock.
    """
    if msg.urgency in _INTERRUPTING and msg.expires_at is not None:
        remaining = (msg.expires_at - msg.now).total_seconds()
        return max(MIN_TTL_S, math.ceil(remaining))
    return default_ttl_s


class _NoRedirectSession(requests.Session):
    """A push service never redirects; following one would re-send an encrypted
    message to a URL nobody subscribed, so a 3xx is reported as it is."""

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["allow_redirects"] = False
        return super().request(method, url, *args, **kwargs)


@dataclass(frozen=True)
class _Target:
    endpoint: str
    host: str
    subscription: dict[str, Any]


class WebPushChannel:
    """Sends one :class:`Outbound` to one browser push subscription.

    ``msg.target`` = ``{"endpoint": str, "p256dh": str, "auth": str}`` as the browser's
    ``PushSubscription.toJSON()`` gave them (``p256dh``/``auth`` unpadded base64url).

    ``subject`` is the VAPID ``sub`` claim, the push service's way to reach the operator:
    ``mailto:ops@example.com`` or ``https://example.com``. It is checked here so a bad
    value fails at start-up, not on the first alert.
    """

    name = "webpush"

    def __init__(
        self,
        keys: VapidKeys,
        subject: str,
        *,
        timeout: float = 10.0,
        default_ttl_s: int = 86400,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if default_ttl_s < MIN_TTL_S:
            raise ValueError(f"default_ttl_s must be at least {MIN_TTL_S}")
        self._vapid = Vapid(private_key=load_private_key(keys.private_pem))
        self.public_key = keys.public_key
        if public_key_b64(self._vapid.private_key) != keys.public_key:
            raise ValueError("VAPID public key does not match the private key")
        try:
            # py-vapid validates ``sub`` only when signing; sign once to fail early.
            self._vapid.sign({"sub": subject, "aud": "https://push.invalid", "exp": 1})
        except VapidException:
            raise ValueError(
                "VAPID subject must be a mailto: address or an https:// origin"
            ) from None
        self.subject = subject
        self.timeout = timeout
        self.default_ttl_s = default_ttl_s

    def payload_size(self, msg: Outbound) -> int:
        """The bytes of the pointer as encoded, before encryption."""
        return len(encode_payload(push_payload(msg)).encode("utf-8"))

    async def send(self, msg: Outbound, *, dial: Target | None = None) -> Sent:
        """Push ``msg``; with ``dial`` (the SSRF guard's verdict on the endpoint), the
        connection goes to ``dial``'s checked address and nowhere else."""
        target = _parse_target(msg.target)
        urgency = URGENCY_HEADER.get(msg.urgency)
        if urgency is None:
            raise PermanentDeliveryError(
                f"unknown urgency {msg.urgency!r} for web push", operator_alert=True
            )
        data = encode_payload(push_payload(msg))
        refuse_oversized(FACTS_WEBPUSH, len(data.encode("utf-8")))
        headers = {"Urgency": urgency, "Topic": collapse_topic(_topic_source(msg))}
        ttl = ttl_seconds(msg, self.default_ttl_s)
        return await asyncio.to_thread(self._send_sync, target, data, headers, ttl, msg, dial)

    def _send_sync(
        self,
        target: _Target,
        data: str,
        headers: dict[str, str],
        ttl: int,
        msg: Outbound,
        dial: Target | None,
    ) -> Sent:
        with _NoRedirectSession() as session:
            # Proxy variables must not route pushes (nor 127.0.0.1 in tests) elsewhere.
            session.trust_env = False
            if dial is not None:
                # Dial the address the SSRF guard checked: requests would resolve the name
                # again, and an answer that changed since (DNS rebinding) would be used.
                pinned = PinnedAdapter(dial)
                session.mount("https://", pinned)
                session.mount("http://", pinned)
            try:
                response = webpush(
                    target.subscription,
                    data=data,
                    vapid_private_key=self._vapid,  # an instance: a str may be read as a path
                    vapid_claims={"sub": self.subject},  # fresh: pywebpush adds aud/exp in place
                    content_encoding="aes128gcm",
                    timeout=self.timeout,
                    ttl=ttl,
                    headers=dict(headers),
                    requests_session=session,
                )
            # ``from None`` below: requests' and pywebpush's messages contain the endpoint
            # URL (a capability) or the response body, and a chained cause would print them
            # in any traceback. Our errors carry the host, the status and a scrubbed excerpt.
            except WebPushException as exc:
                if exc.response is None:
                    raise PermanentDeliveryError(
                        f"web push to {target.host} refused before sending"
                    ) from None
                if 200 <= int(exc.response.status_code) < 300:
                    # pywebpush raises for any status above 202; a 2xx is still success.
                    response = exc.response
                else:
                    raise _status_error(exc.response, target, msg) from None
            except requests.RequestException as exc:
                raise _transport_error(exc, target) from None
            except VapidException:
                raise PermanentDeliveryError(
                    "could not sign the VAPID claims", operator_alert=True
                ) from None
        status = int(response.status_code)
        return Sent(
            status_code=status,
            provider_message_id=response.headers.get("Location") or None,
            response_excerpt=_excerpt(response, target),
        )


def _parse_target(raw: dict[str, Any]) -> _Target:
    missing = [k for k in ("endpoint", "p256dh", "auth") if not isinstance(raw.get(k), str)]
    if missing:
        # The dispatcher builds target from the stored subscription: a wiring bug.
        raise PermanentDeliveryError(
            f"web push target is missing {', '.join(missing)}", operator_alert=True
        )
    endpoint: str = raw["endpoint"]
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host or parts.username is not None:
        raise PermanentDeliveryError("web push endpoint is not an http(s) URL")
    try:
        p256dh = b64url_decode(raw["p256dh"])
        auth = b64url_decode(raw["auth"])
    except (binascii.Error, ValueError):
        raise PermanentDeliveryError(f"subscription keys for {host} are not base64url") from None
    if len(p256dh) != 65 or p256dh[0] != 4 or len(auth) != 16:
        raise PermanentDeliveryError(f"subscription keys for {host} are malformed")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), p256dh)
    except ValueError:
        raise PermanentDeliveryError(f"subscription key for {host} is not a P-256 point") from None
    subscription = {"endpoint": endpoint, "keys": {"p256dh": raw["p256dh"], "auth": raw["auth"]}}
    return _Target(endpoint=endpoint, host=host, subscription=subscription)


def _excerpt(response: Any, target: _Target) -> str:
    """Start of the answer, with the endpoint (and its secret path) blanked out in case
    the push service echoes it."""
    try:
        text = str(response.text or "")
    except Exception:  # an undecodable body says nothing useful anyway
        text = ""
    text = text.replace(target.endpoint, "<endpoint>")
    path = urlsplit(target.endpoint).path
    if len(path) > 1:
        text = text.replace(path, "<endpoint path>")
    text = text.strip()
    if not text:
        text = f"{response.status_code} {response.reason or ''}".strip()
    return text[:EXCERPT_CHARS]


def _status_error(response: Any, target: _Target, msg: Outbound) -> DeliveryError:
    status = int(response.status_code)
    where = f"push service {target.host} answered {status}"
    info: dict[str, Any] = {"status_code": status, "response_excerpt": _excerpt(response, target)}
    if status in (404, 410):
        return PermanentDeliveryError(f"{where}: subscription is gone", gone=True, **info)
    if status in (401, 403):
        return PermanentDeliveryError(
            f"{where}: VAPID credentials rejected (key rotated or subject invalid?)",
            operator_alert=True,
            **info,
        )
    if status == 413:
        return PermanentDeliveryError(f"{where}: payload too large", **info)
    if status in (408, 425, 429) or status >= 500:
        retry_after = parse_retry_after(response.headers.get("Retry-After"), msg.now)
        return TransientDeliveryError(where, retry_after_s=retry_after, **info)
    if 300 <= status < 400:
        return PermanentDeliveryError(f"{where}: redirects are not followed", **info)
    return PermanentDeliveryError(where, **info)


def _never_connected(exc: requests.ConnectionError) -> bool:
    """True when the TCP/TLS connection was never established, so nothing was sent."""
    if isinstance(exc, requests.exceptions.SSLError):
        return True
    reason = exc.args[0] if exc.args else None
    if isinstance(reason, urllib3.exceptions.MaxRetryError):
        reason = reason.reason
    return isinstance(
        reason, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ClosedPoolError
    )


def _transport_error(exc: requests.RequestException, target: _Target) -> DeliveryError:
    # The exception's class name is enough to diagnose; its message holds the full URL.
    kind = type(exc).__name__
    info: dict[str, Any] = {"status_code": None, "response_excerpt": f"no response ({kind})"}
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return TransientDeliveryError(f"connecting to {target.host} timed out", **info)
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return DeliveryUnknown(f"{target.host} did not answer in time", **info)
    if isinstance(exc, requests.ConnectionError):
        if _never_connected(exc):
            return TransientDeliveryError(f"could not connect to {target.host}", **info)
        return DeliveryUnknown(f"connection to {target.host} broke after sending", **info)
    if isinstance(
        exc,
        requests.exceptions.InvalidURL
        | requests.exceptions.MissingSchema
        | requests.exceptions.InvalidSchema
        | requests.exceptions.InvalidHeader,
    ):
        return PermanentDeliveryError(f"web push request to {target.host} is invalid", **info)
    return DeliveryUnknown(f"web push to {target.host} failed", **info)


class GuardedWebPush:
    """Web push with the SSRF guard in front: a subscription endpoint comes from a
    browser, so it is checked before every send like any user-supplied URL, and the push
    dials the checked address (no second lookup for DNS rebinding to answer)."""

    name = "webpush"

    def __init__(self, inner: WebPushChannel, allow_hosts: frozenset[str]) -> None:
        self.inner = inner
        self.allow_hosts = allow_hosts
        self.resolve = make_resolver()

    def payload_size(self, msg: Outbound) -> int:
        return self.inner.payload_size(msg)

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


def _build(setup: Setup) -> GuardedWebPush:
    s = setup.settings
    return GuardedWebPush(
        WebPushChannel(setup.vapid_keys(), s.vapid_subject, timeout=s.outbound_timeout_s),
        s.outbound_allow_hosts,
    )


SPEC = ChannelSpec(
    facts=FACTS_WEBPUSH,
    build=_build,
    target=lambda found, _open: {
        "endpoint": found["endpoint"],
        "p256dh": found["p256dh"],
        "auth": found["auth"],
    },
)
