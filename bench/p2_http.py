"""P2 / P2-pg: signals/s through ``POST /v1/runs/{id}/signals`` over keep-alive HTTP.

The server is the real ``runbell serve`` (SQLite, the embedded default: API, worker and
scheduler in one process) or one or two ``runbell api`` processes on one PostgreSQL,
started through the bench wrapper, which adds the no-op baseline ``POST /bench/noop``
(same kind of handler as the signal's, same server). The load generator is a separate
process (:mod:`bench.loadgen`), the same code for both.

Per configuration:

1. warm-up: both endpoints, closed loop; the signal rate sizes the repeats;
2. throughput: ``repeats`` × (no-op, signals) interleaved, closed loop with
   ``mode.p2_conns`` connections split over the API processes; each signal goes to a
   fresh working run (created before the repeat, not timed) and every batch is counted
   in the database afterwards;
3. latency: open loop at half the measured signal throughput (no coordinated
   omission: latency counts from each request's due time), interleaved with the no-op
   at the same rate; p99 per repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench import targets, verify
from bench.common import Check, CorrectnessError, Figure, Row, Tally, interleaved, ratios
from bench.context import Bench
from bench.servers import Db, Server

NOOP_COUNT = 50_000  # more no-op requests than any repeat can send


def signal_load(
    ctx: Bench,
    core: Any,
    read: Any,
    tenant: targets.Tenant,
    servers: Sequence[Server],
    prefix: str,
    *,
    mode: str,
    count: int,
    seconds: float,
    rate: float = 0.0,
) -> tuple[dict[str, Any], Tally]:
    """Create ``count`` working runs, send them ``completed`` signals, count the database."""
    targets.create_runs(core, tenant, [f"{prefix}{i}" for i in range(count)])
    result = ctx.loadgen(
        {
            "targets": [["127.0.0.1", s.port] for s in servers],
            "mode": mode,
            "conns": ctx.mode.p2_conns if mode == "closed" else 64,
            "seconds": seconds,
            "rate": rate,
            "request": {
                "kind": "signal",
                "token": tenant.runtime_key,
                "run_prefix": prefix,
                "count": count,
                "state": "completed",
            },
        }
    )
    tally = verify.check_signals(
        read,
        tenant.tenant_id,
        prefix,
        tally_id=prefix,
        sent=result["used"],
        applied=result["applied"],
        failed=len(result["failed_indexes"]),
        outcomes=result["outcomes"],
    )
    return result, tally


def noop_load(
    ctx: Bench, servers: Sequence[Server], *, mode: str, seconds: float, rate: float = 0.0
) -> dict[str, Any]:
    count = NOOP_COUNT if mode == "closed" else int(rate * seconds) + 1
    result = ctx.loadgen(
        {
            "targets": [["127.0.0.1", s.port] for s in servers],
            "mode": mode,
            "conns": ctx.mode.p2_conns if mode == "closed" else 64,
            "seconds": seconds,
            "rate": rate,
            "request": {"kind": "noop", "count": count},
        }
    )
    if result["failed_indexes"] or result["ok"] != result["sent"]:
        raise CorrectnessError(
            f"no-op baseline: {result['sent']} sent, {result['ok']} answered 2xx, "
            f"statuses {result['statuses']}, errors {result['errors']}"
        )
    return result


def measure(
    ctx: Bench,
    core: Any,
    tenant: targets.Tenant,
    db: Db,
    servers: Sequence[Server],
    label: str,
) -> tuple[Figure, Figure, Figure, Figure, Figure, list[Tally], float]:
    """(signals/s, no-op/s, signal p99 ms, no-op p99 ms, signal p50 ms, tallies, rate)."""
    mode = ctx.mode
    tallies: list[Tally] = []
    stats = servers[0].stats()
    ctx.note(
        "P2 no-op baseline handler: "
        + ("`async def`" if stats["signal_handler_async"] else "plain `def` (threadpool)")
        + ", the same kind as today's `POST /v1/runs/{id}/signals` handler."
    )
    with ctx.read_engine(db) as read:
        warm_s = max(0.3, mode.p2_seconds / 2)
        noop_load(ctx, servers, mode="closed", seconds=warm_s)
        warm, tally = signal_load(
            ctx, core, read, tenant, servers, f"{label}-warm-",
            mode="closed", count=40 if mode.tiny else 150, seconds=warm_s,
        )  # fmt: skip
        tallies.append(tally)
        per_repeat = [max(20, int(warm["throughput"] * mode.p2_seconds * 1.5) + 20)]
        subject, baseline = Figure("signals/s"), Figure("requests/s")

        def sig(rep: int) -> None:
            result, tally = signal_load(
                ctx, core, read, tenant, servers, f"{label}-{rep}-",
                mode="closed", count=per_repeat[0], seconds=mode.p2_seconds,
            )  # fmt: skip
            tallies.append(tally)
            subject.add(result["applied"] / result["elapsed_s"])
            if result["used"] >= per_repeat[0]:  # ran out of runs early: more next time
                per_repeat[0] *= 2

        def noop(rep: int) -> None:
            baseline.add(
                noop_load(ctx, servers, mode="closed", seconds=mode.p2_seconds)["throughput"]
            )

        interleaved(mode.repeats, sig, noop)

        rate = max(1.0, subject.median / 2)
        p99, noop_p99, p50 = Figure("ms"), Figure("ms"), Figure("ms")
        count = int(rate * mode.p2_open_seconds) + 2

        def sig_open(rep: int) -> None:
            result, tally = signal_load(
                ctx, core, read, tenant, servers, f"{label}-o{rep}-",
                mode="open", count=count, seconds=mode.p2_open_seconds, rate=rate,
            )  # fmt: skip
            tallies.append(tally)
            p99.add(result["latency_ms"]["p99"])
            p50.add(result["latency_ms"]["p50"])

        def noop_open(rep: int) -> None:
            result = noop_load(ctx, servers, mode="open", seconds=mode.p2_open_seconds, rate=rate)
            noop_p99.add(result["latency_ms"]["p99"])

        interleaved(mode.repeats, sig_open, noop_open)
    return subject, baseline, p99, noop_p99, p50, tallies, rate


def add_rows(
    ctx: Bench,
    row_id: str,
    what: str,
    figures: tuple[Figure, Figure, Figure, Figure, Figure, list[Tally], float],
    *,
    floor_ratio: float,
    floor_p99: float,
    goal_ratio: float | None,
) -> None:
    """Floors and goals are ratios to the no-op measured in the same run (issue 21: absolute
    rates are sanity checks, printed, never a floor — they say more about the machine)."""
    subject, baseline, p99, noop_p99, p50, tallies, rate = figures
    goal = []
    if goal_ratio is not None:
        goal.append(Check("ratio", ">=", goal_ratio, f"≥ {goal_ratio}× no-op"))
    ctx.add(
        Row(
            id=row_id,
            what=what,
            measured=subject,
            baseline=baseline,
            baseline_what="no-op endpoint, same kind, same server, same load generator",
            ratio=ratios(subject, baseline),
            floor=(Check("ratio", ">=", floor_ratio, f"≥ {floor_ratio}× no-op"),),
            goal=tuple(goal),
        )
    )
    ctx.add(
        Row(
            id=f"{row_id} p99",
            what=f"latency of the same POST, open loop at {rate:,.0f}/s (half the max), "
            f"from each request's due time",
            measured=p99,
            baseline=noop_p99,
            baseline_what="no-op at the same rate",
            ratio=ratios(p99, noop_p99),
            floor=(Check("value", "<=", floor_p99, f"p99 ≤ {floor_p99:.0f} ms"),),
            note=f"p50 {p50.median:.1f} ms",
        )
    )
    ctx.tallies.append(verify.merge(tallies, row_id))


def run_sqlite(ctx: Bench) -> None:
    with ctx.database("sqlite", "p2") as db, ctx.core(db) as core:
        tenant = targets.setup_tenant(core)
        with ctx.servers(db, "serve") as servers:
            ctx.say("P2 sqlite: runbell serve")
            figures = measure(ctx, core, tenant, db, servers, "p2-sq")
        add_rows(
            ctx,
            "P2 sqlite",
            "signals/s through `POST /v1/runs/{id}/signals` on `runbell serve`, keep-alive, "
            f"{ctx.mode.p2_conns} connections from a separate load process",
            figures,
            floor_ratio=0.3,  # issue 21 (re-based on the first pass's figures)
            floor_p99=50,
            goal_ratio=0.5,
        )


def run_postgres(ctx: Bench) -> None:
    with ctx.database("postgres", "p2") as db, ctx.core(db) as core:
        tenant = targets.setup_tenant(core)
        for procs in (1, 2):
            with ctx.servers(db, "api", n=procs) as servers:
                ctx.say(f"P2-pg: {procs} x runbell api")
                figures = measure(ctx, core, tenant, db, servers, f"p2-pg{procs}")
            ctx.facts[f"P2-pg {procs}"] = figures[0].median
            add_rows(
                ctx,
                f"P2-pg {procs} api",
                f"the same on PostgreSQL, {procs} `runbell api` process"
                + ("es (connections split)" if procs > 1 else ""),
                figures,
                floor_ratio=0.3,  # the first pass's; issue 21 names no PostgreSQL P2 floor
                floor_p99=100,
                goal_ratio=None,
            )
