"""Email: one neutral message per delivery, sent over SMTP to the configured relay.

What a person sees in an inbox (or a lock-screen preview of it) is only the neutral
title and body the dispatcher rendered, a link to ``/n/{notification_id}`` and a footer
that says why they got it and where to change that (DESIGN §2 invariant 11). Details
load after sign-in. Nothing else on :class:`~runbell.channels.base.Outbound` (payload,
target extras, run or tenant ids) is rendered.

The ``Message-ID`` is ``<{identity}@{domain}>``: the delivery's stable identity, so a
retry after an unknown outcome carries the same id and a receiver or mail client can
drop the duplicate. ``List-Unsubscribe`` points at the email preferences page and
``Auto-Submitted: auto-generated`` keeps vacation responders quiet (RFC 3834).

The SMTP conversation is driven step by step (connect, STARTTLS and AUTH; MAIL and
RCPT; DATA) so a failure is classified by *where* it happened, not only by its code:

=======================================  ===============================================
250 after DATA                           ``Sent``; ``provider_message_id`` = Message-ID
connect refused / timeout / greeting 4xx transient: nothing was sent
connection lost before DATA              transient: nothing was sent
AUTH 5xx (e.g. 535)                      permanent, ``operator_alert``
AUTH 4xx (454 temporary failure)         transient
greeting / EHLO / STARTTLS / MAIL 5xx    permanent, ``operator_alert`` (our relay,
                                         certificate or sender is misconfigured)
TLS certificate verification failed      permanent, ``operator_alert``
RCPT 550/551/553, no enhanced code or    permanent, ``gone`` (the mailbox does not exist)
an addressing one (5.1.x)
RCPT 552                                 transient (mailbox full; RFC 5321 4.5.3.1.10
                                         asks clients to treat it like 452)
other 5xx on RCPT or DATA                permanent (e.g. ``550 5.7.1`` policy refusal:
                                         the address may be fine, so it is not ``gone``)
4xx on MAIL, RCPT or DATA                transient
connection lost / read timeout in DATA   ``DeliveryUnknown``: the message may have been
                                         accepted; retry only under the same identity
missing ``target["to"]``, bad deep link  permanent, ``operator_alert`` (a dispatcher bug)
unusable ``target["to"]`` address        permanent (not ``gone``: nothing was refused)
=======================================  ===============================================

A disconnect after the ``DATA`` command but before the server's ``354`` also counts as
unknown: aiosmtplib sends the command and the body as one step, and "maybe delivered"
is the safe side when the retry reuses the same ``Message-ID``.

Nothing here logs. Errors carry the SMTP code and a short excerpt of the server's reply
with the configured password (and its base64 forms) removed; never the message body.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.policy
import hashlib
import re
import ssl
from dataclasses import dataclass, field
from datetime import UTC
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from typing import Any, Final
from urllib.parse import urlsplit

import aiosmtplib
import jinja2

from runbell.channels.base import (
    DeliveryError,
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    TransientDeliveryError,
)

__all__ = ["EXCERPT_CHARS", "EmailChannel", "SmtpConfig", "message_id_for"]

EXCERPT_CHARS: Final = 500
_SUBJECT_MAX_CHARS: Final = 200
_DEFAULT_TITLE: Final = "Runbell notification"
# RFC 5321 reply codes that say "this mailbox does not exist / is not here".
_GONE_RCPT_CODES: Final = frozenset({550, 551, 553})
# Characters kept verbatim in the Message-ID's left part: a safe subset of RFC 5322
# ``atext``. Everything else (and ``=`` itself) is escaped as ``=XX`` so the mapping
# from identity to Message-ID is deterministic and injective.
_MSGID_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+.")
_ENHANCED_CODE: Final = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})(?!\d)")
_LOCAL_PART: Final = re.compile(r"^[!#$%&'*+/=?^_`{|}~.A-Za-z0-9-]+$")
_DOMAIN: Final = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")
_URGENCY_WORDS: Final = {
    "low": "low-priority",
    "normal": "normal",
    "time_sensitive": "time-sensitive",
    "urgent": "urgent",
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
        if not _is_web_url(self.unsubscribe_url):
            raise ValueError("unsubscribe_url must be an absolute http(s) URL")

    @property
    def envelope_sender(self) -> str:
        """The bare address of ``from_address``, used as ``MAIL FROM``."""
        return parseaddr(self.from_address)[1]


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


class _Templates:
    """The two compiled templates; built once per channel, never per message."""

    def __init__(self) -> None:
        loader = jinja2.PackageLoader("runbell.channels", "templates")
        common: dict[str, Any] = {
            "loader": loader,
            "undefined": jinja2.StrictUndefined,
            "keep_trailing_newline": True,
            "trim_blocks": True,
            "lstrip_blocks": True,
        }
        text_env = jinja2.Environment(autoescape=False, **common)  # noqa: S701 - plain text part
        self.text = text_env.get_template("email.txt.j2")
        self.html = jinja2.Environment(autoescape=True, **common).get_template("email.html.j2")


def _build_message(msg: Outbound, config: SmtpConfig, to: str, tpl: _Templates) -> EmailMessage:
    """The complete ``EmailMessage`` for one try of one delivery.

    Deterministic: the same ``msg`` always gives the same bytes (``Date`` comes from
    ``msg.now``, ``Message-ID`` and the MIME boundary from ``msg.identity``), so a retry
    is recognizably the same message and previews match what is sent.
    """
    title = " ".join(msg.title.split())[:_SUBJECT_MAX_CHARS] or _DEFAULT_TITLE
    urgency_word = _URGENCY_WORDS.get(msg.urgency)
    context = {
        "title": title,
        "body_lines": [line.strip() for line in msg.body.splitlines() if line.strip()],
        "deep_link": msg.deep_link,
        "unsubscribe_url": config.unsubscribe_url,
        "urgency_word": urgency_word,
    }
    now = msg.now if msg.now.tzinfo is not None else msg.now.replace(tzinfo=UTC)
    assert config.message_id_domain is not None  # resolved in SmtpConfig.__post_init__

    em = EmailMessage(policy=email.policy.SMTP)
    em["From"] = config.from_address
    em["To"] = to
    em["Subject"] = title
    em["Date"] = format_datetime(now)
    em["Message-ID"] = message_id_for(msg.identity, config.message_id_domain)
    em["List-Unsubscribe"] = f"<{config.unsubscribe_url}>"
    em["Auto-Submitted"] = "auto-generated"
    # Outlook/Exchange ignore Auto-Submitted; this keeps their out-of-office replies away.
    em["X-Auto-Response-Suppress"] = "All"
    if msg.notification_id:
        em["X-Runbell-Notification"] = msg.notification_id
    # Quoted-printable keeps the message 7-bit clean, so no relay needs 8BITMIME.
    em.set_content(tpl.text.render(context), subtype="plain", cte="quoted-printable")
    em.add_alternative(tpl.html.render(context), subtype="html", cte="quoted-printable")
    for part in em.iter_parts():
        del part["MIME-Version"]  # the top level carries it; parts need not repeat it
    # Quoted-printable bodies encode every "=", so this boundary can never occur in them.
    digest = hashlib.sha256(msg.identity.encode()).hexdigest()[:32]
    em.set_boundary(f"==runbell-{digest}==")
    return em


class EmailChannel:
    """Sends one neutral email per :class:`Outbound` through the configured relay.

    ``msg.target`` is ``{"to": "person@example.com"}``; anything else in it is ignored.
    Opens one SMTP session per message: alert mail is rare enough that pooling would
    only add stale-connection failures.
    """

    name = "email"

    def __init__(self, config: SmtpConfig) -> None:
        self.config = config
        self._templates = _Templates()

    def render(self, msg: Outbound) -> EmailMessage:
        """The message :meth:`send` would send, for previews and tests."""
        return _build_message(msg, self.config, self._recipient(msg), self._templates)

    async def send(self, msg: Outbound) -> Sent:
        to = self._recipient(msg)
        if not _is_web_url(msg.deep_link):
            raise PermanentDeliveryError(
                "the deep link is not an absolute http(s) URL", operator_alert=True
            )
        em = _build_message(msg, self.config, to, self._templates)
        message_id = str(em["Message-ID"])
        raw = em.as_bytes()

        cfg = self.config
        smtp = aiosmtplib.SMTP(
            hostname=cfg.host,
            port=cfg.port,
            use_tls=cfg.use_tls,
            start_tls=cfg.starttls,
            validate_certs=cfg.validate_certs,
            username=cfg.username,
            password=cfg.password,
            timeout=cfg.timeout,
            local_hostname=cfg.local_hostname,
        )
        phase = "connect"
        transport: asyncio.BaseTransport | None = None
        try:
            await smtp.connect()  # greeting, EHLO, STARTTLS and AUTH as configured
            transport = smtp.transport  # after STARTTLS: the TLS transport
            phase = "envelope"
            await smtp.mail(cfg.envelope_sender)
            await smtp.rcpt(to)
            if not smtp.is_connected:
                raise aiosmtplib.SMTPServerDisconnected("Connection lost before DATA")
            phase = "data"
            response = await smtp.data(raw)
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:  # OSError: ssl too
            raise self._classify(exc, phase) from exc
        else:
            await self._quit(smtp)
            return Sent(
                status_code=response.code,
                provider_message_id=message_id,
                response_excerpt=self._excerpt(f"{response.code} {response.message}"),
            )
        finally:
            smtp.close()
            if isinstance(transport, asyncio.WriteTransport):
                # The SMTP conversation is over (QUIT answered, or failed). A graceful TLS
                # close would keep the socket until the server's close_notify arrives (up
                # to 30 s in asyncio); like smtplib, hang up now instead.
                transport.abort()

    def _recipient(self, msg: Outbound) -> str:
        to = msg.target.get("to")
        if not isinstance(to, str) or not to:
            raise PermanentDeliveryError(
                'the email target has no "to" address', operator_alert=True
            )
        if not _is_plain_address(to):
            # Not "gone": the stored address may be fine for a future SMTPUTF8 sender.
            raise PermanentDeliveryError("the recipient is not a plain ASCII email address")
        return to

    @staticmethod
    async def _quit(smtp: aiosmtplib.SMTP) -> None:
        """Say goodbye politely; the message is already accepted, so errors don't matter."""
        with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
            await smtp.quit()

    def _classify(self, exc: BaseException, phase: str) -> DeliveryError:
        """Map a failure in ``phase`` (connect, envelope, data) to a typed delivery error."""
        code: int | None = getattr(exc, "code", None)
        reply = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        excerpt = self._excerpt(f"{code} {reply}" if code is not None else reply)
        kw: dict[str, Any] = {"status_code": code, "response_excerpt": excerpt}

        if _cert_verification_failed(exc):
            return PermanentDeliveryError(
                "the SMTP server's TLS certificate failed verification",
                operator_alert=True,
                **kw,
            )
        if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
            if code is not None and 400 <= code < 500:
                return TransientDeliveryError("SMTP authentication failed temporarily", **kw)
            return PermanentDeliveryError(
                "SMTP authentication failed: check the configured credentials",
                operator_alert=True,
                **kw,
            )
        if isinstance(exc, aiosmtplib.SMTPRecipientRefused) and code is not None:
            if code in _GONE_RCPT_CODES and _is_addressing_failure(exc.message):
                return PermanentDeliveryError(
                    "the recipient mailbox does not exist", gone=True, **kw
                )
            if code == 552 or 400 <= code < 500:
                return TransientDeliveryError("the recipient was refused for now", **kw)
            return PermanentDeliveryError("the recipient was refused", **kw)
        if isinstance(exc, aiosmtplib.SMTPResponseException):
            if 400 <= exc.code < 500:
                return TransientDeliveryError(f"the SMTP server deferred ({phase})", **kw)
            if phase == "data":
                return PermanentDeliveryError("the SMTP server rejected the message", **kw)
            # Greeting, EHLO, STARTTLS or MAIL FROM refused: our relay setup is wrong.
            return PermanentDeliveryError(
                f"the SMTP server refused the session ({phase})", operator_alert=True, **kw
            )
        if phase == "data" and isinstance(
            exc, aiosmtplib.SMTPServerDisconnected | aiosmtplib.SMTPTimeoutError | OSError
        ):
            return DeliveryUnknown(
                "the connection ended after the message was sent; it may have been accepted",
                **kw,
            )
        if isinstance(exc, aiosmtplib.SMTPNotSupported) or (
            type(exc) is aiosmtplib.SMTPException and phase == "connect"
        ):
            # Plain SMTPException during connect: no STARTTLS or no AUTH on offer.
            return PermanentDeliveryError(
                "the SMTP server lacks a configured feature (STARTTLS or AUTH)",
                operator_alert=True,
                **kw,
            )
        return TransientDeliveryError(f"could not talk to the SMTP server ({phase})", **kw)

    def _excerpt(self, text: str) -> str:
        """A one-line, bounded server reply with the password (in any form we send) cut."""
        out = " ".join(text.split())
        password = self.config.password
        if password:
            for secret in _secret_forms(self.config.username or "", password):
                out = out.replace(secret, "[redacted]")
        return out[:EXCERPT_CHARS]


def _secret_forms(username: str, password: str) -> list[str]:
    """The password as sent by AUTH PLAIN/LOGIN, in case a server echoes it back."""
    forms = [
        password,
        base64.b64encode(password.encode()).decode(),
        base64.b64encode(f"\0{username}\0{password}".encode()).decode(),
    ]
    return sorted(forms, key=len, reverse=True)


def _cert_verification_failed(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # the cause chain is short; bound it anyway
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _is_addressing_failure(reply: str) -> bool:
    """True unless the reply carries an enhanced status code outside ``x.1.y``.

    ``550 5.1.1`` means "no such user"; ``550 5.7.1`` is a policy refusal of a mailbox
    that may well exist, and must not make Runbell forget the person's address.
    """
    match = _ENHANCED_CODE.match(reply)
    return match is None or match.group(2) == "1"


def _is_plain_address(address: str) -> bool:
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
    if not _is_plain_address(addr):
        return None
    return addr.rpartition("@")[2]


def _is_web_url(url: str) -> bool:
    parts = urlsplit(url)
    return (
        parts.scheme in ("http", "https")
        and bool(parts.netloc)
        and not any(ch.isspace() or ord(ch) < 32 for ch in url)
    )
