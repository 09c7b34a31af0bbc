"""The load generator: a separate, cheap process (asyncio, raw keep-alive HTTP/1.1).

It shares two cores with the server, so it does as little as it can: every request's
bytes are built before the clock starts, responses are parsed just enough (status line,
``Content-Length`` or chunked framing, the ``outcome`` of a signal), and the no-op
baseline and the signals go through the very same code, so their ratio is fair.

Two ways to load:

- **closed** (throughput): ``conns`` connections, each sending its next request as soon
  as the previous answer arrived, until ``seconds`` have passed or the requests run out;
- **open** (latency, no coordinated omission): request *i* is due at ``t0 + i / rate``,
  whatever happened before; it goes out on an idle connection (a new one is opened, up
  to ``conns``, when none is idle) and its latency counts from when it was *due*, so a
  slow server's queueing shows in the figures instead of silently slowing the load.

Usage: ``python -m bench.loadgen '<json config>'`` prints one JSON object (the suite
instead keeps one ``'{"serve": true}'`` process and sends it ``run`` commands, see
:mod:`bench.ctl`)::

    {"targets": [["127.0.0.1", 8080]], "mode": "closed", "conns": 8, "seconds": 2,
     "rate": 100, "request": {"kind": "signal", "token": "...", "run_prefix": "p2-3-",
     "count": 600, "state": "completed"}}

``request.kind`` is ``signal`` (``POST /v1/runs/{run}/signals`` to runs
``<run_prefix>0 … <run_prefix><count-1>``, one run per request, in order, each with the
unique event id ``<run>-done``), ``noop`` (``POST /bench/noop``, the same bodies) or
``get`` (``path``, with the token), ``put`` (``PUT /v1/runs/{run}`` creating the working
run ``<run_prefix><i>`` for ``owner``; a ``201`` counts as applied) or ``agent`` (closed
loop only: each of ``count`` simulated agents, one at a time per connection, creates its
run ``<run_prefix><i>``, reports 5 progress, opens one input request, answers it with
``owner_token`` and reports ``completed`` — 9 requests in order; an agent whose 9 were
all answered 2xx counts as applied).
The result lists how many requests were sent and answered, by status and by signal
outcome, the run ids that were used, elapsed seconds and latency percentiles (ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from collections import Counter, deque
from typing import Any

from bench import ctl

OUTCOME = re.compile(rb'"outcome"\s*:\s*"(\w+)"')


def build_requests(cfg: dict[str, Any], count: int) -> list[bytes]:
    req = cfg["request"]
    kind = req["kind"]
    out: list[bytes] = []
    if kind == "get":
        head = (
            f"GET {req['path']} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {req['token']}\r\n\r\n"
        ).encode()
        return [head] * count
    if kind == "put":
        return [_put(req, f"{req['run_prefix']}{i}") for i in range(count)]
    prefix = req.get("run_prefix", "noop-")
    for i in range(count):
        run_id = f"{prefix}{i}"
        body = json.dumps(
            {"event_id": f"{run_id}-done", "state": req.get("state", "completed")},
            separators=(",", ":"),
        ).encode()
        if kind == "signal":
            path = f"/v1/runs/{run_id}/signals"
            auth = f"Authorization: Bearer {req['token']}\r\n"
        else:
            path, auth = "/bench/noop", ""
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        out.append(head + body)
    return out


def _request(method: str, path: str, token: str, doc: dict[str, Any], extra: str = "") -> bytes:
    body = json.dumps(doc, separators=(",", ":")).encode()
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"{extra}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def _put(req: dict[str, Any], run_id: str) -> bytes:
    doc = {"owner": req["owner"], "state": "working", "title": "bench run"}
    return _request("PUT", f"/v1/runs/{run_id}", req["token"], doc)


#: Requests one simulated agent sends (see the module docstring).
AGENT_STEPS = 9


def agent_requests(req: dict[str, Any], run_id: str) -> list[bytes]:
    """One agent's run, in order: create, 5 progress, ask, the owner's answer, completed.
    The versions are known in advance: created at 1, the request moves it to 2."""
    token = req["token"]
    out = [_put(req, run_id)]
    for step in range(5):
        doc = {"message": f"step {step + 1}", "counts": {"done": step + 1, "total": 5}}
        out.append(_request("POST", f"/v1/runs/{run_id}/progress", token, doc))
    ask = {"input_request_id": f"{run_id}-q", "kind": "approval", "summary": "Ship it?"}
    out.append(_request("POST", f"/v1/runs/{run_id}/input-requests", token, ask))
    answer = {"decision": "approve", "expected_run_version": 2, "expected_request_version": 1}
    out.append(
        _request(
            "POST",
            f"/v1/input-requests/{run_id}-q/responses",
            req["owner_token"],
            answer,
            f"Idempotency-Key: {run_id}-a\r\n",
        )
    )
    done = {"event_id": f"{run_id}-done", "state": "completed"}
    out.append(_request("POST", f"/v1/runs/{run_id}/signals", token, done))
    return out


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.closed = False

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send one request, read its answer. ``self.closed`` is set when the server
        said it will close the connection (the answer still counts)."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        body = b""
        at = lower.find(b"content-length:")
        if at >= 0:
            end = lower.index(b"\r\n", at)
            length = int(lower[at + 15 : end])
            body = await self.reader.readexactly(length) if length else b""
        elif b"transfer-encoding: chunked" in lower:
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            body = b"".join(parts)
        self.closed = b"connection: close" in lower
        return status, body

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Tally:
    def __init__(self, want_outcome: bool, created: bool = False) -> None:
        self.want_outcome = want_outcome
        self.created = created  # a PUT: applied when it created the run (201)
        self.statuses: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.ok = 0
        self.first_send = 0.0
        self.last_answer = 0.0
        self.applied: list[int] = []  # request indexes whose signal was applied
        self.failed: list[int] = []  # request indexes with no (or a non-2xx) answer

    def record(self, index: int, status: int, body: bytes, latency: float) -> None:
        self.statuses[str(status)] += 1
        self.latencies.append(latency)
        self.last_answer = time.perf_counter()
        if 200 <= status < 300:
            self.ok += 1
            if self.created:
                if status == 201:
                    self.applied.append(index)
            elif self.want_outcome:
                m = OUTCOME.search(body)
                outcome = m.group(1).decode() if m else "?"
                self.outcomes[outcome] += 1
                if outcome == "applied":
                    self.applied.append(index)
        else:
            self.failed.append(index)

    def error(self, index: int, exc: BaseException) -> None:
        self.errors[type(exc).__name__] += 1
        self.failed.append(index)


async def closed_loop(cfg: dict[str, Any], requests: list[bytes], tally: Tally) -> None:
    targets = cfg["targets"]
    conns = [
        await Conn.open(*targets[i % len(targets)]) for i in range(min(cfg["conns"], len(requests)))
    ]
    next_index = 0
    deadline = 0.0

    async def drive(conn: Conn, target: tuple[str, int]) -> None:
        nonlocal next_index
        while next_index < len(requests) and time.perf_counter() < deadline:
            i = next_index
            next_index += 1
            t = time.perf_counter()
            try:
                status, body = await asyncio.wait_for(conn.exchange(requests[i]), cfg["timeout"])
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                tally.error(i, exc)
                conn.close()
                conn = await Conn.open(*target)
                continue
            tally.record(i, status, body, time.perf_counter() - t)
            if conn.closed:
                conn.close()
                conn = await Conn.open(*target)
        conn.close()

    tally.first_send = time.perf_counter()
    deadline = tally.first_send + cfg["seconds"]
    await asyncio.gather(*(drive(c, tuple(targets[i % len(targets)])) for i, c in enumerate(conns)))


async def agent_loop(cfg: dict[str, Any], agents: list[list[bytes]], tally: Tally) -> None:
    """Closed loop over agents: each connection runs one agent's requests in order, then
    takes the next agent, until ``seconds`` have passed or the agents run out. An agent
    is applied when all its requests were answered 2xx (index: the agent's)."""
    targets = cfg["targets"]
    next_agent = 0
    deadline = 0.0

    async def drive(target: tuple[str, int]) -> None:
        nonlocal next_agent
        conn = await Conn.open(*target)
        while next_agent < len(agents) and time.perf_counter() < deadline:
            a = next_agent
            next_agent += 1
            good = True
            for request in agents[a]:
                t = time.perf_counter()
                try:
                    status, _ = await asyncio.wait_for(conn.exchange(request), cfg["timeout"])
                except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                    tally.errors[type(exc).__name__] += 1
                    conn.close()
                    conn = await Conn.open(*target)
                    good = False
                    break
                tally.statuses[str(status)] += 1
                tally.latencies.append(time.perf_counter() - t)
                tally.last_answer = time.perf_counter()
                if not 200 <= status < 300:
                    good = False
                    break
                tally.ok += 1
                if conn.closed:
                    conn.close()
                    conn = await Conn.open(*target)
            (tally.applied if good else tally.failed).append(a)
        conn.close()

    tally.first_send = time.perf_counter()
    deadline = tally.first_send + cfg["seconds"]
    conns = min(cfg["conns"], len(agents))
    await asyncio.gather(*(drive(tuple(targets[i % len(targets)])) for i in range(conns)))


async def open_loop(cfg: dict[str, Any], requests: list[bytes], tally: Tally) -> None:
    targets = cfg["targets"]
    rate = float(cfg["rate"])
    idle: deque[tuple[Conn, int]] = deque()
    opened = 0
    freed = asyncio.Condition()
    for i in range(min(4, cfg["conns"])):
        idle.append((await Conn.open(*targets[i % len(targets)]), i % len(targets)))
        opened += 1

    async def take() -> tuple[Conn, int]:
        nonlocal opened
        while True:
            if idle:
                return idle.popleft()
            if opened < cfg["conns"]:
                which = opened % len(targets)
                opened += 1
                return await Conn.open(*targets[which]), which
            async with freed:
                await freed.wait()

    async def give(conn: Conn, which: int) -> None:
        idle.append((conn, which))
        async with freed:
            freed.notify()

    async def one(i: int, due: float) -> None:
        nonlocal opened
        conn, which = await take()
        try:
            status, body = await asyncio.wait_for(conn.exchange(requests[i]), cfg["timeout"])
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            tally.error(i, exc)
            conn.close()
            opened -= 1
            async with freed:
                freed.notify()
            return
        tally.record(i, status, body, time.perf_counter() - due)
        if conn.closed:
            conn.close()
            conn = await Conn.open(*targets[which])
        await give(conn, which)

    total = min(len(requests), int(rate * cfg["seconds"]))
    tasks = []
    t0 = time.perf_counter() + 0.05
    tally.first_send = t0
    for i in range(total):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
    await asyncio.gather(*tasks)
    for conn, _ in idle:
        conn.close()


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def pct(p: float) -> float:
        rank = max(1, -(-len(ordered) * p // 100))
        return ordered[int(min(rank, len(ordered))) - 1] * 1000

    return {
        "count": len(ordered),
        "p50": pct(50),
        "p90": pct(90),
        "p99": pct(99),
        "max": ordered[-1] * 1000,
    }


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg.setdefault("timeout", 30.0)
    cfg.setdefault("conns", 8)
    cfg.setdefault("seconds", 2.0)
    count = int(cfg["request"].get("count") or 100_000)
    if cfg["mode"] == "open":
        count = min(count, int(cfg["rate"] * cfg["seconds"]))
    kind = cfg["request"]["kind"]
    tally = Tally(want_outcome=kind == "signal", created=kind == "put")
    if kind == "agent":
        req = cfg["request"]
        agents = [agent_requests(req, f"{req['run_prefix']}{i}") for i in range(count)]
        await agent_loop(cfg, agents, tally)
        elapsed = max(1e-9, tally.last_answer - tally.first_send)
        return {
            "sent": len(tally.latencies) + sum(tally.errors.values()),
            "ok": tally.ok,
            "statuses": dict(tally.statuses),
            "errors": dict(tally.errors),
            "elapsed_s": elapsed,
            "throughput": tally.ok / elapsed,  # requests/s
            "latency_ms": summary(tally.latencies),
            "agents": len(tally.applied) + len(tally.failed),
            "applied": len(tally.applied),  # agents whose every request was answered 2xx
            "failed_indexes": sorted(tally.failed),
        }
    requests = build_requests(cfg, count)
    if cfg["mode"] == "closed":
        await closed_loop(cfg, requests, tally)
    else:
        await open_loop(cfg, requests, tally)
    sent = len(tally.latencies) + sum(tally.errors.values())
    elapsed = max(1e-9, tally.last_answer - tally.first_send)
    return {
        "sent": sent,
        "ok": tally.ok,
        "statuses": dict(tally.statuses),
        "outcomes": dict(tally.outcomes),
        "errors": dict(tally.errors),
        "elapsed_s": elapsed,
        "throughput": tally.ok / elapsed,
        "latency_ms": summary(tally.latencies),
        "used": sent,  # requests 0..used-1 were sent (runs <prefix>0..<prefix>used-1)
        "failed_indexes": sorted(tally.failed),
        "applied": len(tally.applied),
    }


async def serve() -> None:
    """Stay up and run one load per ``{"cmd": "run", "config": {...}}`` line (saves a
    process start per repeat; each run still opens its own connections)."""
    ctl.say({"ready": True})

    async def handle(cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd["cmd"] == "run":
            return await main(cmd["config"])
        raise ValueError(f"unknown command {cmd['cmd']!r}")

    await ctl.serve_commands(handle)


def run(argv: list[str]) -> None:
    cfg = json.loads(argv[0])
    if cfg.get("serve"):
        ctl.run(serve)
        return
    result: dict[str, Any] = {}

    async def once() -> None:
        result.update(await main(cfg))

    ctl.run(once)
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    run(sys.argv[1:])
