"""P2-put and the mixed agent workload: run writes other than signals, over keep-alive HTTP.

Both on the real ``runbell serve`` (SQLite) through the bench wrapper, against the same
no-op baseline as P2 (:func:`bench.p2_http.noop_load`), from the same load generator
process (:mod:`bench.loadgen`).

- **P2-put**: ``PUT /v1/runs/{id}`` creating fresh working runs (the call every agent
  run starts with), ``mode.p2_conns`` connections. Throughput closed loop, interleaved
  with the no-op; then p99 open loop at half the measured rate, interleaved with the
  no-op at the same rate. Counted: every run answered ``201`` exists once, with one
  ``create`` transition.
- **P2-mixed**: ``mode.p2_conns`` simulated agents at a time, each: create its run, 5
  progress, open 1 input request, the owner answers it, ``completed`` — 9 requests in
  order (:func:`bench.loadgen.agent_requests`). Requests/s closed loop, against the
  no-op's requests/s on as many connections. Counted: every agent whose 9 requests were
  answered has one completed run, one answered request, one response, 5 progress
  updates' worth of ``run.progress`` feed events.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import targets
from bench.common import Check, CorrectnessError, Figure, Row, Tally, interleaved, ratios
from bench.context import Bench
from bench.p2_http import noop_load
from bench.servers import Server

PUT_SQL = sa.text(
    """
    SELECT
      (SELECT count(*) FROM runs WHERE tenant_id = :t AND run_id LIKE :p) AS runs,
      (SELECT count(*) FROM transitions
        WHERE tenant_id = :t AND run_id LIKE :p AND kind = 'create') AS creates
    """
)

AGENTS_SQL = sa.text(
    """
    SELECT
      (SELECT count(*) FROM runs
        WHERE tenant_id = :t AND run_id LIKE :p AND state = 'completed') AS completed,
      (SELECT count(*) FROM transitions
        WHERE tenant_id = :t AND run_id LIKE :p AND kind = 'create') AS creates,
      (SELECT count(*) FROM input_requests
        WHERE tenant_id = :t AND run_id LIKE :p AND state = 'answered') AS answered,
      (SELECT count(*) FROM responses r JOIN input_requests q
          ON q.tenant_id = r.tenant_id AND q.id = r.input_request_id
        WHERE q.tenant_id = :t AND q.run_id LIKE :p) AS responses,
      (SELECT count(*) FROM feed_events
        WHERE tenant_id = :t AND run_id LIKE :p AND type = 'run.progress') AS progress
    """
)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the server process has used so far (Linux ``/proc``;
    NaN elsewhere): divided by the requests of one load, a figure the machine's other
    load barely moves, unlike the rates."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuPerRequest:
    """The server's CPU ms per answered request, one figure per load."""

    def __init__(self, server: Server) -> None:
        self.pid = server.pid
        self.values: list[float] = []

    def measure(self, load: Any) -> dict[str, Any]:
        before = _cpu_s(self.pid)
        result: dict[str, Any] = load()
        if result.get("ok"):
            self.values.append((_cpu_s(self.pid) - before) * 1000 / result["ok"])
        return result

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")


def _put_load(
    ctx: Bench,
    read: sa.Engine,
    tenant: targets.Tenant,
    server: Server,
    prefix: str,
    *,
    mode: str,
    count: int,
    seconds: float,
    rate: float = 0.0,
) -> tuple[dict[str, Any], Tally]:
    result = ctx.loadgen(
        {
            "targets": [["127.0.0.1", server.port]],
            "mode": mode,
            "conns": ctx.mode.p2_conns if mode == "closed" else 64,
            "seconds": seconds,
            "rate": rate,
            "request": {
                "kind": "put",
                "token": tenant.runtime_key,
                "owner": tenant.owner_email,
                "run_prefix": prefix,
                "count": count,
            },
        }
    )
    with read.connect() as conn:
        row = conn.execute(PUT_SQL, {"t": tenant.tenant_id, "p": f"{prefix}%"}).one()
    created, failed = result["applied"], len(result["failed_indexes"])
    ok = row.runs == created == row.creates and not failed and result["ok"] == result["sent"]
    tally = Tally(
        prefix,
        sent=result["sent"],
        stored=int(row.runs),
        detail=f"{created} answered 201, {row.runs} runs stored, {row.creates} creations, "
        f"{failed} failed ({result['statuses']})",
        ok=ok,
    )
    if not ok:
        raise CorrectnessError(f"P2-put {prefix}: {tally.detail}")
    return result, tally


def _merged(tallies: list[Tally], row_id: str) -> Tally:
    return Tally(
        row_id,
        sent=sum(t.sent for t in tallies),
        stored=sum(t.stored for t in tallies),
        detail="every run created once",
        ok=all(t.ok for t in tallies),
    )


def run_put(ctx: Bench) -> None:
    mode = ctx.mode
    with ctx.database("sqlite", "p2put") as db, ctx.core(db) as core:
        tenant = targets.setup_tenant(core)
        with ctx.servers(db, "serve") as servers, ctx.read_engine(db) as read:
            server = servers[0]
            ctx.say("P2-put sqlite: runbell serve")
            tallies: list[Tally] = []
            warm_s = max(0.3, mode.p2_seconds / 2)
            noop_load(ctx, servers, mode="closed", seconds=warm_s)
            warm, tally = _put_load(
                ctx, read, tenant, server, "put-warm-", mode="closed",
                count=40 if mode.tiny else 150, seconds=warm_s,
            )  # fmt: skip
            tallies.append(tally)
            per_repeat = max(20, int(warm["throughput"] * mode.p2_seconds * 1.5) + 20)
            subject, baseline = Figure("runs/s"), Figure("requests/s")
            put_cpu, noop_cpu = CpuPerRequest(server), CpuPerRequest(server)

            def put(rep: int) -> None:
                loaded: list[Tally] = []

                def load() -> dict[str, Any]:
                    result, tally = _put_load(
                        ctx, read, tenant, server, f"put-{rep}-", mode="closed",
                        count=per_repeat, seconds=mode.p2_seconds,
                    )  # fmt: skip
                    loaded.append(tally)
                    return result

                result = put_cpu.measure(load)
                tallies.extend(loaded)
                subject.add(result["applied"] / result["elapsed_s"])

            def noop(rep: int) -> None:
                result = noop_cpu.measure(
                    lambda: noop_load(ctx, servers, mode="closed", seconds=mode.p2_seconds)
                )
                baseline.add(result["throughput"])

            interleaved(mode.repeats, put, noop)
            rate = max(1.0, subject.median / 2)
            p99, noop_p99, p50 = Figure("ms"), Figure("ms"), Figure("ms")
            count = int(rate * mode.p2_open_seconds) + 2

            def put_open(rep: int) -> None:
                result, tally = _put_load(
                    ctx, read, tenant, server, f"put-o{rep}-", mode="open", count=count,
                    seconds=mode.p2_open_seconds, rate=rate,
                )  # fmt: skip
                tallies.append(tally)
                p99.add(result["latency_ms"]["p99"])
                p50.add(result["latency_ms"]["p50"])

            def noop_open(rep: int) -> None:
                result = noop_load(
                    ctx, servers, mode="open", seconds=mode.p2_open_seconds, rate=rate
                )
                noop_p99.add(result["latency_ms"]["p99"])

            interleaved(mode.repeats, put_open, noop_open)
    ctx.add(
        Row(
            id="P2-put",
            what="runs created/s through `PUT /v1/runs/{id}` (fresh ids) on `runbell serve`, "
            f"SQLite, keep-alive, {mode.p2_conns} connections from a separate load process",
            measured=subject,
            baseline=baseline,
            baseline_what="no-op endpoint, same server, same load generator",
            ratio=ratios(subject, baseline),
            floor=(Check("ratio", ">=", 0.2, "≥ 0.2× no-op"),),
            goal=(Check("ratio", ">=", 0.4, "≥ 0.4× no-op"),),
            note=f"server CPU per request: PUT {put_cpu.median:.2f} ms, no-op "
            f"{noop_cpu.median:.2f} ms",
        )
    )
    ctx.add(
        Row(
            id="P2-put p99",
            what=f"latency of the same PUT, open loop at {rate:,.0f}/s (half the max), "
            "from each request's due time",
            measured=p99,
            baseline=noop_p99,
            baseline_what="no-op at the same rate",
            ratio=ratios(p99, noop_p99),
            floor=(Check("value", "<=", 50, "p99 ≤ 50 ms"),),
            note=f"p50 {p50.median:.1f} ms",
        )
    )
    ctx.tallies.append(_merged(tallies, "P2-put"))


def _agents_load(
    ctx: Bench, read: sa.Engine, tenant: targets.Tenant, server: Server, prefix: str, *,
    count: int, seconds: float,
) -> tuple[dict[str, Any], Tally]:  # fmt: skip
    result = ctx.loadgen(
        {
            "targets": [["127.0.0.1", server.port]],
            "mode": "closed",
            "conns": ctx.mode.p2_conns,
            "seconds": seconds,
            "request": {
                "kind": "agent",
                "token": tenant.runtime_key,
                "owner": tenant.owner_email,
                "owner_token": tenant.owner_token,
                "run_prefix": prefix,
                "count": count,
            },
        }
    )
    with read.connect() as conn:
        row = conn.execute(AGENTS_SQL, {"t": tenant.tenant_id, "p": f"{prefix}%"}).one()
    agents, failed = result["applied"], len(result["failed_indexes"])
    ok = (
        not failed
        and row.completed == row.creates == row.answered == row.responses == agents
        and row.progress == 5 * agents
    )
    tally = Tally(
        prefix,
        sent=agents,
        stored=int(row.completed),
        detail=f"{agents} agents answered in full, {failed} failed ({result['statuses']}); "
        f"stored: {row.completed} completed runs, {row.creates} creations, {row.answered} "
        f"answered requests, {row.responses} responses, {row.progress} progress events",
        ok=ok,
    )
    if not ok:
        raise CorrectnessError(f"mixed {prefix}: {tally.detail}")
    return result, tally


def run_mixed(ctx: Bench) -> None:
    mode = ctx.mode
    with ctx.database("sqlite", "mixed") as db, ctx.core(db) as core:
        tenant = targets.setup_tenant(core)
        with ctx.servers(db, "serve") as servers, ctx.read_engine(db) as read:
            server = servers[0]
            ctx.say("mixed agent workload sqlite: runbell serve")
            tallies: list[Tally] = []
            warm_s = max(0.3, mode.p2_seconds / 2)
            noop_load(ctx, servers, mode="closed", seconds=warm_s)
            warm, tally = _agents_load(
                ctx, read, tenant, server, "agw-", count=8 if mode.tiny else 40, seconds=warm_s
            )
            tallies.append(tally)
            agents_per_s = warm["applied"] / warm["elapsed_s"]
            per_repeat = max(16, int(agents_per_s * mode.p2_seconds * 1.5) + 16)
            subject, baseline = Figure("requests/s"), Figure("requests/s")
            agent_rate = Figure("agents/s")
            agent_cpu, noop_cpu = CpuPerRequest(server), CpuPerRequest(server)

            def agents(rep: int) -> None:
                loaded: list[Tally] = []

                def load() -> dict[str, Any]:
                    result, tally = _agents_load(
                        ctx, read, tenant, server, f"ag{rep}-", count=per_repeat,
                        seconds=mode.p2_seconds,
                    )  # fmt: skip
                    loaded.append(tally)
                    return result

                result = agent_cpu.measure(load)
                tallies.extend(loaded)
                subject.add(result["throughput"])
                agent_rate.add(result["applied"] / result["elapsed_s"])

            def noop(rep: int) -> None:
                result = noop_cpu.measure(
                    lambda: noop_load(ctx, servers, mode="closed", seconds=mode.p2_seconds)
                )
                baseline.add(result["throughput"])

            interleaved(mode.repeats, agents, noop)
    ctx.add(
        Row(
            id="P2-mixed",
            what=f"mixed agent workload, {mode.p2_conns} agents at a time on `runbell serve` "
            "SQLite: each creates its run, 5 progress, 1 input request, the owner's answer, "
            "completed (9 requests in order); requests/s",
            measured=subject,
            baseline=baseline,
            baseline_what=f"no-op requests/s, {mode.p2_conns} connections, same server",
            ratio=ratios(subject, baseline),
            note=f"{agent_rate.median:,.1f} agents/s; server CPU per request: "
            f"{agent_cpu.median:.2f} ms, no-op {noop_cpu.median:.2f} ms",
        )
    )
    ctx.tallies.append(
        Tally(
            "P2-mixed",
            sent=sum(t.sent for t in tallies),
            stored=sum(t.stored for t in tallies),
            detail="every agent's run created once, asked, answered, completed",
            ok=all(t.ok for t in tallies),
        )
    )
