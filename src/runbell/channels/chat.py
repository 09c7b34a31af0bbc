"""The chat channel: one neutral message to Slack, Telegram, Discord, Matrix, ntfy, … via Apprise.

A chat destination is one Apprise URL (``slack://T…/B…/X…``, ``tgram://bot/chat``,
``json://host:port/path``). Apprise knows ~150 services but only answers True/False,
retries on its own, follows redirects and dials whatever the URL names, so this module
wraps it the way the other channels are built:

* ``runbell.channels.chat_urls`` parses a destination (an allow-list of *network*
  services, one target, TLS on), says which hosts its plugin will contact, and runs each
  through the SSRF guard — at registration and again before every send, here.
* ``ChatChannel.send`` turns Apprise's own retries off (the dispatcher owns retries),
  turns redirects off (a 3xx cannot bounce the request into our network), ignores
  ``?optional=yes`` (which would report a failure as success) and reads the HTTP status
  from Apprise's per-call log capture to raise typed errors instead of returning False.
* ``chat_urls.redact`` is the only form of a chat URL that may appear in errors or logs.
* The Apprise call runs inside ``runbell.outbound.guarded_dials``: every connection its
  plugin opens (all supported plugins use ``requests``, hence urllib3) dials the address
  checked a moment before, with the name kept for SNI, certificates and ``Host``. A host
  the plugin contacts that was not predicted above is checked when it connects, and a
  refusal is reported as such. So no DNS answer given after the check is ever used.

Known limits, by design of Apprise rather than of this module: ``Retry-After`` is not
visible; a few plugins obey a 429 by waiting and retrying once *inside* the plugin
(Discord, Matrix), and some need a set-up request first (Telegram owner detection, Matrix
login), all bounded by the channel timeout. A proxy from the environment (``HTTPS_PROXY``)
is dialled like any other host, so a private proxy must be allow-listed, and the proxy
then resolves the destination itself.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import apprise

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
from runbell.channels.chat_urls import (
    check_target,
    load_plugin,
    load_plugins,
    plugins_loaded,
    redact,
)
from runbell.domain.channels import FACTS
from runbell.domain.errors import UnsafeDestination, ValidationFailed
from runbell.domain.ssrf import Resolver, Target
from runbell.outbound import DialGuard, guarded_dials, make_resolver

__all__ = ["SPEC", "ChatChannel"]

FACTS_CHAT = FACTS["chat"]

_HTTP_ERROR = re.compile(r"\berror=([1-5][0-9]{2})[0-9]*\b", re.ASCII)
_CONNECTION_ERROR = "connection error"


def _harden(plugin: Any, timeout: float) -> None:
    """Make one plugin instance behave like a Runbell channel: one try, no detours."""
    plugin.retry = 0  # the dispatcher retries, with backoff, under the delivery's identity
    plugin.wait = 0.0
    plugin.optional = False  # ?optional=yes would turn a failure into success
    plugin.redirects = False  # a 3xx must not bounce the request into our network
    plugin.verify_certificate = True
    plugin.overflow_mode = apprise.OverflowMode.UPSTREAM  # one message, never split
    if hasattr(plugin, "discovery"):
        # Matrix .well-known discovery would let a public host send us to another one.
        plugin.discovery = False
    # A hung connect fails well inside the deadline (nothing was sent: transient); a
    # reply that does not come before the deadline is DeliveryUnknown, not a read error.
    plugin.socket_connect_timeout = max(timeout / 2, 0.001)
    plugin.socket_read_timeout = timeout * 2


def _failure(result: apprise.AppriseResult, shown: str, opened: int = 0) -> DeliveryError:
    """Turn a failed Apprise result into a typed error, from what its plugin logged;
    ``opened``: how many connections the send established."""
    services = result.results
    if not services:
        # Apprise refused the call before dispatching (e.g. an unusable message).
        return PermanentDeliveryError(
            f"Apprise did not dispatch the message to {shown}", operator_alert=True
        )
    if any(s.status == apprise.AppriseResultStatus.TIMEOUT for s in services):
        return DeliveryUnknown(f"no answer from {shown} before the timeout")

    status_code: int | None = None
    connection_failed = False
    for entry in result.logs():
        message = str(entry.message)
        for match in _HTTP_ERROR.finditer(message):
            status_code = int(match.group(1))
        if _CONNECTION_ERROR in message.lower():
            connection_failed = True

    if status_code is None:
        if connection_failed and opened:
            # The connection was up when it broke: the request may have been written and
            # acted on (a retry goes out under the same identity).
            return DeliveryUnknown(f"the connection to {shown} broke before an answer")
        reason = "could not connect to" if connection_failed else "Apprise reported a failure for"
        # Without a status we cannot tell a refused connection from anything else:
        # retrying is the safe reading.
        return TransientDeliveryError(f"{reason} {shown}")
    return _classify(status_code, shown)


def _classify(code: int, shown: str) -> DeliveryError:
    detail = f"{shown} answered HTTP {code}"
    if code in (408, 425, 429) or 500 <= code <= 599:
        return TransientDeliveryError(detail, status_code=code)
    if code == 410:
        return PermanentDeliveryError(detail, status_code=code, gone=True)
    if 300 <= code <= 399:
        return PermanentDeliveryError(
            f"{detail} (redirects are never followed)", status_code=code, operator_alert=True
        )
    if code in (401, 403, 404):
        # The token or channel in the URL is wrong or revoked: someone must fix it.
        return PermanentDeliveryError(detail, status_code=code, operator_alert=True)
    if 400 <= code <= 499:
        return PermanentDeliveryError(detail, status_code=code)
    if 200 <= code <= 299:
        # The plugin read a refusal in the reply (Slack's {"ok": false}, Telegram's
        # "ok": false) or got a success code the API does not document.
        return PermanentDeliveryError(
            f"{detail} but refused the message", status_code=code, operator_alert=True
        )
    return TransientDeliveryError(detail, status_code=code)


class ChatChannel:
    """Sends ``msg.title`` and ``msg.body`` + deep link to ``msg.target["url"]`` via Apprise.

    ``allow_hosts`` is the operator's SSRF allow-list (hosts or ``host:port``) that lets
    plain-http or private destinations through; ``resolve`` is injectable for tests;
    ``timeout`` bounds each send (DNS check and Apprise call each).
    """

    name = "chat"

    def __init__(
        self,
        *,
        allow_hosts: frozenset[str],
        resolve: Resolver | None = None,
        timeout: float = 10.0,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._allow_hosts = frozenset(allow_hosts)
        self._resolve = resolve if resolve is not None else make_resolver()
        self._timeout = float(timeout)
        self._asset = apprise.AppriseAsset(
            storage_mode="memory",
            service_timeout=self._timeout,
            http_redirects=False,
        )

    def _checked_plugin(self, url: str) -> tuple[Any, list[Target]]:
        plugin, target = load_plugin(url, self._asset)
        checked = check_target(target, self._allow_hosts, self._resolve)
        _harden(plugin, self._timeout)
        return plugin, checked

    def _notify(
        self, notifier: apprise.Apprise, checked: list[Target], **kwargs: Any
    ) -> tuple[apprise.AppriseResult, DialGuard]:
        """Apprise's call, with every connection its plugin opens dialling a checked
        address: the endpoints checked a moment ago at the address checked, anything else
        checked when it connects (``runbell.outbound.guarded_dials``)."""
        with guarded_dials(checked, allow_hosts=self._allow_hosts, resolve=self._resolve) as guard:
            result = notifier.notify(**kwargs)
        return result, guard

    @staticmethod
    def _text(msg: Outbound) -> tuple[str, str]:
        """The title and the text Apprise is handed: the body, then the deep link."""
        return msg.title, f"{msg.body}\n{msg.deep_link}" if msg.body else msg.deep_link

    def payload_size(self, msg: Outbound) -> int:
        """The bytes of the title and the text, as handed to Apprise."""
        title, body = self._text(msg)
        return len(title.encode("utf-8")) + len(body.encode("utf-8"))

    async def send(self, msg: Outbound) -> Sent:
        url = msg.target.get("url")
        if not isinstance(url, str) or not url.strip():
            raise PermanentDeliveryError("chat destination has no Apprise URL", operator_alert=True)
        if not plugins_loaded():  # the first send: half a second of imports, off the loop
            await asyncio.to_thread(load_plugins)
        shown = redact(url)
        refuse_oversized(FACTS_CHAT, self.payload_size(msg))

        try:
            plugin, checked = await asyncio.wait_for(
                asyncio.to_thread(self._checked_plugin, url), self._timeout
            )
        except ValidationFailed as exc:
            raise PermanentDeliveryError(
                f"chat destination {shown} is not usable: {exc.detail}", operator_alert=True
            ) from exc
        except UnsafeDestination as exc:
            raise PermanentDeliveryError(
                f"chat destination {shown} refused: {exc.detail}",
                operator_alert=True,
                rule=exc.extra.get("rule"),
            ) from exc
        except TimeoutError as exc:  # before OSError, whose subclass it is
            raise TransientDeliveryError(f"checking chat destination {shown} timed out") from exc
        except OSError as exc:  # DNS failure: nothing was sent
            raise TransientDeliveryError(f"cannot resolve chat destination {shown}") from exc

        notifier = apprise.Apprise(asset=self._asset)
        notifier.add(plugin)
        title, body = self._text(msg)
        try:
            # Apprise enforces the deadline itself (TIMEOUT status); the outer wait is a
            # guard against a call that never returns at all.
            result, guard = await asyncio.wait_for(
                asyncio.to_thread(
                    self._notify,
                    notifier,
                    checked,
                    body=body,
                    title=title,
                    notify_type=apprise.NotifyType.INFO,
                    body_format=apprise.NotifyFormat.TEXT,
                    timeout=self._timeout,
                ),
                self._timeout * 2 + 1,
            )
        except TimeoutError as exc:
            raise DeliveryUnknown(f"no answer from {shown} before the timeout") from exc

        try:
            if result.status == apprise.AppriseResultStatus.SUCCESS:
                return Sent()
            if guard.refused:
                refused = guard.refused[0]
                raise PermanentDeliveryError(
                    f"chat destination {shown} refused: {refused.detail}",
                    operator_alert=True,
                    rule=refused.extra.get("rule"),
                )
            raise _failure(result, shown, guard.opened)
        finally:
            result.close()


def _build(setup: Setup) -> ChatChannel:
    s = setup.settings
    return ChatChannel(allow_hosts=s.outbound_allow_hosts, timeout=s.outbound_timeout_s)


SPEC = ChannelSpec(
    facts=FACTS_CHAT,
    build=_build,
    # Sealed at rest (flows.preferences), opened only for the send.
    target=lambda found, open_: {"url": open_(found["url_sealed"])},
)
