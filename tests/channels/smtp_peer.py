"""A real SMTP server (aiosmtpd) on 127.0.0.1 for channel tests, that can be told what to
answer: a chosen reply to MAIL, RCPT or DATA, hang up after the whole message arrived, or
never answer it. Started by the ``start_smtp`` fixture (``tests/channels/conftest.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import email
import email.policy
import threading
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session

from tests.timeouts import WAIT


class EphemeralController(Controller):
    """A Controller bound to port 0 that can wait until its sessions are over.

    It learns the port the OS picked before its self-test, so no test races another
    process for a "free" port. ``stop_when_idle`` lets every server-side session finish
    (a failed STARTTLS handshake, for one, is noticed by the server only after the client
    has already given up) before the server's loop is torn down; stopping mid-session
    would leave that session's socket unclosed, which ``filterwarnings=error`` reports.
    """

    def __init__(self, handler: Any, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._sessions = 0
        self._idle = threading.Condition()

    def _trigger_server(self) -> None:
        assert isinstance(self.server, asyncio.Server)
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()  # type: ignore[no-untyped-call]

    def factory(self) -> SMTPServer:
        controller = self

        class _TrackedSMTP(SMTPServer):
            async def _handle_client(self) -> None:
                controller._session_started()
                try:
                    await super()._handle_client()
                finally:
                    controller._session_ended()

        return _TrackedSMTP(self.handler, **self.SMTP_kwargs)

    def _session_started(self) -> None:
        with self._idle:
            self._sessions += 1

    def _session_ended(self) -> None:
        with self._idle:
            self._sessions -= 1
            self._idle.notify_all()

    def stop_when_idle(self) -> None:
        with self._idle:
            # An event wait, not a delay: returns as soon as the last session ends.
            self._idle.wait_for(lambda: self._sessions == 0, timeout=WAIT)

        async def settle() -> None:
            # Closing a transport finishes in callbacks a few loop turns later.
            for _ in range(5):
                await asyncio.sleep(0)

        asyncio.run_coroutine_threadsafe(settle(), self.loop).result(timeout=WAIT)
        self.stop()


@dataclasses.dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    raw: bytes
    over_tls: bool
    authenticated: bool

    @property
    def message(self) -> EmailMessage:
        parsed = email.message_from_bytes(self.raw, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


class Recorder:
    """aiosmtpd handler: stores every message and answers what the test asks for."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.mail_reply: str | None = None
        self.rcpt_reply: str | None = None
        self.data_reply: str | None = None
        self.drop_after_data = False
        self.silent_after_data = False
        self.rcpts = 0  # RCPT commands seen, answered as told or not

    async def handle_MAIL(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        address: str,
        options: list[str],
    ) -> str:
        if self.mail_reply:
            return self.mail_reply
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        address: str,
        options: list[str],
    ) -> str:
        self.rcpts += 1
        if self.rcpt_reply:
            return self.rcpt_reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        assert envelope.mail_from is not None and envelope.original_content is not None
        assert server.transport is not None
        self.received.append(
            Received(
                mail_from=envelope.mail_from,
                rcpt_tos=list(envelope.rcpt_tos),
                raw=envelope.original_content,
                # Covers implicit TLS too (aiosmtpd sets session.ssl only after STARTTLS).
                over_tls=server.transport.get_extra_info("ssl_object") is not None,
                authenticated=bool(session.authenticated),
            )
        )
        if self.drop_after_data:
            # The whole message is in; hang up instead of answering 250.
            server.transport.close()
            return "250 never sent"
        if self.silent_after_data:
            await asyncio.get_running_loop().create_future()  # cancelled by Controller.stop
        return self.data_reply or "250 2.0.0 Ok: queued as RB123"
