"""The email channel against a real SMTP server (aiosmtpd) on 127.0.0.1.

Each test starts its own aiosmtpd ``Controller`` on an ephemeral port with a handler that
records what arrived and can be told to answer a chosen SMTP reply, drop the connection
after DATA, or never answer. What is asserted is what a person or an operator would
notice: the mail in the inbox, what it shows, and whether Runbell retries, gives up,
forgets the address, alerts the operator or treats the outcome as unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import email
import email.policy
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from runbell.channels.base import (
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    TransientDeliveryError,
)
from runbell.channels.email import EmailChannel, SmtpConfig, message_id_for
from tests.channels.smtp_peer import Recorder

SECRET = "SECRET-PLANTED-9"
PASSWORD = "hunter2-SMTP-PASSWORD"
UNSUBSCRIBE = "https://runbell.example/settings#email"
DEEP_LINK = "https://runbell.example/n/ntf_01JABCDEF"
NOW = dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def server_tls(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runbell-test-smtp")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
        .not_valid_after(dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    folder: Path = tmp_path_factory.mktemp("smtp-tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_path, key_path)
    return ctx


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[bytes], Awaitable[int]]]:
    """Starts a TCP server that sends ``greeting`` (possibly nothing) and then stays
    silent: for a refusing or mute SMTP greeting, which aiosmtpd cannot be told to do."""
    servers: list[asyncio.Server] = []
    writers: list[asyncio.StreamWriter] = []

    async def start(greeting: bytes) -> int:
        async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.append(writer)
            writer.write(greeting)
            await writer.drain()

        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        servers.append(server)
        port: int = server.sockets[0].getsockname()[1]
        return port

    yield start
    for writer in writers:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    for server in servers:
        server.close()
        await server.wait_closed()


def _config(port: int, **overrides: Any) -> SmtpConfig:
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "from_address": "Runbell <runbell@runbell.example>",
        "unsubscribe_url": UNSUBSCRIBE,
        "local_hostname": "runbell.test",
        "timeout": 10,
    }
    values.update(overrides)
    return SmtpConfig(**values)


def _outbound(**overrides: Any) -> Outbound:
    values: dict[str, Any] = {
        "delivery_id": "dlv_01JEMAIL",
        "tenant_id": "ten_1",
        "channel": "email",
        "destination": "dst_email_1",
        "identity": "dlv_01JEMAIL",
        "attempt_no": 1,
        "now": NOW,
        "urgency": "time_sensitive",
        "title": "A run needs your input",
        "body": "Open Runbell to see what it is waiting for.",
        "deep_link": DEEP_LINK,
        "notification_id": "ntf_01JABCDEF",
        "run_id": "run_1",
        "target": {"to": "person@example.com"},
    }
    values.update(overrides)
    return Outbound(**values)


def _parts(message: EmailMessage) -> tuple[str, str]:
    plain = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert plain is not None and html is not None
    return plain.get_content(), html.get_content()


# --- what arrives ------------------------------------------------------------------------


async def test_message_arrives_neutral_with_both_parts_and_list_headers(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder, port = start_smtp()
    sent = await EmailChannel(_config(port)).send(_outbound())

    [got] = recorder.received
    assert got.mail_from == "runbell@runbell.example"
    assert got.rcpt_tos == ["person@example.com"]
    msg = got.message
    assert msg["Subject"] == "A run needs your input"
    assert msg["From"] == "Runbell <runbell@runbell.example>"
    assert msg["To"] == "person@example.com"
    assert msg["Message-ID"] == "<dlv_01JEMAIL@runbell.example>"
    assert email.utils.parsedate_to_datetime(msg["Date"]) == NOW
    assert msg["List-Unsubscribe"] == f"<{UNSUBSCRIBE}>"
    assert msg["Auto-Submitted"] == "auto-generated"
    assert msg["X-Runbell-Notification"] == "ntf_01JABCDEF"
    assert msg.get_content_type() == "multipart/alternative"
    plain, html = _parts(msg)
    for part in (plain, html):
        assert DEEP_LINK in part
        assert "Open in Runbell" in part
        assert "Open Runbell to see what it is waiting for." in part
        assert UNSUBSCRIBE in part
        assert "time-sensitive notifications" in part
    assert f'href="{DEEP_LINK}"' in html
    assert sent == Sent(
        status_code=250,
        provider_message_id="<dlv_01JEMAIL@runbell.example>",
        response_excerpt="250 2.0.0 Ok: queued as RB123",
    )


async def test_retry_of_the_same_delivery_keeps_the_message_id(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder, port = start_smtp()
    channel = EmailChannel(_config(port, message_id_domain="mail.runbell.example"))
    first = _outbound()
    retry = dataclasses.replace(first, attempt_no=2, now=NOW + dt.timedelta(minutes=5))

    await channel.send(first)
    await channel.send(retry)
    await channel.send(dataclasses.replace(first, identity="dlv_OTHER"))

    ids = [r.message["Message-ID"] for r in recorder.received]
    assert ids == [
        "<dlv_01JEMAIL@mail.runbell.example>",
        "<dlv_01JEMAIL@mail.runbell.example>",
        "<dlv_OTHER@mail.runbell.example>",
    ]


async def test_html_part_escapes_markup_in_the_title(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder, port = start_smtp()
    title = 'Run <script>alert("x")</script> & co'
    await EmailChannel(_config(port)).send(_outbound(title=title, body="<b>bold?</b>"))

    msg = recorder.received[0].message
    assert msg["Subject"] == title
    plain, html = _parts(msg)
    assert "<script>" not in html and "<b>bold?</b>" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; co" in html
    assert "&lt;b&gt;bold?&lt;/b&gt;" in html
    assert title in plain  # plain text shows it literally; nothing there executes


async def test_a_newline_in_the_title_cannot_inject_headers(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder, port = start_smtp()
    await EmailChannel(_config(port)).send(
        _outbound(title="Needs input\r\nBcc: attacker@example.net")
    )

    got = recorder.received[0]
    assert got.rcpt_tos == ["person@example.com"]
    assert got.message["Bcc"] is None
    assert got.message["Subject"] == "Needs input Bcc: attacker@example.net"


async def test_fields_that_are_not_rendered_never_reach_the_message(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder, port = start_smtp()
    await EmailChannel(_config(port)).send(
        _outbound(
            payload={"details": SECRET, "arguments": {"token": SECRET}},
            target={"to": "person@example.com", "note": SECRET},
            event_type=f"run.{SECRET}",
            collapse_key=SECRET,
            run_id=SECRET,
            tenant_id=SECRET,
            delivery_id=SECRET,
        )
    )

    got = recorder.received[0]
    assert SECRET.encode() not in got.raw
    plain, html = _parts(got.message)  # decoded too: QP soft breaks could split the raw one
    assert SECRET not in plain and SECRET not in html
    assert all(SECRET not in str(value) for value in got.message.values())


async def test_implicit_tls_delivers(
    start_smtp: Callable[..., tuple[Recorder, int]], server_tls: ssl.SSLContext
) -> None:
    recorder, port = start_smtp(ssl_context=server_tls)
    await EmailChannel(_config(port, use_tls=True, validate_certs=False)).send(_outbound())
    assert [r.over_tls for r in recorder.received] == [True]


async def test_starttls_delivers_over_tls(
    start_smtp: Callable[..., tuple[Recorder, int]], server_tls: ssl.SSLContext
) -> None:
    recorder, port = start_smtp(tls_context=server_tls, require_starttls=True)
    await EmailChannel(_config(port, starttls=True, validate_certs=False)).send(_outbound())
    assert [r.over_tls for r in recorder.received] == [True]


@pytest.mark.parametrize("mode", ["starttls", "use_tls"])
async def test_the_certificate_is_checked_by_default(
    start_smtp: Callable[..., tuple[Recorder, int]], server_tls: ssl.SSLContext, mode: str
) -> None:
    if mode == "starttls":
        recorder, port = start_smtp(tls_context=server_tls, require_starttls=True)
    else:
        recorder, port = start_smtp(ssl_context=server_tls)
    with pytest.raises(PermanentDeliveryError) as caught:
        await EmailChannel(_config(port, **{mode: True})).send(_outbound())
    assert caught.value.operator_alert and not caught.value.gone
    assert "certificate" in caught.value.detail  # tells the operator what to fix
    assert recorder.received == []


async def test_plaintext_to_a_server_that_requires_starttls_alerts_the_operator(
    start_smtp: Callable[..., tuple[Recorder, int]], server_tls: ssl.SSLContext
) -> None:
    _, port = start_smtp(tls_context=server_tls, require_starttls=True)
    with pytest.raises(PermanentDeliveryError) as caught:
        await EmailChannel(_config(port)).send(_outbound())
    assert caught.value.operator_alert
    assert caught.value.status_code == 530


# aiosmtpd warns when AUTH is required without TLS; on loopback that is what we want.
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
async def test_authenticated_session_delivers(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    def authenticator(
        server: SMTPServer, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data == (b"runbell", PASSWORD.encode())
        return AuthResult(success=ok, handled=False)

    recorder, port = start_smtp(
        auth_required=True, auth_require_tls=False, authenticator=authenticator
    )
    await EmailChannel(_config(port, username="runbell", password=PASSWORD)).send(_outbound())
    assert [r.authenticated for r in recorder.received] == [True]


# --- what goes wrong ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error", "gone"),
    [
        ("550 5.1.1 <person@example.com>: no such user", PermanentDeliveryError, True),
        ("551 5.1.6 user has moved", PermanentDeliveryError, True),
        ("553 5.1.3 bad destination mailbox address syntax", PermanentDeliveryError, True),
        ("550 no such mailbox", PermanentDeliveryError, True),
        ("550 5.7.1 rejected by recipient policy", PermanentDeliveryError, False),
        ("554 5.7.1 relay access denied", PermanentDeliveryError, False),
        ("552 5.2.2 mailbox full", TransientDeliveryError, None),
        ("451 4.3.0 try later", TransientDeliveryError, None),
        ("450 4.2.1 mailbox busy", TransientDeliveryError, None),
    ],
)
async def test_recipient_refusal(
    start_smtp: Callable[..., tuple[Recorder, int]],
    reply: str,
    error: type[Exception],
    gone: bool | None,
) -> None:
    recorder = Recorder()
    recorder.rcpt_reply = reply
    _, port = start_smtp(recorder)

    with pytest.raises(error) as caught:
        await EmailChannel(_config(port)).send(_outbound())

    exc = caught.value
    assert isinstance(exc, TransientDeliveryError | PermanentDeliveryError)
    assert exc.status_code == int(reply[:3])
    assert exc.response_excerpt == reply
    if gone is not None:
        assert isinstance(exc, PermanentDeliveryError)
        assert exc.gone is gone and not exc.operator_alert
    assert recorder.received == []


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("554 5.7.1 message rejected as spam", PermanentDeliveryError),
        ("552 5.3.4 message too big", PermanentDeliveryError),
        ("451 4.3.0 queue full, try later", TransientDeliveryError),
    ],
)
async def test_message_refusal_after_data(
    start_smtp: Callable[..., tuple[Recorder, int]], reply: str, error: type[Exception]
) -> None:
    recorder = Recorder()
    recorder.data_reply = reply
    _, port = start_smtp(recorder)

    with pytest.raises(error) as caught:
        await EmailChannel(_config(port)).send(_outbound())

    exc = caught.value
    assert isinstance(exc, TransientDeliveryError | PermanentDeliveryError)
    assert exc.status_code == int(reply[:3])
    if isinstance(exc, PermanentDeliveryError):
        assert not exc.gone and not exc.operator_alert


async def test_sender_refused_alerts_the_operator(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder = Recorder()
    recorder.mail_reply = "553 5.7.1 sender address not owned by this user"
    _, port = start_smtp(recorder)

    with pytest.raises(PermanentDeliveryError) as caught:
        await EmailChannel(_config(port)).send(_outbound())
    assert caught.value.operator_alert and not caught.value.gone
    assert caught.value.status_code == 553


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")  # loopback test
async def test_rejected_credentials_alert_the_operator_without_leaking_the_password(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder, port = start_smtp(
        auth_required=True,
        auth_require_tls=False,
        # handled=False makes aiosmtpd answer 535 (its default, True, answers nothing).
        authenticator=lambda *_: AuthResult(success=False, handled=False),
    )

    with pytest.raises(PermanentDeliveryError) as caught:
        await EmailChannel(_config(port, username="runbell", password=PASSWORD)).send(_outbound())

    exc = caught.value
    assert exc.operator_alert and not exc.gone
    assert exc.status_code == 535
    rendered = " ".join(
        [str(exc), exc.detail, repr(exc.extra), exc.response_excerpt or "", repr(exc.__cause__)]
    )
    assert PASSWORD not in rendered
    assert recorder.received == []


async def test_closed_port_is_transient() -> None:
    # A bound socket that is not listening refuses connections, and holding it keeps the
    # port from being reused by anything else while the test runs.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        with pytest.raises(TransientDeliveryError) as caught:
            await EmailChannel(_config(port)).send(_outbound())
    assert caught.value.status_code is None
    assert caught.value.response_excerpt


async def test_no_greeting_within_the_timeout_is_transient(
    raw_server: Callable[[bytes], Awaitable[int]],
) -> None:
    port = await raw_server(b"")
    with pytest.raises(TransientDeliveryError) as caught:
        await EmailChannel(_config(port, timeout=0.5)).send(_outbound())
    assert caught.value.status_code is None


@pytest.mark.parametrize(
    ("greeting", "error", "operator_alert"),
    [
        (b"421 4.3.2 service not available, try later\r\n", TransientDeliveryError, None),
        (b"554 5.7.1 your address is blocked here\r\n", PermanentDeliveryError, True),
    ],
)
async def test_refusing_greeting(
    raw_server: Callable[[bytes], Awaitable[int]],
    greeting: bytes,
    error: type[Exception],
    operator_alert: bool | None,
) -> None:
    port = await raw_server(greeting)
    with pytest.raises(error) as caught:
        await EmailChannel(_config(port)).send(_outbound())
    exc = caught.value
    assert isinstance(exc, TransientDeliveryError | PermanentDeliveryError)
    assert exc.status_code == int(greeting[:3])
    if operator_alert is not None:
        assert isinstance(exc, PermanentDeliveryError) and exc.operator_alert


async def test_connection_dropped_after_data_is_unknown(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder = Recorder()
    recorder.drop_after_data = True
    _, port = start_smtp(recorder)

    with pytest.raises(DeliveryUnknown) as caught:
        await EmailChannel(_config(port)).send(_outbound())

    # It really may have been delivered: the server holds the whole message.
    assert len(recorder.received) == 1
    assert recorder.received[0].message["Message-ID"] == "<dlv_01JEMAIL@runbell.example>"
    assert caught.value.status_code is None


async def test_no_reply_after_data_within_the_timeout_is_unknown(
    start_smtp: Callable[..., tuple[Recorder, int]],
) -> None:
    recorder = Recorder()
    recorder.silent_after_data = True
    _, port = start_smtp(recorder)

    with pytest.raises(DeliveryUnknown):
        await EmailChannel(_config(port, timeout=0.5)).send(_outbound())
    assert len(recorder.received) == 1


@pytest.mark.parametrize(
    ("target", "operator_alert"),
    [
        ({}, True),
        ({"to": 42}, True),
        ({"to": "not-an-address"}, False),
        ({"to": "person@example.com\r\nRCPT TO:<x@y>"}, False),
        ({"to": "pérson@example.com"}, False),
    ],
)
async def test_unusable_target_is_permanent_and_nothing_is_sent(
    start_smtp: Callable[..., tuple[Recorder, int]],
    target: dict[str, Any],
    operator_alert: bool,
) -> None:
    recorder, port = start_smtp()
    with pytest.raises(PermanentDeliveryError) as caught:
        await EmailChannel(_config(port)).send(_outbound(target=target))
    assert caught.value.operator_alert is operator_alert and not caught.value.gone
    assert recorder.received == []


# --- configuration and ids ---------------------------------------------------------------


def test_config_rejects_inconsistent_settings() -> None:
    with pytest.raises(ValueError, match="exclusive"):
        _config(25, starttls=True, use_tls=True)
    with pytest.raises(ValueError, match="together"):
        _config(25, username="runbell")
    with pytest.raises(ValueError, match="from_address"):
        _config(25, from_address="Runbell")
    with pytest.raises(ValueError, match="unsubscribe_url"):
        _config(25, unsubscribe_url="/settings#email")


def test_config_defaults_and_never_shows_the_password() -> None:
    config = SmtpConfig(
        host="smtp.example.com",
        from_address="Runbell <runbell@mail.example.com>",
        unsubscribe_url=UNSUBSCRIBE,
        username="runbell",
        password=PASSWORD,
    )
    assert (config.port, config.timeout, config.validate_certs) == (25, 15.0, True)
    assert config.message_id_domain == "mail.example.com"
    assert PASSWORD not in repr(config)


def test_rendering_is_deterministic_for_the_same_delivery() -> None:
    channel = EmailChannel(_config(25))
    first = channel.render(_outbound()).as_bytes()
    assert channel.render(_outbound(attempt_no=2)).as_bytes() == first
    assert channel.render(_outbound(identity="dlv_OTHER")).as_bytes() != first


def test_message_id_is_stable_and_always_valid() -> None:
    assert message_id_for("dlv_01J.x-y+z", "d.example") == "<dlv_01J.x-y+z@d.example>"
    odd = message_id_for("a b/c=é>", "d.example")
    assert odd == "<a=20b=2Fc=3D=C3=A9=3E@d.example>"
    assert message_id_for("a b/c=é>", "d.example") == odd
    # distinct identities never collide, even when one looks like another's escape
    assert message_id_for("a=20b", "d") != message_id_for("a b", "d")
    assert message_id_for(".lead", "d") == "<=2Elead@d>"
