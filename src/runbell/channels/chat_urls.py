"""Chat destinations: which Apprise URLs are accepted, which hosts they reach, and the
only form of one that may be shown.

* ``parse_destination`` loads the URL with Apprise and accepts only an allow-list of
  *network* chat/notification services (no desktop, D-Bus, syslog, e-mail or SMS
  plugins), one target per destination, TLS verification on. It says which hosts the
  plugin will contact: the URL's own host for self-hosted services (``json``, ntfy,
  Gotify, Mattermost, Rocket.Chat, Matrix, Zulip, Teams workflows), the plugin's
  fixed public API host for SaaS ones (Slack, Discord, Telegram, Pushover, Google Chat).
* ``check_destination`` runs every such host through the SSRF guard
  (``runbell.domain.ssrf.check_url``): plain-http services (``json://``, ``ntfy://``, …)
  need an allow-listed host, and private, loopback, link-local, IPv4-mapped, … addresses
  are refused in every spelling. It runs at registration and again before every send
  (``runbell.channels.chat``).
* ``redact`` is the only form of a chat URL that may appear in errors or logs.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from runbell.domain.errors import ValidationFailed
from runbell.domain.ssrf import Resolver, Target, check_url
from runbell.outbound import make_resolver

if TYPE_CHECKING:
    import apprise

__all__ = [
    "SUPPORTED_SCHEMES",
    "ChatEndpoint",
    "ChatTarget",
    "check_destination",
    "check_target",
    "load_plugin",
    "load_plugins",
    "parse_destination",
    "redact",
]

_MAX_URL_LENGTH = 4096
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,31})://", re.ASCII)
# Apprise plugins report a refused request as "..., error=<HTTP status>." (ntfy writes its
# five-digit error code there, whose first three digits are the HTTP status).
# Apprise's list separators (between URLs, and between targets inside one URL).
_LIST_SEPARATORS = frozenset(",;")
# Characters that would change how a host is read once it is put back into a URL.
_HOST_BREAKERS = frozenset("/\\?#@ \t\r\n")


@dataclass(frozen=True)
class ChatEndpoint:
    """One host a chat plugin contacts, and whether it speaks TLS to it."""

    host: str  # lower-case, IPv6 without brackets
    port: int | None
    tls: bool

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.port is not None else host

    @property
    def origin(self) -> str:
        """The ``http(s)://host[:port]/`` the SSRF guard checks for this endpoint."""
        return f"{'https' if self.tls else 'http'}://{self.netloc}/"


@dataclass(frozen=True)
class ChatTarget:
    """What a chat URL means: which service, which hosts it will reach.

    ``host_from_url`` is True when the contacted host is the one written in the URL
    (self-hosted services); only then does ``redact`` show it. For SaaS services the
    URL's "host" is a token (``slack://T000/…``, ``tgram://123:abc/…``).
    """

    service: str
    scheme: str
    endpoints: tuple[ChatEndpoint, ...]
    host_from_url: bool


@dataclass(frozen=True)
class _Service:
    service: str
    plugin: str  # the Apprise class expected behind the scheme
    endpoints: Callable[[Any], tuple[tuple[ChatEndpoint, ...], bool]]


def _hostname(url: str) -> str:
    host = urlsplit(url).hostname
    if not host:  # a constant we took from the plugin no longer names a host
        raise ValidationFailed("the chat service's API host is unknown", field="url")
    return host


def _fixed(*urls: str) -> tuple[tuple[ChatEndpoint, ...], bool]:
    return tuple(ChatEndpoint(_hostname(url), None, True) for url in urls), False


def _own_host(plugin: Any, *, tls: bool | None = None) -> tuple[tuple[ChatEndpoint, ...], bool]:
    host = str(plugin.host or "").strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(ch in _HOST_BREAKERS for ch in host):
        raise ValidationFailed("the chat URL has no usable host", field="url")
    port = plugin.port if isinstance(plugin.port, int) else None
    secure = bool(plugin.secure) if tls is None else tls
    return (ChatEndpoint(host, port, secure),), True


# Slack posts to a different fixed host per mode; the URLs are the plugin's own constants.
_SLACK_MODE_URL = {
    "hook": "webhook_url",
    "gov-hook": "webhook_gov_url",
    "bot": "api_url",
    "workflow": "workflow_url",
    "trigger": "workflow_trigger_url",
}


def _slack(plugin: Any) -> tuple[tuple[ChatEndpoint, ...], bool]:
    attr = _SLACK_MODE_URL.get(str(plugin.mode))
    if attr is None:
        raise ValidationFailed(f"Slack mode {plugin.mode!r} is not supported", field="url")
    return _fixed(getattr(plugin, attr))


def _ntfy(plugin: Any) -> tuple[tuple[ChatEndpoint, ...], bool]:
    # ntfy://topic is the public ntfy.sh; ntfy://host/topic is a self-hosted server.
    if str(plugin.mode) == "cloud":
        return _fixed(plugin.cloud_notify_url)
    return _own_host(plugin)


def _matrix(plugin: Any) -> tuple[tuple[ChatEndpoint, ...], bool]:
    if str(plugin.mode) == "t2bot":
        return _fixed("https://webhooks.t2bot.io/")  # hard-coded in the plugin's send()
    return _own_host(plugin)


def _zulip(plugin: Any) -> tuple[tuple[ChatEndpoint, ...], bool]:
    # The plugin posts to https://{organization}.{hostname} (zulipchat.com by default).
    host = f"{plugin.organization}.{plugin.hostname}".lower()
    if any(ch in _HOST_BREAKERS or ch == ":" for ch in host):
        raise ValidationFailed("the chat URL has no usable host", field="url")
    return (ChatEndpoint(host, None, True),), True


# The allow-list: network chat and push services only. Everything else Apprise offers is
# refused: desktop/OS plugins (windows, macosx, dbus, glib, gnome), local logging (syslog),
# generic form/xml posts (tenant webhooks are the signed webhook channel's job), e-mail,
# SMS and paid gateways (not chat; they cost money per message).
_SERVICES: dict[str, _Service] = {
    "json": _Service("json", "NotifyJSON", _own_host),
    "jsons": _Service("json", "NotifyJSON", _own_host),
    "slack": _Service("slack", "NotifySlack", _slack),
    "discord": _Service("discord", "NotifyDiscord", lambda p: _fixed(p.notify_url)),
    "tgram": _Service("telegram", "NotifyTelegram", lambda p: _fixed(p.notify_url)),
    "ntfy": _Service("ntfy", "NotifyNtfy", _ntfy),
    "ntfys": _Service("ntfy", "NotifyNtfy", _ntfy),
    "matrix": _Service("matrix", "NotifyMatrix", _matrix),
    "matrixs": _Service("matrix", "NotifyMatrix", _matrix),
    "mmost": _Service("mattermost", "NotifyMattermost", _own_host),
    "mmosts": _Service("mattermost", "NotifyMattermost", _own_host),
    "rocket": _Service("rocketchat", "NotifyRocketChat", _own_host),
    "rockets": _Service("rocketchat", "NotifyRocketChat", _own_host),
    "zulip": _Service("zulip", "NotifyZulip", _zulip),
    "gotify": _Service("gotify", "NotifyGotify", _own_host),
    "gotifys": _Service("gotify", "NotifyGotify", _own_host),
    "pover": _Service("pushover", "NotifyPushover", lambda p: _fixed(p.notify_url)),
    "gchat": _Service("googlechat", "NotifyGoogleChat", lambda p: _fixed(p.notify_url)),
    # Microsoft Teams through Power Automate workflows: always https to the URL's host.
    "workflow": _Service("msteams", "NotifyWorkflows", lambda p: _own_host(p, tls=True)),
    "workflows": _Service("msteams", "NotifyWorkflows", lambda p: _own_host(p, tls=True)),
}

SUPPORTED_SCHEMES: frozenset[str] = frozenset(_SERVICES)


_loading = threading.Lock()
_parse_asset: apprise.AppriseAsset | None = None


def load_plugins() -> None:
    """Import Apprise and its plugin modules, once per process, on the first chat URL.

    Not at import: Apprise's ~100 plugin modules take about half a second to load, and
    every process that merely *can* validate a chat URL (each ``runbell api`` start, most
    CLI commands) imported this module. Apprise would import them lazily on first use
    anyway; doing it here, before any parse or send, keeps one thing out of that path:
    its e-mail plugin imports the stdlib ``imghdr`` (for PGPy), which warns "'imghdr' is
    deprecated" on Python 3.11/3.12. That one third-party warning is silenced here,
    narrowly, so it cannot surface in the middle of a send (or fail a test run that treats
    warnings as errors). Thread-safe; cheap once done (a flag check).
    """
    _loaded()


def _loaded() -> apprise.AppriseAsset:
    """:func:`load_plugins`, answering the shared parse-only asset."""
    global _parse_asset
    if _parse_asset is not None:
        return _parse_asset
    with _loading:
        if _parse_asset is not None:
            return _parse_asset
        import apprise

        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r"'imghdr' is deprecated", category=DeprecationWarning
            )
            manager: Any = apprise.plugins.N_MGR  # untyped in Apprise
            manager.load_modules()
        # Parsing never sends, so one shared asset is enough; memory-only storage keeps
        # plugins from writing state (tokens, Matrix sessions) to disk. Set last: it is
        # the flag that says the plugins are loaded.
        _parse_asset = apprise.AppriseAsset(storage_mode="memory")
        return _parse_asset


def plugins_loaded() -> bool:
    """Whether :func:`load_plugins` has run (a sender on an event loop runs it in a
    thread the first time, rather than blocking the loop for half a second)."""
    return _parse_asset is not None


def _invalid(detail: str) -> ValidationFailed:
    return ValidationFailed(detail, field="url")


def _scheme_of(url: str) -> str | None:
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else None


def load_plugin(url: str, asset: apprise.AppriseAsset) -> tuple[Any, ChatTarget]:
    """Instantiate the Apprise plugin for ``url`` and say what it will contact.

    Details never quote the URL: Apprise URLs carry tokens in every part.
    """
    text = url.strip() if isinstance(url, str) else ""
    if not text:
        raise _invalid("the chat URL is empty")
    if len(text) > _MAX_URL_LENGTH:
        raise _invalid(f"the chat URL is longer than {_MAX_URL_LENGTH} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        raise _invalid("the chat URL contains spaces or control characters")
    if any(ch in _LIST_SEPARATORS for ch in text):
        # Apprise reads "a,b" and "a;b" as lists: of URLs ("json://a/x,json://b/y" is two
        # services to ``Apprise.add``) and of targets (channels, chat ids, topics), and
        # which parts it splits differs per plugin. One destination is one target.
        raise _invalid(
            "the chat URL contains ',' or ';', which Apprise reads as a list of URLs or "
            "targets; register one chat per destination (write a literal comma as %2C)"
        )
    scheme = _scheme_of(text)
    if scheme is None:
        raise _invalid("not an Apprise URL (expected service://…)")
    service = _SERVICES.get(scheme)
    if service is None:
        supported = ", ".join(sorted(SUPPORTED_SCHEMES))
        raise _invalid(f"chat service {scheme!r} is not supported (supported: {supported})")

    load_plugins()
    import apprise  # loaded by load_plugins: a dictionary look-up

    try:
        plugin = apprise.Apprise.instantiate(text, asset=asset)
    except Exception as exc:  # a parser failure in a plugin is a bad URL, never a 500
        raise _invalid(f"not a valid {scheme}:// URL") from exc
    if plugin is None or type(plugin).__name__ != service.plugin:
        raise _invalid(f"not a valid {scheme}:// URL")
    if not plugin.verify_certificate:
        raise _invalid("turning off TLS certificate verification (verify=no) is not allowed")
    plugin.retry = 0  # also makes len(plugin) the plain number of targets
    try:
        targets = len(plugin)
    except Exception as exc:  # a plugin that cannot count its targets cannot be checked
        raise _invalid(f"not a valid {scheme}:// URL") from exc
    if targets != 1:
        # A retry after a partial failure would repeat the message to every target.
        raise _invalid(f"the URL names {targets} targets; register one chat per destination")

    try:
        endpoints, host_from_url = service.endpoints(plugin)
    except AttributeError as exc:  # a plugin shape this module does not know
        raise _invalid(f"not a valid {scheme}:// URL") from exc
    return plugin, ChatTarget(
        service=service.service,
        scheme=scheme,
        endpoints=endpoints,
        host_from_url=host_from_url,
    )


def parse_destination(url: str) -> ChatTarget:
    """Load ``url`` with Apprise; refuse what is not a supported, single-target chat URL.

    Raises ``ValidationFailed(field="url")``. No network I/O (the SSRF check is
    ``check_destination``). Example::

        >>> parse_destination("tgram://123456:abc/789").endpoints
        (ChatEndpoint(host='api.telegram.org', port=None, tls=True),)
    """
    return load_plugin(url, _loaded())[1]


def check_target(
    target: ChatTarget,
    allow_hosts: frozenset[str],
    resolve: Resolver,
    field: str | None = None,
) -> list[Target]:
    """Every host ``target``'s plugin will contact, through the SSRF guard (raises
    ``UnsafeDestination`` for the first refused one; ``OSError`` when a name does not
    resolve)."""
    return [
        check_url(endpoint.origin, allow_hosts=allow_hosts, resolve=resolve, field=field)
        for endpoint in target.endpoints
    ]


def check_destination(
    url: str, *, allow_hosts: frozenset[str], resolve: Resolver | None = None
) -> None:
    """Refuse a chat URL whose plugin would contact a host the SSRF guard refuses.

    Every endpoint of ``parse_destination(url)`` is checked as ``https://host[:port]/``
    (``http://`` for plain-http plugins, which the guard allows only for allow-listed
    hosts). Raises ``ValidationFailed`` (bad URL), ``UnsafeDestination`` (refused host),
    or ``OSError`` when a name does not resolve (a network error, not a verdict).
    ``resolve`` defaults to the system resolver; this call blocks on DNS.
    """
    target = parse_destination(url)
    check_target(
        target,
        frozenset(allow_hosts),
        resolve if resolve is not None else make_resolver(),
        field="url",
    )


def redact(url: str) -> str:
    """The chat URL as it may be shown: scheme and (for self-hosted services) host only.

    ``redact("slack://T000/B000/XXXX") == "slack://…"``;
    ``redact("json://u:pw@127.0.0.1:8080/hook") == "json://127.0.0.1:8080/…"``.
    Never returns tokens, user names, passwords, paths or queries.
    """
    scheme = _scheme_of(url.strip()) if isinstance(url, str) else None
    if scheme is None:
        return "(not an Apprise URL)"
    try:
        target = parse_destination(url)
    except ValidationFailed:
        return f"{scheme}://…"
    if not target.host_from_url:
        return f"{scheme}://…"
    return f"{scheme}://{target.endpoints[0].netloc}/…"
