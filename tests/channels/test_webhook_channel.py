"""The tenant webhook channel against a real local receiver that verifies signatures.

The receiver is a threading ``http.server`` on 127.0.0.1 that checks every request with
the reference ``standardwebhooks`` library, the way a tenant's receiver would: a
request no known secret verifies is answered 401. Hostile destinations are refused by
the SSRF guard before any connection, which a transport that fails loudly when dialled
proves.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from runbell.channels.base import (
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    TransientDeliveryError,
)
from runbell.channels.webhook import WebhookChannel, sign_all
from runbell.channels.webhook_http import KeepAliveLanes
from runbell.outbound import AsyncSafeTransport, safe_async_client
from runbell.signatures import new_secret
from tests.timeouts import WAIT

PAYLOAD: dict[str, Any] = {
    "type": "run.finished",
    "timestamp": "2025-01-02T03:04:05Z",
    "data": {"run_id": "run_1", "status": "completed", "reason": "café ✓", "counts": {"ok": 3}},
}
TOKEN = "tok_do_not_leak_9f8e7d"  # stands in for a token some receivers put in the path


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    verified_by: list[int]  # indexes of the receiver's secrets that verified it


@dataclass
class Seen:
    connections: int = 0
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    seen: Seen
    secrets: list[str]

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        with self.seen.lock:
            self.seen.connections += 1
        return conn, addr


class _Handler(BaseHTTPRequestHandler):
    """Verifies, records, then answers as the path says (``/status/503?retry_after=120``)."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        verified = []
        for index, secret in enumerate(self.server.secrets):
            try:
                Webhook(secret).verify(body, headers)
            except WebhookVerificationError:
                continue
            verified.append(index)
        with self.server.seen.lock:
            self.server.seen.requests.append(Request(self.path, headers, body, verified))

        if self.path.startswith("/hangup"):
            self.close_connection = True  # read it all, then close without a word
            return
        if not verified:
            self._answer(401, b"bad signature")
        elif self.path.startswith("/status/"):
            status = int(self.path.split("/")[2].split("?")[0])
            extra = {}
            if "retry_after=" in self.path:
                extra["Retry-After"] = self.path.split("retry_after=")[1]
            self._answer(status, b"receiver says no", extra)
        elif self.path.startswith("/redirect"):
            self._answer(302, b"", {"Location": "http://10.0.0.1/"})
        else:
            self._answer(200, b"thanks")

    def do_GET(self) -> None:
        self._answer(200, b"ok")

    def _answer(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Receiver:
    port: int
    seen: Seen

    @property
    def origin(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.origin}{path}"

    async def settle(self) -> None:
        """Make sure every connection made so far has been accepted and counted (the
        server accepts in order, so an answered fresh request comes after them all)."""
        async with httpx.AsyncClient(trust_env=False, timeout=WAIT) as plain:
            assert (await plain.get(f"http://{self.origin}/settle")).status_code == 200


def _serve(secrets: list[str]) -> Iterator[Receiver]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen = Seen()
    server.secrets = secrets
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield Receiver(port=server.server_address[1], seen=server.seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def secret() -> str:
    return new_secret()


@pytest.fixture
def receiver(secret: str) -> Iterator[Receiver]:
    yield from _serve([secret])


def make_msg(url: str, secrets: list[str], *, now: datetime | None = None) -> Outbound:
    return Outbound(
        delivery_id="dlv_1",
        tenant_id="ten_1",
        channel="webhook",
        destination="wep_1",
        identity="msg_2f1c0d9e",
        attempt_no=1,
        # standardwebhooks verifies against the wall clock, so attempts happen "now".
        now=now or datetime.now(UTC),
        urgency="normal",
        title="A run needs attention",
        body="Open Runbell to see it.",
        deep_link="https://runbell.example.com/n/ntf_1",
        event_type="run.finished",
        payload=PAYLOAD,
        target={"url": url, "secrets": secrets},
    )


async def send(rx: Receiver, msg: Outbound) -> Sent:
    async with safe_async_client(allow_hosts=frozenset({rx.origin}), timeout=WAIT) as client:
        return await WebhookChannel(client).send(msg)


async def test_delivery_arrives_signed_with_the_stable_id(receiver: Receiver, secret: str) -> None:
    sent = await send(receiver, make_msg(receiver.url(), [secret]))

    assert sent == Sent(status_code=200, response_excerpt="thanks")
    [request] = receiver.seen.requests
    assert request.verified_by == [0]
    assert request.headers["webhook-id"] == "msg_2f1c0d9e"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"] == "Runbell-Webhooks/1"


async def test_rotation_signs_for_the_new_and_the_old_secret() -> None:
    new, old = new_secret(), new_secret()
    for known in ([new], [old]):
        for rx in _serve(known):
            sent = await send(rx, make_msg(rx.url(), [new, old]))
            assert sent.status_code == 200
            [request] = rx.seen.requests
            assert request.verified_by == [0]
            signatures = request.headers["webhook-signature"].split(" ")
            assert len(signatures) == 2
            assert all(s.startswith("v1,") for s in signatures)


async def test_server_error_is_transient(receiver: Receiver, secret: str) -> None:
    with pytest.raises(TransientDeliveryError) as caught:
        await send(receiver, make_msg(receiver.url("/status/500"), [secret]))
    assert caught.value.status_code == 500
    assert caught.value.response_excerpt == "receiver says no"
    assert caught.value.retry_after_s is None


@pytest.mark.parametrize("status", [429, 502, 503, 504])
async def test_overload_is_transient_with_retry_after(
    receiver: Receiver, secret: str, status: int
) -> None:
    url = receiver.url(f"/status/{status}?retry_after=120")
    with pytest.raises(TransientDeliveryError) as caught:
        await send(receiver, make_msg(url, [secret]))
    assert caught.value.status_code == status
    assert caught.value.retry_after_s == 120


async def test_gone_is_permanent(receiver: Receiver, secret: str) -> None:
    with pytest.raises(PermanentDeliveryError) as caught:
        await send(receiver, make_msg(receiver.url("/status/410"), [secret]))
    assert caught.value.gone is True
    assert caught.value.operator_alert is False
    assert caught.value.status_code == 410


async def test_client_error_is_transient_because_receivers_fix_bugs(
    receiver: Receiver, secret: str
) -> None:
    with pytest.raises(TransientDeliveryError) as caught:
        await send(receiver, make_msg(receiver.url("/status/400"), [secret]))
    assert caught.value.status_code == 400


async def test_redirect_is_a_failure_and_is_not_followed(receiver: Receiver, secret: str) -> None:
    with pytest.raises(TransientDeliveryError) as caught:
        await send(receiver, make_msg(receiver.url("/redirect"), [secret]))
    assert caught.value.status_code == 302
    assert "redirects are not followed" in caught.value.detail
    assert "10.0.0.1" not in str(caught.value)
    assert len(receiver.seen.requests) == 1


async def test_hangup_after_reading_the_request_is_unknown(receiver: Receiver, secret: str) -> None:
    with pytest.raises(DeliveryUnknown) as caught:
        await send(receiver, make_msg(receiver.url(f"/hangup/{TOKEN}"), [secret]))
    assert TOKEN not in str(caught.value)
    [request] = receiver.seen.requests
    assert request.verified_by == [0]  # it did arrive: that is why the outcome is unknown


async def test_connection_refused_is_transient(secret: str) -> None:
    with socket.socket() as probe:  # a port nobody listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with safe_async_client(allow_hosts=frozenset({"127.0.0.1"}), timeout=WAIT) as client:
        with pytest.raises(TransientDeliveryError) as caught:
            await WebhookChannel(client).send(make_msg(f"http://127.0.0.1:{port}/h", [secret]))
    assert caught.value.status_code is None


async def test_retry_keeps_the_id_and_restamps_the_time(receiver: Receiver, secret: str) -> None:
    first = datetime.now(UTC)
    await send(receiver, make_msg(receiver.url(), [secret], now=first))
    await send(receiver, make_msg(receiver.url(), [secret], now=first + timedelta(seconds=60)))

    one, two = receiver.seen.requests
    assert one.verified_by == two.verified_by == [0]
    assert one.headers["webhook-id"] == two.headers["webhook-id"] == "msg_2f1c0d9e"
    assert int(two.headers["webhook-timestamp"]) == int(one.headers["webhook-timestamp"]) + 60
    assert one.headers["webhook-timestamp"] == str(int(first.timestamp()))
    assert one.body == two.body


async def test_body_is_exactly_the_compact_payload(receiver: Receiver, secret: str) -> None:
    await send(receiver, make_msg(receiver.url(), [secret]))

    [request] = receiver.seen.requests
    assert request.body == json.dumps(PAYLOAD, separators=(",", ":")).encode("utf-8")
    assert json.loads(request.body) == PAYLOAD  # no keys beyond what was given


async def test_unguarded_destination_is_refused_before_connecting(
    receiver: Receiver, secret: str
) -> None:
    async with safe_async_client() as client:  # no allow-list: loopback is hostile
        with pytest.raises(PermanentDeliveryError) as caught:
            await WebhookChannel(client).send(make_msg(receiver.url(f"/hook/{TOKEN}"), [secret]))
    assert caught.value.operator_alert is True
    assert "(https-only)" in caught.value.detail
    assert TOKEN not in str(caught.value)
    await receiver.settle()
    assert receiver.seen.connections == 1  # only the settle request
    assert receiver.seen.requests == []


async def test_unsigned_delivery_is_never_sent(receiver: Receiver) -> None:
    with pytest.raises(PermanentDeliveryError) as caught:
        await send(receiver, make_msg(receiver.url(), []))
    assert caught.value.operator_alert is True
    await receiver.settle()
    assert receiver.seen.connections == 1


# --- SSRF: refused before any resolution of literals and before any connection -------------

RESOLVED = {
    "public.example.com": ["93.184.216.34"],
    "internal-db.example.com": ["10.0.0.5"],
    "metadata.example.com": ["169.254.169.254"],
    "rebind.example.com": ["93.184.216.34", "::ffff:127.0.0.1"],
}

# (url, rule the guard must name)
HOSTILE: list[tuple[str, str]] = [
    ("http://example.com/hook", "https-only"),
    ("https://10.0.0.1/hook", "private"),
    ("https://172.16.5.4/hook", "private"),
    ("https://192.168.1.1/hook", "private"),
    ("https://100.64.0.1/hook", "cgnat"),
    ("https://localhost/hook", "local-name"),
    ("https://api.localhost/hook", "local-name"),
    ("https://metadata.google.internal/hook", "local-name"),
    ("https://127.0.0.1/hook", "loopback"),
    ("https://127.1/hook", "loopback"),
    ("https://2130706433/hook", "loopback"),  # decimal
    ("https://0177.0.0.1/hook", "invalid-url"),  # octal: httpx refuses it before the guard
    ("https://0177.0.1/hook", "loopback"),  # octal, shortened: the guard refuses it
    ("https://017700000001/hook", "loopback"),  # one octal number
    ("https://0x7f000001/hook", "loopback"),  # hex
    ("https://0x7f.0.0.1/hook", "loopback"),
    ("https://0.0.0.0/hook", "unspecified"),
    ("https://[::1]/hook", "loopback"),
    ("https://[::ffff:127.0.0.1]/hook", "ipv4-mapped"),
    ("https://[::ffff:a00:5]/hook", "ipv4-mapped"),
    ("https://[::ffff:8.8.8.8]/hook", "ipv4-mapped"),
    ("https://[64:ff9b::a00:1]/hook", "nat64"),
    ("https://[64:ff9b::808:808]/hook", "nat64"),
    ("https://[2002:7f00:1::]/hook", "6to4"),
    ("https://[2002:a9fe:a9fe::1]/hook", "6to4"),
    ("https://[fe80::1]/hook", "link-local"),
    ("https://[fd00::1]/hook", "unique-local"),
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://internal-db.example.com/hook", "private"),
    ("https://metadata.example.com/hook", "link-local"),
    ("https://rebind.example.com/hook", "ipv4-mapped"),
    ("https://user:pw@example.com/hook", "userinfo"),
]


class Tripwire(httpx.AsyncHTTPTransport):
    """Stands in for the network below the guard: being reached at all is the failure."""

    dialled: list[str]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.dialled.append(str(request.url.host))
        raise AssertionError(f"dialled {request.url.host} although the guard should refuse")


class GuardedTripwire(AsyncSafeTransport, Tripwire):
    """The real guard (``AsyncSafeTransport``) in front of the tripwire instead of sockets."""


def recording_resolver(calls: list[tuple[str, int]]) -> Callable[[str, int], Sequence[str]]:
    def resolve(host: str, port: int) -> Sequence[str]:
        calls.append((host, port))
        return RESOLVED[host]

    return resolve


def test_there_are_at_least_twenty_five_hostile_destinations() -> None:
    assert len(HOSTILE) >= 25


@pytest.mark.parametrize(("url", "rule"), HOSTILE, ids=[url for url, _ in HOSTILE])
async def test_hostile_destination_is_refused_without_connecting(
    url: str, rule: str, secret: str
) -> None:
    calls: list[tuple[str, int]] = []
    transport = GuardedTripwire(resolve=recording_resolver(calls))
    transport.dialled = []
    msg = make_msg(url.replace("/hook", f"/hook/{TOKEN}?key={TOKEN}"), [secret])
    async with httpx.AsyncClient(
        transport=transport, follow_redirects=False, trust_env=False
    ) as client:
        with pytest.raises(PermanentDeliveryError) as caught:
            await WebhookChannel(client).send(msg)

    assert caught.value.operator_alert is True
    assert caught.value.gone is False
    assert caught.value.extra["rule"] == rule
    assert f"({rule})" in caught.value.detail
    assert TOKEN not in str(caught.value)
    assert transport.dialled == []
    host = urlsplit(url).hostname
    assert calls == ([(host, 443)] if host in RESOLVED else [])


async def test_tripwire_fires_when_the_guard_lets_a_request_through(secret: str) -> None:
    """Proves the refusal test above can fail: a public destination reaches the dial."""
    calls: list[tuple[str, int]] = []
    transport = GuardedTripwire(resolve=recording_resolver(calls))
    transport.dialled = []
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        with pytest.raises(AssertionError, match="dialled"):
            await WebhookChannel(client).send(make_msg("https://public.example.com/h", [secret]))
    assert transport.dialled == ["93.184.216.34"]
    assert calls == [("public.example.com", 443)]


# --- the mapping of transport failures that a real peer cannot produce on demand -----------


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (httpx.ConnectError("refused"), TransientDeliveryError),
        (httpx.ConnectTimeout("timed out"), TransientDeliveryError),
        (httpx.PoolTimeout("timed out"), TransientDeliveryError),
        (httpx.ReadTimeout("timed out"), DeliveryUnknown),
        (httpx.WriteTimeout("timed out"), DeliveryUnknown),
        (httpx.ReadError("reset by peer"), DeliveryUnknown),
        (httpx.RemoteProtocolError("disconnected"), DeliveryUnknown),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v.__name__,
)
async def test_transport_failure_mapping(
    failure: httpx.TransportError, expected: type[Exception], secret: str
) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise failure

    async with httpx.AsyncClient(transport=httpx.MockTransport(fail)) as client:
        with pytest.raises(expected) as caught:
            await WebhookChannel(client).send(
                make_msg(f"https://hooks.example.com/{TOKEN}", [secret])
            )
    assert type(caught.value) is expected
    assert "hooks.example.com" in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_sign_all_signs_once_per_distinct_secret() -> None:
    new, old = new_secret(), new_secret()
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    headers = sign_all(b"{}", [new, old, new], "msg_1", at)
    assert headers["webhook-id"] == "msg_1"
    assert headers["webhook-timestamp"] == str(int(at.timestamp()))
    assert len(headers["webhook-signature"].split(" ")) == 2
    with pytest.raises(ValueError, match="no signing secret"):
        sign_all(b"{}", [], "msg_1", at)


async def test_every_lane_of_the_workers_webhook_client_is_guarded(tmp_path: Path) -> None:
    """The worker sends webhooks through one keep-alive connection per concurrent send
    (KeepAliveLanes), and every send refuses a hostile destination before connecting."""
    from runbell.app import build
    from runbell.dispatch.wiring import build_channels
    from tests.conftest import make_settings

    core = build(make_settings(tmp_path, f"sqlite:///{tmp_path / 'rb.db'}"), migrate=True)
    try:
        channel = build_channels(core)["webhook"]
        lanes = core.settings.worker_concurrency
        msg = make_msg("http://169.254.169.254/latest/meta-data", [new_secret()])
        results = await asyncio.gather(
            *(channel.send(msg) for _ in range(lanes)), return_exceptions=True
        )
        assert all(isinstance(r, PermanentDeliveryError) for r in results), results
        assert all(r.operator_alert for r in results if isinstance(r, PermanentDeliveryError))
        assert isinstance(channel, WebhookChannel)
        assert isinstance(channel._client, KeepAliveLanes) and len(channel._client.lanes) == lanes
        await channel._client.aclose()
    finally:
        core.db.dispose()
