"""A fast keep-alive webhook receiver (a separate process) that counts ``webhook-id``s.

It answers every POST with ``200`` and an empty body as soon as the body is read, keeps
the connection open (HTTP/1.1), and records for each request its ``webhook-id``, arrival
time (wall clock and monotonic), and the payload's ``type``, ``timestamp`` and
``data.run_id``. Signatures are verified with the reference ``standardwebhooks`` library
on a sample (every ``sample``-th request, and the first ten); a request that fails the
check is answered ``401`` and counted, so the run fails.

Start: ``python -m bench.receiver '{"sample": 10}'`` with the endpoint secret in
``BENCH_WEBHOOK_SECRET``; it greets with ``{"port": N}``. Commands (JSON lines on stdin):

- ``{"cmd": "batch", "prefix": "p3-2-"}``: what arrived for runs whose id starts with the
  prefix — requests, unique ids, duplicate arrivals, first/last arrival (monotonic),
  commit→arrival latency percentiles in ms (arrival wall time minus the payload's
  ``timestamp``), the ids themselves when ``ids`` is true;
- ``{"cmd": "count"}``: requests so far (cheap: polled while a batch drains);
- ``{"cmd": "stats"}``: totals, including failed signature checks;
- ``{"cmd": "quit"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench import ctl

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
REFUSED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"


@dataclass
class Arrival:
    webhook_id: str
    wall: float
    mono: float
    type: str
    run_id: str
    timestamp: str


class Receiver:
    def __init__(self, secret: str, sample: int) -> None:
        from standardwebhooks.webhooks import Webhook

        self.hook = Webhook(secret)
        self.sample = max(1, sample)
        self.arrivals: list[Arrival] = []
        self.requests = 0
        self.verified = 0
        self.bad_signatures = 0
        self.malformed = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                headers = {}
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                wall, mono = time.time(), time.monotonic()
                writer.write(self.record(headers, body, wall, mono))
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def record(self, headers: dict[str, str], body: bytes, wall: float, mono: float) -> bytes:
        from standardwebhooks.webhooks import WebhookVerificationError

        self.requests += 1
        if self.requests <= 10 or self.requests % self.sample == 0:
            try:
                self.hook.verify(body, headers, json_parse=False)
                self.verified += 1
            except WebhookVerificationError:
                self.bad_signatures += 1
                return REFUSED
        try:
            payload = json.loads(body)
            kind = str(payload.get("type", ""))
            run_id = str((payload.get("data") or {}).get("run_id") or "")
            stamp = str(payload.get("timestamp", ""))
        except (ValueError, AttributeError):
            self.malformed += 1
            kind = run_id = stamp = ""
        self.arrivals.append(
            Arrival(headers.get("webhook-id", ""), wall, mono, kind, run_id, stamp)
        )
        return OK

    def batch(self, prefix: str, ids: bool) -> dict[str, Any]:
        mine = [a for a in self.arrivals if a.run_id.startswith(prefix)]
        counts = Counter(a.webhook_id for a in mine)
        latencies = sorted(
            (a.wall - datetime.fromisoformat(a.timestamp).timestamp()) * 1000
            for a in mine
            if a.timestamp
        )

        def pct(p: float) -> float | None:
            if not latencies:
                return None
            rank = max(1, -(-len(latencies) * p // 100))
            return latencies[int(min(rank, len(latencies))) - 1]

        out: dict[str, Any] = {
            "requests": len(mine),
            "unique": len(counts),
            "duplicates": sum(n - 1 for n in counts.values()),
            "first_mono": min((a.mono for a in mine), default=None),
            "last_mono": max((a.mono for a in mine), default=None),
            "types": dict(Counter(a.type for a in mine)),
            "latency_ms": {"count": len(latencies), "p50": pct(50), "p99": pct(99)},
            "bad_signatures": self.bad_signatures,
        }
        if ids:
            out["ids"] = sorted(counts)
        return out


async def main() -> None:
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    rx = Receiver(os.environ["BENCH_WEBHOOK_SECRET"], int(cfg.get("sample", 10)))
    server = await asyncio.start_server(rx.handle, "127.0.0.1", 0, backlog=1024)
    ctl.say({"port": server.sockets[0].getsockname()[1]})

    async def handle(cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd["cmd"] == "batch":
            return rx.batch(cmd["prefix"], bool(cmd.get("ids")))
        if cmd["cmd"] == "count":
            return {"requests": rx.requests}
        if cmd["cmd"] == "stats":
            return {
                "requests": rx.requests,
                "verified": rx.verified,
                "bad_signatures": rx.bad_signatures,
                "malformed": rx.malformed,
            }
        raise ValueError(f"unknown command {cmd['cmd']!r}")

    async with server:
        await ctl.serve_commands(handle)


if __name__ == "__main__":
    ctl.run(main)
