"""The worker's own webhook client (``KeepAliveLanes``) gives the same outcomes as httpx.

The signed-delivery cases run against the same verifying receiver as
``test_webhook_channel.py``; what that threading server cannot do on demand (a chunked
or endless answer, a garbled status line, an interim 100, silence) comes from a small
asyncio server here that answers each request with the bytes a test gives it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from runbell.channels.base import DeliveryUnknown, PermanentDeliveryError, TransientDeliveryError
from runbell.channels.webhook import WebhookChannel, _build
from runbell.channels.webhook_http import KeepAliveLanes
from runbell.signatures import new_secret
from tests.channels.test_webhook_channel import (
    HOSTILE,
    RESOLVED,
    TOKEN,
    Receiver,
    _serve,
    make_msg,
    recording_resolver,
)
from tests.timeouts import WAIT, scaled


@pytest.fixture
def secret() -> str:
    return new_secret()


@pytest.fixture
def receiver(secret: str) -> Iterator[Receiver]:
    yield from _serve([secret])


def lanes(rx_origin: str, n: int = 2, **kw: object) -> KeepAliveLanes:
    return KeepAliveLanes(n, allow_hosts=frozenset({rx_origin}), timeout=WAIT, **kw)  # type: ignore[arg-type]


async def test_delivery_arrives_signed_and_the_connection_is_kept(
    receiver: Receiver, secret: str
) -> None:
    client = lanes(receiver.origin, n=1)
    channel = WebhookChannel(client)
    for _ in range(3):
        sent = await channel.send(make_msg(receiver.url(f"/hook?t={TOKEN}"), [secret]))
        assert sent.status_code == 200 and sent.response_excerpt == "thanks"
    await receiver.settle()
    assert receiver.seen.connections == 2  # ours, kept for all three; settle's own
    assert [r.verified_by for r in receiver.seen.requests[:3]] == [[0], [0], [0]]
    first = receiver.seen.requests[0]
    assert first.path == f"/hook?t={TOKEN}"
    assert first.headers["webhook-id"] == "msg_2f1c0d9e"
    assert first.headers["host"] == receiver.origin
    assert first.headers["content-type"] == "application/json"
    assert b'"reason":"caf\\u00e9 \\u2713"' in first.body  # the exact signed bytes
    await client.aclose()


@pytest.mark.parametrize(
    ("path", "expected", "retry_after"),
    [
        ("/status/503", TransientDeliveryError, None),
        ("/status/429?retry_after=120", TransientDeliveryError, 120),
        ("/status/404", TransientDeliveryError, None),
        ("/redirect", TransientDeliveryError, None),
        ("/status/410", PermanentDeliveryError, None),
        ("/hangup", DeliveryUnknown, None),
    ],
)
async def test_answers_map_like_the_httpx_client(
    receiver: Receiver, secret: str, path: str, expected: type[Exception], retry_after: int | None
) -> None:
    client = lanes(receiver.origin)
    with pytest.raises(expected) as caught:
        await WebhookChannel(client).send(make_msg(receiver.url(path), [secret]))
    assert type(caught.value) is expected
    if retry_after is not None:
        assert caught.value.retry_after_s == retry_after  # type: ignore[attr-defined]
    if path == "/status/410":
        assert caught.value.gone is True  # type: ignore[attr-defined]
    if path == "/redirect":
        assert "redirects are not followed" in str(caught.value)
    # The connection survives an error answer; after a hang-up the next send reconnects.
    sent = await WebhookChannel(client).send(make_msg(receiver.url(), [secret]))
    assert sent.status_code == 200
    await client.aclose()


async def test_connection_refused_is_transient(secret: str) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    client = KeepAliveLanes(1, allow_hosts=frozenset({"127.0.0.1"}), timeout=WAIT)
    with pytest.raises(TransientDeliveryError, match=r"could not connect to 127\.0\.0\.1"):
        await WebhookChannel(client).send(make_msg(f"http://127.0.0.1:{port}/h/{TOKEN}", [secret]))


# --- answers the threading receiver cannot give: a scripted asyncio server ----------------


@asynccontextmanager
async def scripted(answers: list[bytes | None]) -> AsyncIterator[tuple[str, list[int]]]:
    """Serve one scripted answer per request, in order (``None``: say nothing, keep the
    connection open). Yields the origin and a list counting connections."""
    conns: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(1)
        try:
            while answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                answer = answers.pop(0)
                if answer is None:
                    await asyncio.sleep(scaled(30))
                    return
                writer.write(answer)
                await writer.drain()
                if b"connection: close" in answer.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}", conns
    finally:
        server.close()


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


async def test_chunked_interim_and_long_answers(secret: str) -> None:
    long_body = b"x" * 5000
    answers: list[bytes | None] = [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n" + long_body,
        b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil-close",
        OK,
    ]
    async with scripted(answers) as (origin, conns):
        client = lanes(origin, n=1)
        channel = WebhookChannel(client)
        url = f"http://{origin}/h"
        sent = [await channel.send(make_msg(url, [secret])) for _ in range(5)]
    assert [s.status_code for s in sent] == [200, 200, 201, 200, 200]
    assert sent[0].response_excerpt == "abcdefg"
    assert sent[1].response_excerpt == "x" * 500  # the excerpt, the body drained
    assert sent[2].response_excerpt is None
    assert sent[3].response_excerpt == "until-close"
    assert len(conns) == 2  # one kept for the first four; closed by the answer; a new one
    await client.aclose()


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"SPDY/3 200 OK\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\n bad header\r\n\r\n",
        None,  # no answer at all: the deadline
    ],
)
async def test_no_complete_answer_is_unknown(secret: str, answer: bytes | None) -> None:
    async with scripted([answer, OK]) as (origin, _):
        client = KeepAliveLanes(1, allow_hosts=frozenset({origin}), timeout=scaled(0.5))
        with pytest.raises(DeliveryUnknown) as caught:
            await WebhookChannel(client).send(make_msg(f"http://{origin}/h/{TOKEN}", [secret]))
        assert TOKEN not in str(caught.value)
        await client.aclose()


# --- the guard: refused before connecting, names resolved once and dialled as checked -----


class Dials:
    """Stands in for the network below the guard: records each dial, then fails it."""

    def __init__(self) -> None:
        self.dialled: list[tuple[str, int, str | None]] = []

    async def __call__(
        self, host: str, port: int, *, ssl: ssl.SSLContext | None, server_hostname: str | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.dialled.append((host, port, server_hostname))
        raise ConnectionRefusedError("tripwire")


@pytest.mark.parametrize(
    ("url", "rule"),
    [(u, r) for u, r in HOSTILE if r != "invalid-url"],
    ids=[u for u, r in HOSTILE if r != "invalid-url"],
)
async def test_hostile_destination_is_refused_without_connecting(
    url: str, rule: str, secret: str
) -> None:
    calls: list[tuple[str, int]] = []
    dials = Dials()
    client = KeepAliveLanes(1, resolve=recording_resolver(calls), open_connection=dials)  # type: ignore[arg-type]
    msg = make_msg(url.replace("/hook", f"/hook/{TOKEN}?key={TOKEN}"), [secret])
    with pytest.raises(PermanentDeliveryError) as caught:
        await WebhookChannel(client).send(msg)
    assert caught.value.operator_alert is True
    assert caught.value.extra["rule"] == rule
    assert TOKEN not in str(caught.value)
    assert dials.dialled == []


async def test_a_name_is_resolved_once_and_dialled_at_the_checked_address(secret: str) -> None:
    """Proves the refusal test can fail: a public name reaches the dial, at its checked
    address, with the name kept for TLS."""
    calls: list[tuple[str, int]] = []
    dials = Dials()
    client = KeepAliveLanes(1, resolve=recording_resolver(calls), open_connection=dials)  # type: ignore[arg-type]
    with pytest.raises(TransientDeliveryError, match=r"could not connect to public\.example\.com"):
        await WebhookChannel(client).send(make_msg("https://public.example.com/h", [secret]))
    assert calls == [("public.example.com", 443)]
    assert dials.dialled == [(RESOLVED["public.example.com"][0], 443, "public.example.com")]


def test_the_worker_builds_one_lane_per_concurrent_send(tmp_path: Path) -> None:
    from runbell.channels.base import Setup
    from tests.conftest import make_settings

    settings = make_settings(tmp_path, "sqlite:///unused.db")
    channel = _build(Setup(settings, "https://runbell.example.com", lambda: None))
    assert isinstance(channel._client, KeepAliveLanes)
    assert len(channel._client.lanes) == settings.worker_concurrency
