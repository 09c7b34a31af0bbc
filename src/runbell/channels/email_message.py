"""The email itself: the relay's configuration (:class:`SmtpConfig`), and each message as
it is rendered — a neutral notification (text and HTML parts from the templates) or a
person's sign-in links (plain text, :func:`sign_in_text`) — deterministic for a delivery
(``Date`` from ``msg.now``, ``Message-ID`` and the MIME boundary from ``msg.identity``).

Sent by ``runbell.channels.email``, which owns the SMTP conversation.
"""

from __future__ import annotations

import email.policy
import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from typing import Any, Final
from urllib.parse import urlsplit

import jinja2

from runbell import i18n
from runbell.channels.base import Outbound, PermanentDeliveryError
from runbell.config import Settings
from runbell.domain.channels import SIGN_IN
from runbell.i18n import N_, _

__all__ = [
    "SIGN_IN_SUBJECT",
    "SmtpConfig",
    "Templates",
    "build_message",
    "is_plain_address",
    "is_web_url",
    "message_id_for",
    "sign_in_text",
    "smtp_config",
    "text_part",
]

SIGN_IN_SUBJECT: Final = N_("Your Runbell sign-in link")
_SUBJECT_MAX_CHARS: Final = 200
_DEFAULT_TITLE: Final = N_("Runbell notification")
# Characters kept verbatim in the Message-ID's left part: a safe subset of RFC 5322
# ``atext``. Everything else (and ``=`` itself) is escaped as ``=XX`` so the mapping
# from identity to Message-ID is deterministic and injective.
_MSGID_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+.")
_LOCAL_PART: Final = re.compile(r"^[!#$%&'*+/=?^_`{|}~.A-Za-z0-9-]+$")
_DOMAIN: Final = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")
_URGENCY_WORDS: Final = {
    "low": N_("low-priority"),
    "normal": N_("normal"),
    "time_sensitive": N_("time-sensitive"),
    "urgent": N_("urgent"),
}


@dataclass(frozen=True, kw_only=True)
class SmtpConfig:
    """How to reach the SMTP relay and what every message says about its sender.

    ``starttls`` upgrades a plain connection (submission, port 587); ``use_tls`` is
    implicit TLS (port 465). With neither, the session stays plaintext even if the
    server offers STARTTLS: opportunistic upgrades that may fail certificate checks
    make delivery depend on what the relay happens to advertise. ``username`` and
    ``password`` go together. ``message_id_domain`` defaults to the domain of
    ``from_address``. ``unsubscribe_url`` is the email preferences page, shown in the
    footer and sent as ``List-Unsubscribe``. Raises ``ValueError`` when inconsistent,
    so a bad configuration fails at startup rather than on the first alert.

    Example::

        SmtpConfig(host="smtp.example.com", port=587, starttls=True,
                   username="runbell", password=secret,
                   from_address="Runbell <runbell@example.com>",
                   unsubscribe_url=f"{public_url}/settings#email")
    """

    host: str
    from_address: str
    unsubscribe_url: str
    port: int = 25
    starttls: bool = False
    use_tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 15.0
    message_id_domain: str | None = None
    validate_certs: bool = True
    local_hostname: str | None = None  # EHLO name; default: this host's FQDN

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("SMTP host is empty")
        if not 0 < self.port < 65536:
            raise ValueError(f"SMTP port {self.port} is out of range")
        if self.starttls and self.use_tls:
            raise ValueError("starttls and use_tls are exclusive: pick one")
        if (self.username is None) != (self.password is None):
            raise ValueError("SMTP username and password must be set together")
        if self.timeout <= 0:
            raise ValueError("SMTP timeout must be positive")
        domain = _domain_of(self.from_address)
        if domain is None:
            raise ValueError("from_address must contain an address like runbell@example.com")
        msgid_domain = self.message_id_domain or domain
        if not _DOMAIN.fullmatch(msgid_domain) or ".." in msgid_domain:
            raise ValueError("message_id_domain is not a plain domain name")
        object.__setattr__(self, "message_id_domain", msgid_domain)
        if not is_web_url(self.unsubscribe_url):
            raise ValueError("unsubscribe_url must be an absolute http(s) URL")

    @property
    def envelope_sender(self) -> str:
        """The bare address of ``from_address``, used as ``MAIL FROM``."""
        return parseaddr(self.from_address)[1]


def smtp_config(settings: Settings, public_url: str) -> SmtpConfig | None:
    """The SMTP relay the settings name, or None when none is set (email is then off).
    Raises ``ValueError`` for an inconsistent configuration."""
    if not settings.smtp_host:
        return None
    return SmtpConfig(
        host=settings.smtp_host,
        port=settings.smtp_port,
        starttls=settings.smtp_starttls,
        use_tls=settings.smtp_tls,
        username=settings.smtp_username,
        password=settings.smtp_password,
        from_address=settings.smtp_from,
        unsubscribe_url=f"{public_url}/settings#email",
        validate_certs=settings.smtp_validate_certs,
        timeout=settings.outbound_timeout_s,
    )


def sign_in_text(links: list[tuple[str, str]]) -> str:
    """The sign-in email's text; ``links`` = [(workspace name, absolute sign-in URL)], in
    the current language (:mod:`runbell.i18n`)."""
    lines = [_("Someone (hopefully you) asked to sign in to Runbell with this address."), ""]
    if len(links) == 1:
        lines += [_("Open this link to sign in. It works once, for 15 minutes:"), links[0][1]]
    else:
        lines.append(
            _("Open the link for the workspace you want. Each works once, for 15 minutes:")
        )
        for name, url in links:
            lines += ["", f"{name}:", url]
    lines += [
        "",
        _("If you did not ask for this, ignore this email; nobody can sign in without it."),
    ]
    return "\n".join(lines) + "\n"


def _sign_in_links(msg: Outbound) -> list[tuple[str, str]]:
    raw = (msg.payload or {}).get("links")
    if (
        not isinstance(raw, list)
        or not raw
        or not all(
            isinstance(pair, list | tuple)
            and len(pair) == 2
            and all(isinstance(part, str) for part in pair)
            for pair in raw
        )
    ):
        raise PermanentDeliveryError("the sign-in email has no links", operator_alert=True)
    return [(str(name), str(url)) for name, url in raw]


def message_id_for(identity: str, domain: str) -> str:
    """The ``Message-ID`` header value for a delivery identity: ``<identity@domain>``.

    Identities made of letters, digits and ``-_+.`` appear verbatim; any other
    character is escaped as ``=XX`` per UTF-8 byte, so the result is always a valid
    msg-id and the same identity always gives the same id.
    """
    left = "".join(
        ch if ch in _MSGID_SAFE else "".join(f"={b:02X}" for b in ch.encode()) for ch in identity
    )
    if not left or left.startswith(".") or left.endswith(".") or ".." in left:
        left = left.replace(".", "=2E")
    if not left:
        left = "=00"  # an empty identity is a dispatcher bug; still emit a valid id
    return f"<{left}@{domain}>"


class Templates:
    """The two compiled templates; built once per channel, never per message."""

    def __init__(self) -> None:
        loader = jinja2.PackageLoader("runbell.channels", "templates")
        common: dict[str, Any] = {
            "loader": loader,
            "undefined": jinja2.StrictUndefined,
            "keep_trailing_newline": True,
            "trim_blocks": True,
            "lstrip_blocks": True,
            "extensions": ["jinja2.ext.i18n"],
        }
        text_env = jinja2.Environment(autoescape=False, **common)  # noqa: S701 - plain text part
        html_env = jinja2.Environment(autoescape=True, **common)
        for env in (text_env, html_env):
            # Worded in the recipient's language: build_message sets it from msg.locale.
            env.policies["ext.i18n.trimmed"] = True
            env.install_gettext_callables(  # type: ignore[attr-defined]
                i18n.gettext, i18n.ngettext, newstyle=True
            )
        self.text = text_env.get_template("email.txt.j2")
        self.html = html_env.get_template("email.html.j2")


def _context(msg: Outbound, config: SmtpConfig) -> dict[str, Any]:
    word = _URGENCY_WORDS.get(msg.urgency)
    return {
        "title": " ".join(msg.title.split())[:_SUBJECT_MAX_CHARS] or _(_DEFAULT_TITLE),
        "body_lines": [line.strip() for line in msg.body.splitlines() if line.strip()],
        "deep_link": msg.deep_link,
        "unsubscribe_url": config.unsubscribe_url,
        "urgency_word": _(word) if word else None,
        "lang": i18n.current(),
    }


def text_part(msg: Outbound, config: SmtpConfig, tpl: Templates) -> str:
    """The plain-text part: what the person reads, and what counts as the payload."""
    with i18n.using(msg.locale):
        if msg.event_type == SIGN_IN:
            return sign_in_text(_sign_in_links(msg))
        return str(tpl.text.render(_context(msg, config)))


def build_message(msg: Outbound, config: SmtpConfig, to: str, tpl: Templates) -> EmailMessage:
    """The complete ``EmailMessage`` for one try of one delivery.

    Deterministic: the same ``msg`` always gives the same bytes (``Date`` comes from
    ``msg.now``, ``Message-ID`` and the MIME boundary from ``msg.identity``), so a retry
    is recognizably the same message and previews match what is sent.
    """
    with i18n.using(msg.locale):
        return _build_message(msg, config, to, tpl)


def _build_message(msg: Outbound, config: SmtpConfig, to: str, tpl: Templates) -> EmailMessage:
    sign_in = msg.event_type == SIGN_IN
    context = _context(msg, config)
    now = msg.now if msg.now.tzinfo is not None else msg.now.replace(tzinfo=UTC)
    assert config.message_id_domain is not None  # resolved in SmtpConfig.__post_init__

    em = EmailMessage(policy=email.policy.SMTP)
    em["From"] = config.from_address
    em["To"] = to
    em["Subject"] = _(SIGN_IN_SUBJECT) if sign_in else context["title"]
    em["Date"] = format_datetime(now)
    em["Message-ID"] = message_id_for(msg.identity, config.message_id_domain)
    if not sign_in:
        em["List-Unsubscribe"] = f"<{config.unsubscribe_url}>"
    em["Auto-Submitted"] = "auto-generated"
    # Outlook/Exchange ignore Auto-Submitted; this keeps their out-of-office replies away.
    em["X-Auto-Response-Suppress"] = "All"
    if msg.notification_id:
        em["X-Runbell-Notification"] = msg.notification_id
    # Quoted-printable keeps the message 7-bit clean, so no relay needs 8BITMIME.
    em.set_content(text_part(msg, config, tpl), subtype="plain", cte="quoted-printable")
    if sign_in:
        return em  # plain text, as sign-in mail has always been
    em.add_alternative(tpl.html.render(context), subtype="html", cte="quoted-printable")
    for part in em.iter_parts():
        del part["MIME-Version"]  # the top level carries it; parts need not repeat it
    # Quoted-printable bodies encode every "=", so this boundary can never occur in them.
    digest = hashlib.sha256(msg.identity.encode()).hexdigest()[:32]
    em.set_boundary(f"==runbell-{digest}==")
    return em


def is_plain_address(address: str) -> bool:
    local, at, domain = address.rpartition("@")
    return bool(
        at
        and _LOCAL_PART.fullmatch(local)
        and _DOMAIN.fullmatch(domain)
        and "." not in (local[0], local[-1])
        and ".." not in address
    )


def _domain_of(address: str) -> str | None:
    addr = parseaddr(address)[1]
    if not is_plain_address(addr):
        return None
    return addr.rpartition("@")[2]


def is_web_url(url: str) -> bool:
    parts = urlsplit(url)
    return (
        parts.scheme in ("http", "https")
        and bool(parts.netloc)
        and not any(ch.isspace() or ord(ch) < 32 for ch in url)
    )
