"""The sign-in email: one neutral message with a one-time link per workspace.

Sent after the response (a background task), so the login page answers at the same
speed whether or not the address belongs to a member. A failure is logged without the
address or the link: the person just asks again.
"""

from __future__ import annotations

import email.policy
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

import aiosmtplib
import structlog

from runbell.channels.email import SmtpConfig

log = structlog.get_logger(__name__)


def sign_in_message(config: SmtpConfig, to: str, links: list[tuple[str, str]]) -> EmailMessage:
    """``links`` = [(workspace name, absolute sign-in URL)]."""
    lines = ["Someone (hopefully you) asked to sign in to Runbell with this address.", ""]
    if len(links) == 1:
        lines += ["Open this link to sign in. It works once, for 15 minutes:", links[0][1]]
    else:
        lines.append("Open the link for the workspace you want. Each works once, for 15 minutes:")
        for name, url in links:
            lines += ["", f"{name}:", url]
    lines += ["", "If you did not ask for this, ignore this email; nobody can sign in without it."]
    em = EmailMessage(policy=email.policy.SMTP)
    em["From"] = config.from_address
    em["To"] = to
    em["Subject"] = "Your Runbell sign-in link"
    em["Date"] = format_datetime(datetime.now(UTC))
    em["Message-ID"] = make_msgid(domain=config.message_id_domain)
    em["Auto-Submitted"] = "auto-generated"
    em["X-Auto-Response-Suppress"] = "All"
    em.set_content("\n".join(lines) + "\n", cte="quoted-printable")
    return em


async def send_sign_in(config: SmtpConfig, to: str, links: list[tuple[str, str]]) -> None:
    try:
        await aiosmtplib.send(
            sign_in_message(config, to, links),
            hostname=config.host,
            port=config.port,
            use_tls=config.use_tls,
            start_tls=config.starttls,
            validate_certs=config.validate_certs,
            username=config.username,
            password=config.password,
            timeout=config.timeout,
            local_hostname=config.local_hostname,
        )
    except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
        log.warning("web.sign_in_mail_failed", error=type(exc).__name__)
