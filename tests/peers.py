"""Real local peers for delivery tests, and a driver for the delivery worker.

Every peer listens on 127.0.0.1 (an ephemeral port) and records what it was sent, so a
test asserts what a receiver would notice:

* :class:`WebhookReceiver` verifies each request with the reference ``standardwebhooks``
  library against every secret it knows (a tenant's receiver), and answers scripted
  statuses — or, scripted with :data:`DROP` / :data:`HANG`, reads the request and hangs
  up without a word, or never answers;
* :class:`ChatReceiver` is an Apprise ``json://`` endpoint;
* :class:`SmtpPeer` is an aiosmtpd server that can be told to defer (451);
* web push uses ``tests.channels.push_receiver.PushReceiver`` (RFC 8030 + VAPID + aes128gcm).

:class:`Dispatcher` drives ``runbell.dispatch.worker.Worker.run_once`` on one private event
loop under the test's frozen clock, so retries happen by moving the clock, never by
sleeping.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import email
import email.policy
import json
import random
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from runbell.channels.base import Channel
from runbell.dispatch.wiring import build_channels
from runbell.dispatch.worker import Worker
from runbell.flows.context import Core
from tests.timeouts import WAIT

# --- plain HTTP peers ----------------------------------------------------------------

#: Scripted answers that are not a status: read the whole request, then close the
#: connection without answering (the sender cannot know whether it was acted on), or
#: answer nothing until the peer stops (a read timeout).
DROP = -1
HANG = -2


@dataclass
class HttpRequest:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    status: int  # what the peer answered
    # webhook receivers only: indexes of the known secrets whose signature matched at the
    # message's own timestamp, and those that passed ``Webhook.verify`` in full (which
    # also insists the timestamp is within 5 minutes of the wall clock)
    signed_by: list[int] = field(default_factory=list)
    verified_by: list[int] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    peer: HttpPeer

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        with self.peer.lock:
            self.peer.connections += 1
        return conn, addr


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        peer = self.server.peer
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = HttpRequest(self.path, headers, body, 0)
        status, extra = peer.answer(request)
        request.status = status
        with peer.lock:
            peer.requests.append(request)
        if status in (DROP, HANG):
            if status == HANG:
                peer.released.wait(WAIT)  # until the peer stops, bounded
            self.close_connection = True
            return
        data = b"receiver says %d" % status
        self.send_response(status)
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_PUT = do_POST

    def log_message(self, format: str, *args: object) -> None:
        pass


class HttpPeer:
    """A threaded HTTP server that records every request and answers scripted statuses
    (``script`` first, then ``default_status``); ``connections`` counts accepted TCP
    connections, so "refused before any connection" is observed at the peer."""

    def __init__(self, default_status: int = 200) -> None:
        self.default_status = default_status
        self.script: list[tuple[int, dict[str, str]]] = []
        self.requests: list[HttpRequest] = []
        self.connections = 0
        self.lock = threading.Lock()
        self.released = threading.Event()  # lets a HANG answer end at stop
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.peer = self
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def respond_next(self, *statuses: int, headers: dict[str, str] | None = None) -> None:
        """Answer the next requests with ``statuses`` (and ``headers``), in order; a
        status may be :data:`DROP` or :data:`HANG`."""
        with self.lock:
            self.script.extend((status, dict(headers or {})) for status in statuses)

    def answer(self, request: HttpRequest) -> tuple[int, dict[str, str]]:
        with self.lock:
            return self.script.pop(0) if self.script else (self.default_status, {})


def _signatures(headers: dict[str, str]) -> list[bytes]:
    out = []
    for entry in headers.get("webhook-signature", "").split(" "):
        version, _, sig = entry.partition(",")
        if version == "v1":
            try:
                out.append(base64.b64decode(sig))
            except binascii.Error:
                continue
    return out


class WebhookReceiver(HttpPeer):
    """A tenant's webhook receiver: checks every request with ``standardwebhooks`` against
    each secret in ``secrets`` (set them once the endpoint is registered) and answers 401
    when none matches. The signature check is made at the message's own
    ``webhook-timestamp`` (recorded in ``signed_by``), so a frozen test clock hours away
    from the wall clock can still be checked; ``verified_by`` records the library's full
    ``Webhook.verify`` (timestamp tolerance included)."""

    def __init__(self, default_status: int = 200) -> None:
        super().__init__(default_status)
        self.secrets: list[str] = []

    def answer(self, request: HttpRequest) -> tuple[int, dict[str, str]]:
        for index, secret in enumerate(list(self.secrets)):
            hook = Webhook(secret)
            try:
                hook.verify(request.body, request.headers, json_parse=False)
                request.verified_by.append(index)
            except WebhookVerificationError:
                pass
            try:
                at = datetime.fromtimestamp(int(request.headers["webhook-timestamp"]), UTC)
                expected = hook.sign(request.headers["webhook-id"], at, request.body.decode())
            except (KeyError, ValueError):
                continue
            if base64.b64decode(expected.split(",", 1)[1]) in _signatures(request.headers):
                request.signed_by.append(index)
        status, headers = super().answer(request)
        return (status, headers) if request.signed_by else (401, {})

    @property
    def ids(self) -> list[str]:
        return [r.headers["webhook-id"] for r in self.requests]

    def of_type(self, event_type: str) -> list[HttpRequest]:
        return [r for r in self.requests if r.json().get("type") == event_type]


class ChatReceiver(HttpPeer):
    """An Apprise ``json://`` endpoint: ``url()`` is the chat destination to register."""

    def chat_url(self, path: str = "/hook") -> str:
        return f"json://127.0.0.1:{self.port}{path}"


# --- SMTP ----------------------------------------------------------------------------


class _EphemeralController(Controller):
    """A Controller bound to port 0 that learns its port before the self-test."""

    def _trigger_server(self) -> None:
        assert isinstance(self.server, asyncio.Server)
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()  # type: ignore[no-untyped-call]


class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[bytes] = []  # accepted
        self.offered: list[bytes] = []  # every DATA, accepted or not
        self.data_replies: list[str] = []

    @property
    def attempts(self) -> int:
        return len(self.offered)

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        assert envelope.original_content is not None
        self.offered.append(envelope.original_content)
        if self.data_replies:
            return self.data_replies.pop(0)
        self.messages.append(envelope.original_content)
        return "250 2.0.0 Ok: queued"


class SmtpPeer:
    """aiosmtpd on 127.0.0.1: ``messages`` holds every accepted mail (raw bytes);
    ``defer_next`` answers the next DATA with a 451 (the sender must retry)."""

    def __init__(self) -> None:
        self.mailbox = _Mailbox()
        self._controller = _EphemeralController(self.mailbox, hostname="127.0.0.1", port=0)
        self.port = 0

    def __enter__(self) -> SmtpPeer:
        self._controller.start()
        self.port = int(self._controller.port)
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()

    @property
    def raw(self) -> list[bytes]:
        return list(self.mailbox.messages)

    @property
    def attempts(self) -> int:
        return self.mailbox.attempts

    def defer_next(self, times: int = 1) -> None:
        self.mailbox.data_replies.extend(["451 4.3.0 try again later"] * times)

    def parsed(self, *, offered: bool = False) -> list[EmailMessage]:
        """Accepted mails parsed (or every mail offered, when ``offered``)."""
        out = []
        for raw in self.mailbox.offered if offered else self.mailbox.messages:
            msg = email.message_from_bytes(raw, policy=email.policy.default)
            assert isinstance(msg, EmailMessage)
            out.append(msg)
        return out


def mail_text(msg: EmailMessage) -> str:
    """Every decoded text part of a mail, joined."""
    parts = []
    for part in msg.walk():
        if part.get_content_maintype() == "text":
            parts.append(str(part.get_content()))
    return "\n".join(parts)


# --- the worker ----------------------------------------------------------------------


class Dispatcher:
    """The real delivery worker on a private event loop, under the test's clock.

    ``tick()`` is one ``run_once`` (claim, check, send, record) and returns how many
    deliveries it claimed; ``close()`` releases the webhook HTTP client and the loop.
    """

    def __init__(
        self,
        core: Core,
        clock: Callable[[], datetime],
        *,
        seed: int = 1,
        **overrides: Channel,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.channels = build_channels(core, **overrides)
        self.worker = Worker(core, self.channels, clock=clock, rng=random.Random(seed))

    def tick(self) -> int:
        claimed: int = self.loop.run_until_complete(self.worker.run_once())
        return claimed

    def close(self) -> None:
        client = getattr(self.channels["webhook"], "_client", None)
        if client is not None:
            self.loop.run_until_complete(client.aclose())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
