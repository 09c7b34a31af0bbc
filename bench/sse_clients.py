"""Many Server-Sent Events subscribers in one separate process (asyncio, raw sockets).

Each subscriber opens its own connection to ``GET /v1/events/stream`` with a bearer
token, reads the chunked body, and parses the SSE fields. For every event it keeps the
run id, the event id and the commit→arrival latency: arrival wall time minus the event's
``at`` (the committing transaction's clock reading, so the figure includes the
transaction itself and never flatters). Only events of one type are kept
(``event_type``, default ``run.transitioned``: one per completed signal); the others
(``run.created`` from set-up, …) are only counted.

Start: ``python -m bench.sse_clients '{"port": N, "token": "..."}'``; it greets with
``{"ready": true}``. Commands (JSON lines on stdin):

- ``{"cmd": "connect", "n": 1000, "wait_s": 300}``: open ``n`` more streams; answers once
  every one has received its priming ``id:`` (or failed), with counts and seconds taken;
- ``{"cmd": "watch", "prefix": "p5-3-"}``: count, as they arrive, events of runs whose id
  starts with ``prefix`` (send it before the commits; waiting then costs no scanning);
- ``{"cmd": "expect", "prefix": "p5-3-", "count": 15, "wait_s": 60}``: wait until every
  open stream holds ``count`` events of runs starting with ``prefix``; answer with how
  many streams are complete, min/max per stream, duplicates, out-of-order ids, streams
  that ended, and latency percentiles (ms) over every (stream, event);
- ``{"cmd": "close"}``: close every stream;
- ``{"cmd": "quit"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import time
from datetime import datetime
from typing import Any, cast

from bench import ctl


class Stream:
    def __init__(self) -> None:
        self.primed = asyncio.Event()
        self.failed: str | None = None
        self.ended = False
        self.events: list[tuple[str, int, float]] = []  # (run_id, event id, latency ms)
        # Frames as they arrived, parsed later (in watch/expect): parsing on arrival would
        # queue the other streams' reads behind it and add the harness's own delay to the
        # latency it measures.
        self.raw: list[tuple[str, bytes, float]] = []
        # only events of the watched type are kept (the others are counted)
        self.other = 0
        self.matched = 0  # events of the watched prefix
        self.task: asyncio.Task[None] | None = None
        self.done: asyncio.Future[None] | None = None  # resolved when the connection ends


class Reader(asyncio.Protocol):
    """One stream's bytes, handled in the loop's read callback itself (no reader task to
    wake per chunk: with 1,000 streams in one process, the last stream's arrival time
    would include the other 999 tasks' turns). Decodes the chunked body and splits SSE
    frames; an event is timestamped when the read that completes it arrives."""

    def __init__(self, clients: Clients, s: Stream) -> None:
        self.clients = clients
        self.s = s
        self.head: bytes | None = None
        self.chunked = False
        self.buf = b""  # undecoded body bytes
        self.need: int | None = None  # bytes of the current chunk still to come (+ CRLF)
        self.lines = b""  # decoded body bytes not yet split into lines
        self.event_type: str | None = None
        self.data: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass
        self.transport.write(self.clients.request)

    def connection_lost(self, exc: Exception | None) -> None:
        s = self.s
        if exc is not None and not s.primed.is_set() and s.failed is None:
            s.failed = type(exc).__name__
        if s.done is not None and not s.done.done():
            s.done.set_result(None)

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buf = self.buf + data
        if self.head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            self.head, buf = buf[: end + 4], buf[end + 4 :]
            if self.head[9:12] != b"200":
                self.s.failed = self.head.split(b"\r\n", 1)[0].decode()
                self._close()
                return
            self.chunked = b"transfer-encoding: chunked" in self.head.lower()
        if not self.chunked:
            self.buf = b""
            self._sse(buf, now)
            return
        while True:
            if self.need is None:
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                size = int(buf[:end].split(b";")[0], 16)
                buf = buf[end + 2 :]
                if size == 0:
                    self._close()
                    return
                self.need = size + 2
            if len(buf) < self.need:
                break
            body, buf = buf[: self.need - 2], buf[self.need :]
            self.need = None
            self._sse(body, now)
        self.buf = buf

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _sse(self, chunk: bytes, now: float) -> None:
        s, clients = self.s, self.clients
        *lines, self.lines = (self.lines + chunk).split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line:
                if self.event_type and self.data:
                    body = b"\n".join(self.data)
                    s.raw.append((self.event_type, body, now))
                    # counted as it arrives (a substring test), parsed later
                    if self.event_type == clients.event_type and clients.needle in body:
                        s.matched += 1
                self.event_type, self.data = None, []
                continue
            name, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if name == b"id":
                s.primed.set()
            elif name == b"event":
                self.event_type = value.decode()
            elif name == b"data":
                self.data.append(value)


class Clients:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.host = cfg.get("host", "127.0.0.1")
        self.port = int(cfg["port"])
        self.request = (
            f"GET {cfg.get('path', '/v1/events/stream')} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Authorization: Bearer {cfg['token']}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
        self.streams: list[Stream] = []
        self.prefix = "\0"  # the watched run-id prefix (matches nothing until set)
        self.needle = b"\0"  # the prefix as it shows in an event's JSON
        self.event_type = cfg.get("event_type", "run.transitioned")  # the one kept

    async def _run(self, s: Stream) -> None:
        loop = asyncio.get_running_loop()
        s.done = loop.create_future()
        transport: asyncio.BaseTransport | None = None
        try:
            transport, _ = await loop.create_connection(
                lambda: Reader(self, s), self.host, self.port
            )
            await s.done
        except OSError as exc:
            if not s.primed.is_set():
                s.failed = type(exc).__name__
        except asyncio.CancelledError:
            pass
        finally:
            s.ended = True
            s.primed.set()  # never leave a connect waiting on a dead stream
            if transport is not None:
                transport.close()

    def _event(self, s: Stream, event_type: str, data: bytes, now: float) -> None:
        if event_type != self.event_type:
            s.other += 1
            return
        try:
            ev = json.loads(data)
            at = datetime.fromisoformat(ev["at"]).timestamp()
            run_id = str(ev.get("run_id") or "")
            s.events.append((run_id, int(ev["id"]), (now - at) * 1000))
        except (ValueError, KeyError, TypeError):
            s.events.append(("?", -1, float("nan")))

    def _parse(self) -> None:
        for s in self.streams:
            raw, s.raw = s.raw, []
            for event_type, data, now in raw:
                self._event(s, event_type, data, now)

    def watch(self, prefix: str) -> dict[str, Any]:
        self._parse()
        self.prefix = prefix
        self.needle = b'"run_id":"' + json.dumps(prefix)[1:-1].encode()
        for s in self.streams:
            s.matched = sum(1 for e in s.events if e[0].startswith(prefix))
        return {"watching": prefix}

    async def connect(self, n: int, timeout: float) -> dict[str, Any]:
        t0 = time.monotonic()
        new = [Stream() for _ in range(n)]
        opening = asyncio.Semaphore(200)  # connection handshakes in flight at once

        async def start(s: Stream) -> None:
            async with opening:
                s.task = asyncio.create_task(self._run(s))
                await s.primed.wait()

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(start(s) for s in new))
        # Streams not primed in time are given up (closed), so that the ones kept are
        # exactly those the server holds and every later check counts only them.
        late = [s for s in new if s.task is None or not s.primed.is_set()]
        given_up = {id(s) for s in late}
        for s in late:
            if s.task is not None:
                s.task.cancel()
        await asyncio.gather(*(s.task for s in late if s.task), return_exceptions=True)
        self.streams += [s for s in new if id(s) not in given_up and not s.ended]
        return {
            "open": len(self.streams),
            "failed": sum(1 for s in new if s.failed),
            "failures": sorted({s.failed for s in new if s.failed})[:5],
            "unprimed": len(late),
            "seconds": time.monotonic() - t0,
        }

    async def expect(self, prefix: str, count: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        if prefix != self.prefix:
            self.watch(prefix)
        # Waits on the counts kept as events arrive; parsing (JSON, timestamps) waits until
        # every stream has them: parsing meanwhile would hold back the reads of the last
        # events behind it and add the harness's own time to the latency it measures.
        while time.monotonic() < deadline:
            if all(s.matched >= count for s in self.streams if not s.ended):
                break
            await asyncio.sleep(0.05)
        self._parse()
        per_stream = []
        latencies: list[float] = []
        duplicates = out_of_order = 0
        for s in self.streams:
            mine = [e for e in s.events if e[0].startswith(prefix)]
            per_stream.append(len(mine))
            ids = [e[1] for e in mine]
            duplicates += len(ids) - len(set(ids))
            out_of_order += sum(1 for a, b in itertools.pairwise(ids) if b <= a)
            latencies += [e[2] for e in mine]
        latencies.sort()

        def pct(p: float) -> float | None:
            if not latencies:
                return None
            rank = max(1, -(-len(latencies) * p // 100))
            return latencies[int(min(rank, len(latencies))) - 1]

        return {
            "streams": len(self.streams),
            "ended": sum(1 for s in self.streams if s.ended),
            "complete": sum(1 for n in per_stream if n == count),
            "received": sum(per_stream),
            "min": min(per_stream, default=0),
            "max": max(per_stream, default=0),
            "duplicates": duplicates,
            "out_of_order": out_of_order,
            "latency_ms": {
                "count": len(latencies),
                "p50": pct(50),
                "p99": pct(99),
                "max": latencies[-1] if latencies else None,
            },
        }

    async def close(self) -> dict[str, Any]:
        n = len(self.streams)
        for s in self.streams:
            if s.task is not None:
                s.task.cancel()
        await asyncio.gather(*(s.task for s in self.streams if s.task), return_exceptions=True)
        self.streams = []
        return {"closed": n}


async def main() -> None:
    clients = Clients(json.loads(sys.argv[1]))
    ctl.say({"ready": True})

    async def handle(cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd["cmd"] == "connect":
            return await clients.connect(int(cmd["n"]), float(cmd.get("wait_s", 300)))
        if cmd["cmd"] == "watch":
            return clients.watch(cmd["prefix"])
        if cmd["cmd"] == "expect":
            return await clients.expect(
                cmd["prefix"], int(cmd["count"]), float(cmd.get("wait_s", 60))
            )
        if cmd["cmd"] == "close":
            return await clients.close()
        raise ValueError(f"unknown command {cmd['cmd']!r}")

    await ctl.serve_commands(handle)
    await clients.close()


if __name__ == "__main__":
    ctl.run(main)
