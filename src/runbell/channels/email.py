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

One email is not a notification: a person's sign-in links (``event_type`` =
:data:`~runbell.domain.channels.SIGN_IN`, the links in ``msg.payload["links"]``), queued
through the outbox by ``runbell.flows.sessions.request_sign_in`` like every other email.
It is plain text, carries no ``List-Unsubscribe`` (nobody unsubscribes from a link they
asked for), and says the same as it always did (:func:`sign_in_text`).

The payload this channel measures (``payload_size``) is the text part as rendered; one
over ``FACTS["email"].payload_limit_bytes`` is refused before connecting.

Nothing here logs. Errors carry the SMTP code and a short excerpt of the server's reply
with the configured password (and its base64 forms) removed; never the message body.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import ssl
from email.message import EmailMessage
from typing import Any, Final

import aiosmtplib

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
from runbell.channels.email_message import (
    SmtpConfig,
    Templates,
    build_message,
    is_plain_address,
    is_web_url,
    message_id_for,
    sign_in_text,
    smtp_config,
    text_part,
)
from runbell.domain.channels import FACTS

__all__ = [
    "EXCERPT_CHARS",
    "SPEC",
    "EmailChannel",
    "SmtpConfig",
    "message_id_for",
    "sign_in_text",
    "smtp_config",
]

FACTS_EMAIL: Final = FACTS["email"]
EXCERPT_CHARS: Final = 500
# RFC 5321 reply codes that say "this mailbox does not exist / is not here".
_GONE_RCPT_CODES: Final = frozenset({550, 551, 553})
_ENHANCED_CODE: Final = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})(?!\d)")


class EmailChannel:
    """Sends one neutral email per :class:`Outbound` through the configured relay.

    ``msg.target`` is ``{"to": "person@example.com"}``; anything else in it is ignored.
    Opens one SMTP session per message: alert mail is rare enough that pooling would
    only add stale-connection failures.
    """

    name = "email"

    def __init__(self, config: SmtpConfig) -> None:
        self.config = config
        self._templates = Templates()

    def render(self, msg: Outbound) -> EmailMessage:
        """The message :meth:`send` would send, for previews and tests."""
        return build_message(msg, self.config, self._recipient(msg), self._templates)

    def payload_size(self, msg: Outbound) -> int:
        """The bytes of the text part as rendered (UTF-8, before transfer encoding)."""
        return len(text_part(msg, self.config, self._templates).encode("utf-8"))

    async def send(self, msg: Outbound) -> Sent:
        to = self._recipient(msg)
        if not is_web_url(msg.deep_link):
            raise PermanentDeliveryError(
                "the deep link is not an absolute http(s) URL", operator_alert=True
            )
        refuse_oversized(FACTS_EMAIL, self.payload_size(msg))
        em = build_message(msg, self.config, to, self._templates)
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
        if not is_plain_address(to):
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


def _build(setup: Setup) -> EmailChannel | None:
    config = smtp_config(setup.settings, setup.public_url)
    return None if config is None else EmailChannel(config)


SPEC = ChannelSpec(
    facts=FACTS_EMAIL,
    build=_build,
    # The person's address as it is *now* (it may have changed since the row was queued).
    target=lambda found, _open: {"to": found["address"]},
)
