"""A tenant's webhook receiver on 127.0.0.1, scriptable for crash tests.

It verifies every request with the reference ``standardwebhooks`` library, records each
arrival, and dedupes on ``webhook-id`` the way the Standard Webhooks spec tells
receivers to: ``processed`` holds each id once, however often it arrived. Two switches
freeze it at the points a worker can die:

- ``hold_next_connection``: the next connection is accepted and then left unread, so the
  sender is stuck inside its send; :meth:`Receiver.release` drops it unparsed (nothing
  was delivered);
- ``hold_next_answer``: the next request is read and recorded, but the answer waits
  until :meth:`Receiver.release` (the message arrived; the sender does not know yet).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.timeouts import WAIT, scaled

HOLD_LIMIT_S = scaled(120)  # a held connection or answer is let go after this, whatever happens


@dataclass(frozen=True)
class Arrival:
    webhook_id: str
    timestamp: str
    body: bytes
    verified: bool
    user_agent: str
    # When it arrived (monotonic, this process's clock): rate-limit tests count per window.
    at: float = field(default_factory=time.monotonic)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Two workers open up to 2 x 16 connections at once; the default backlog of 5 would
    # refuse some, which the worker rightly counts as failed tries.
    request_queue_size = 128
    receiver: Receiver


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def handle(self) -> None:
        rx = self.server.receiver
        if rx._take("connection"):
            # The request bytes sit unread in the socket; returning closes it unparsed.
            rx._released.wait(HOLD_LIMIT_S)
            return
        with contextlib.suppress(OSError):  # the sender may be SIGKILLed mid-exchange
            super().handle()

    def do_POST(self) -> None:
        rx = self.server.receiver
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if len(body) < length:
            # The sender died (SIGKILL) between its headers and its body: like any HTTP
            # server, this is a broken request, not a delivery. Nothing is recorded.
            self.close_connection = True
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            Webhook(rx.secret).verify(body, headers)
            verified = True
        except WebhookVerificationError:
            verified = False
        arrival = Arrival(
            webhook_id=headers.get("webhook-id", ""),
            timestamp=headers.get("webhook-timestamp", ""),
            body=body,
            verified=verified,
            user_agent=headers.get("user-agent", ""),
        )
        hold = rx._record(arrival)
        if hold:
            rx._released.wait(HOLD_LIMIT_S)
        status = rx.status if verified else 401
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Receiver:
    """Use as a context manager; ``url`` is the endpoint to register."""

    def __init__(self, secret: str, status: int = 200) -> None:
        self.secret = secret
        self.status = status
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._holds: set[str] = set()
        self.arrivals: list[Arrival] = []
        self.processed: list[str] = []  # deduped on webhook-id: one entry per message
        self._seen: set[str] = set()
        self.held_connections = 0
        self.held_answers: list[str] = []  # webhook-ids whose answer was held
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.receiver = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=WAIT)

    # --- switches --------------------------------------------------------------------

    def hold_next_connection(self) -> None:
        with self._lock:
            self._holds.add("connection")

    def hold_next_answer(self) -> None:
        with self._lock:
            self._holds.add("answer")

    def release(self) -> None:
        """Let every held connection or answer go; from now on answer at once."""
        with self._lock:
            self._holds.clear()
        self._released.set()

    # --- what arrived ------------------------------------------------------------------

    def ids(self) -> Counter[str]:
        """How often each webhook-id arrived (parsed requests only)."""
        with self._lock:
            return Counter(a.webhook_id for a in self.arrivals)

    def of(self, webhook_id: str) -> list[Arrival]:
        with self._lock:
            return [a for a in self.arrivals if a.webhook_id == webhook_id]

    def snapshot(self) -> tuple[int, int, list[str]]:
        """(requests, held connections, held answers)."""
        with self._lock:
            return len(self.arrivals), self.held_connections, list(self.held_answers)

    # --- internals ---------------------------------------------------------------------

    def _take(self, kind: str) -> bool:
        with self._lock:
            if kind not in self._holds:
                return False
            self._holds.discard(kind)
            if kind == "connection":
                self.held_connections += 1
            return True

    def _record(self, arrival: Arrival) -> bool:
        """Keep the arrival; dedupe it; say whether its answer is to be held."""
        with self._lock:
            self.arrivals.append(arrival)
            if arrival.verified and arrival.webhook_id not in self._seen:
                self._seen.add(arrival.webhook_id)
                self.processed.append(arrival.webhook_id)
            if "answer" in self._holds:
                self._holds.discard("answer")
                self.held_answers.append(arrival.webhook_id)
                return True
            return False
