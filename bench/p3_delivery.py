"""P3 (webhook deliveries/s drained by `runbell worker` processes) and P4 (commit → webhook
received, open loop at half of P3's max), on PostgreSQL, to a local keep-alive receiver.

P3 per worker count (1, 2, 4 processes, rate limits raised through
``RUNBELL_WEBHOOK_RATE_PER_S``): ``n`` queued ``run.finished`` messages are written in
one transaction the way the feed fan-out writes them (:func:`bench.targets.
queue_webhook_messages`; the commit wakes the workers over LISTEN/NOTIFY like any
commit), and the figure is ``n / (last arrival at the receiver − that commit)``. The
receiver (:mod:`bench.receiver`) verifies signatures on a sample and counts each
``webhook-id``; then every row must be ``accepted`` and have arrived exactly once.

Baseline, interleaved: the same number of threads running a raw loop over the same
``deliveries`` table — claim ``k`` rows (``SELECT … FOR UPDATE SKIP LOCKED LIMIT k`` +
``UPDATE`` to a lease, one transaction), then settle each row with its own ``UPDATE`` +
``COMMIT`` — the least durable work a claim-and-record outbox needs per message, without
HTTP. ``k`` is Runbell's own claim batch (``worker_batch``). Its rows carry a status no
worker claims (``bench_queued``), so the two never take each other's rows.

P4: one ``runbell api`` and the P3-best number of workers; signals go out open loop
(:mod:`bench.loadgen`) to runs whose completion makes three webhook messages
(``run.transitioned``, ``run.finished``, ``notification.created`` — the endpoint
subscribes to these), at a rate that makes half of P3's max deliveries/s, capped at
half of P2-pg's signal throughput (the API cannot take more). Latency = arrival time at
the receiver − the payload's ``timestamp`` (the signal transaction's clock reading,
taken when it began: the figure includes the commit itself).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench import targets, verify
from bench.common import (
    Check,
    Child,
    CorrectnessError,
    Figure,
    Row,
    Tally,
    interleaved,
    ratios,
    sized,
    wait_until,
)
from bench.context import Bench
from bench.servers import Db

CLAIM_BATCH = 100  # Settings.worker_batch's default; the raw loop claims as many
P4_TYPES = ("run.transitioned", "run.finished", "notification.created")


@dataclass
class Setup:
    db: Db
    core: Any
    tenant: targets.Tenant
    endpoint_id: str
    rx: Child
    env: dict[str, str]


@contextmanager
def delivery_setup(ctx: Bench, name: str, event_types: tuple[str, ...]) -> Iterator[Setup]:
    secret = targets.new_webhook_secret()
    with (
        ctx.database("postgres", name) as db,
        ctx.core(db) as core,
        Child(
            "bench.receiver", {"sample": 10}, ctx.logs / f"{name}-receiver.log",
            BENCH_WEBHOOK_SECRET=secret,
        ) as rx,
    ):  # fmt: skip
        tenant = targets.setup_tenant(core)
        port = rx.hello["port"]
        endpoint_id = targets.add_webhook_endpoint(
            core, tenant, f"http://127.0.0.1:{port}/hook", secret, event_types
        )
        env = {
            "RUNBELL_OUTBOUND_ALLOW_HOSTS": json.dumps([f"127.0.0.1:{port}"]),
            "RUNBELL_WEBHOOK_RATE_PER_S": "1000000",  # limits raised: measure the engine
            "RUNBELL_WORKER_POLL_S": "1.0",
        }
        yield Setup(db, core, tenant, endpoint_id, rx, env)


def wait_received(s: Setup, total: int, timeout: float) -> None:
    """Wait for the receiver to hold ``total`` requests; in a fast run, messages that do
    not arrive within ``timeout`` are lost."""
    try:
        wait_until(
            lambda: s.rx.call("count")["requests"] >= total,
            f"{total} webhook requests at the receiver",
            timeout,
        )
    except TimeoutError:
        got = s.rx.call("count")["requests"]
        raise CorrectnessError(
            f"lost: the receiver holds {got} requests, {total} expected after {timeout:.0f}s"
        ) from None


def settle(ctx: Bench, s: Setup, read: Any, prefix: str, expected: int) -> None:
    """Wait until the workers have recorded every message of the batch as accepted."""
    with contextlib.suppress(TimeoutError):  # check_deliveries then says what is missing
        wait_until(
            lambda: (
                verify.webhook_statuses(read, s.tenant.tenant_id, prefix).get("accepted", 0)
                >= expected
            ),
            f"{expected} deliveries of {prefix} recorded",
            30.0,
            every=0.1,
        )


def worker_drain(ctx: Bench, s: Setup, read: Any, prefix: str, n: int) -> tuple[float, Tally]:
    before = s.rx.call("count")["requests"]
    targets.queue_webhook_messages(
        s.core, s.tenant, s.endpoint_id, [f"{prefix}{i}" for i in range(n)]
    )
    committed = time.monotonic()
    wait_received(s, before + n, timeout=max(60.0, n / 20))
    got = s.rx.call("batch", prefix=prefix, ids=True)
    settle(ctx, s, read, prefix, n)
    tally = verify.check_deliveries(
        read, s.tenant.tenant_id, prefix, got, tally_id=prefix, expected=n
    )
    return n / max(1e-9, got["last_mono"] - committed), tally


def raw_drain(s: Setup, read: Any, prefix: str, n: int, threads: int) -> float:
    import psycopg

    targets.queue_webhook_messages(
        s.core, s.tenant, s.endpoint_id, [f"{prefix}{i}" for i in range(n)], status="bench_queued"
    )
    conns = [psycopg.connect(s.db.psycopg_dsn()) for _ in range(threads)]
    gate = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def loop(conn: Any, me: str) -> None:
        gate.wait()
        try:
            with conn.cursor() as cur:
                while True:
                    cur.execute(
                        "SELECT id FROM deliveries WHERE status = 'bench_queued' "
                        "AND next_attempt_at <= now() ORDER BY next_attempt_at "
                        "LIMIT %s FOR UPDATE SKIP LOCKED",
                        (CLAIM_BATCH,),
                    )
                    ids = [r[0] for r in cur.fetchall()]
                    if not ids:
                        conn.commit()
                        return
                    cur.execute(
                        "UPDATE deliveries SET status = 'bench_sending', claimed_by = %s, "
                        "lease_until = now() + interval '60 seconds', "
                        "attempt_count = attempt_count + 1, updated_at = now() "
                        "WHERE id = ANY(%s)",
                        (me, ids),
                    )
                    conn.commit()
                    for delivery_id in ids:
                        cur.execute(
                            "UPDATE deliveries SET status = 'accepted', lease_until = NULL, "
                            "claimed_by = NULL, updated_at = now() WHERE id = %s",
                            (delivery_id,),
                        )
                        conn.commit()
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=loop, args=(c, f"raw-{i}")) for i, c in enumerate(conns)]
    for w in workers:
        w.start()
    gate.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    if errors:
        raise errors[0]
    statuses = verify.webhook_statuses(read, s.tenant.tenant_id, prefix)
    if statuses != {"accepted": n}:
        raise CorrectnessError(f"raw claim loop {prefix}: statuses {statuses}, {n} expected")
    return n / elapsed


def measure_workers(
    ctx: Bench, s: Setup, read: Any, workers: int
) -> tuple[Figure, Figure, list[Tally], int]:
    """Warm up, size, then interleave worker drains and raw drains."""
    mode = ctx.mode
    tallies: list[Tally] = []
    with ctx.workers(s.db, workers, **s.env):
        warm, tally = worker_drain(ctx, s, read, f"p3-w{workers}-warm-", mode.p3_min)
        tallies.append(tally)
        n = sized(warm, mode.p3_seconds, mode.p3_min, mode.p3_max)
        raw_warm = raw_drain(s, read, f"p3-r{workers}-warm-", n, workers)
        n_raw = sized(raw_warm, mode.p3_seconds, mode.p3_min, 5 * mode.p3_max)
        subject, baseline = Figure("deliveries/s"), Figure("deliveries/s")

        def one(rep: int) -> None:
            rate, tally = worker_drain(ctx, s, read, f"p3-w{workers}-{rep}-", n)
            subject.add(rate)
            tallies.append(tally)

        def raw(rep: int) -> None:
            baseline.add(raw_drain(s, read, f"p3-r{workers}-{rep}-", n_raw, workers))

        interleaved(mode.repeats, one, raw)
    return subject, baseline, tallies, n


def run_p3(ctx: Bench) -> None:
    with delivery_setup(ctx, "p3", ("run.finished",)) as s, ctx.read_engine(s.db) as read:
        best = (0.0, 2)
        for workers in ctx.mode.p3_workers:
            ctx.say(f"P3: {workers} worker process(es)")
            subject, baseline, tallies, n = measure_workers(ctx, s, read, workers)
            if subject.median > best[0]:
                best = (subject.median, workers)
            ctx.add(
                Row(
                    id=f"P3 {workers} worker{'s' if workers > 1 else ''}",
                    what=f"webhook deliveries/s to a local keep-alive receiver, {workers} "
                    "`runbell worker` process(es), PostgreSQL, rate limits raised",
                    measured=subject,
                    baseline=baseline,
                    baseline_what=f"raw SKIP LOCKED claim + per-row UPDATE/COMMIT loop, "
                    f"{workers} thread(s), same table",
                    ratio=ratios(subject, baseline),
                    # Ratios only (issue 21): an absolute rate says more about the machine.
                    floor=(Check("ratio", ">=", 0.3, "≥ 0.3× raw"),),
                    goal=(Check("ratio", ">=", 0.5, "≥ 0.5× raw"),),
                    note=f"{n} messages per repeat",
                )
            )
            ctx.tallies.append(verify.merge(tallies, f"P3 {workers}w"))
        ctx.facts["P3 max"], ctx.facts["P3 workers"] = best


def run_p4(ctx: Bench) -> None:
    mode = ctx.mode
    with delivery_setup(ctx, "p4", P4_TYPES) as s, ctx.read_engine(s.db) as read:
        workers = int(ctx.facts.get("P3 workers", 2))
        with ctx.servers(s.db, "api", workers=workers, env=s.env) as servers:
            api = servers[0]
            if "P3 max" not in ctx.facts:
                rate, _ = worker_drain(ctx, s, read, "p4-cal-", mode.p3_min)
                ctx.facts["P3 max"] = rate
                ctx.note(f"P4 ran without P3: its rate comes from one {mode.p3_min}-message drain.")
            tallies: list[Tally] = []
            hooks: list[Tally] = []
            k = len(P4_TYPES)
            target = ctx.facts["P3 max"] / 2
            sig_rate = target / k
            cap = ctx.facts.get("P2-pg 1", float("inf")) / 2
            capped = sig_rate > cap
            sig_rate = min(sig_rate, cap)
            if mode.tiny:
                sig_rate = min(sig_rate, 10.0)
            p50, p99 = Figure("ms"), Figure("ms")

            def one(rep: int, p50: Figure, p99: Figure) -> None:
                prefix = f"p4-{rep}-"
                count = max(2, int(sig_rate * mode.p4_seconds))
                before = s.rx.call("count")["requests"]
                targets.create_runs(s.core, s.tenant, [f"{prefix}{i}" for i in range(count)])
                result = ctx.loadgen(
                    {
                        "targets": [["127.0.0.1", api.port]],
                        "mode": "open",
                        "conns": 64,
                        "seconds": mode.p4_seconds,
                        "rate": sig_rate,
                        "request": {
                            "kind": "signal",
                            "token": s.tenant.runtime_key,
                            "run_prefix": prefix,
                            "count": count,
                            "state": "completed",
                        },
                    }
                )
                tallies.append(
                    verify.check_signals(
                        read, s.tenant.tenant_id, prefix, tally_id=prefix,
                        sent=result["used"], applied=result["applied"],
                        failed=len(result["failed_indexes"]), outcomes=result["outcomes"],
                    )
                )  # fmt: skip
                expected = k * result["applied"]
                wait_received(s, before + expected, timeout=max(60.0, expected / 10))
                got = s.rx.call("batch", prefix=prefix, ids=True)
                settle(ctx, s, read, prefix, expected)
                hooks.append(
                    verify.check_deliveries(
                        read, s.tenant.tenant_id, prefix, got, tally_id=f"{prefix}webhooks",
                        expected=expected,
                    )
                )  # fmt: skip
                p50.add(got["latency_ms"]["p50"])
                p99.add(got["latency_ms"]["p99"])

            one(-1, Figure("ms"), Figure("ms"))  # warm-up
            for rep in range(mode.repeats):
                one(rep, p50, p99)
        how = f"{sig_rate:,.1f} signals/s × {k} messages = {sig_rate * k:,.0f} deliveries/s" + (
            f" (half of P3's max would be {target:,.0f}/s; capped at half of P2-pg's "
            "signal throughput)"
            if capped
            else f" (half of P3's max, {ctx.facts['P3 max']:,.0f}/s)"
        )
        ctx.add(
            Row(
                id="P4",
                what=f"commit → webhook received, open loop at {how}; 1 `runbell api`, "
                f"{workers} worker(s), PostgreSQL",
                measured=p99,
                floor=(Check("value", "<=", 100, "p99 ≤ 100 ms"),),
                goal=(Check("value", "<=", 25, "p99 ≤ 25 ms"),),
                note=f"p99; p50 {p50.median:,.1f} ms. Commit time = the payload's `timestamp`",
            )
        )
        ctx.tallies += [verify.merge(tallies, "P4 signals"), verify.merge(hooks, "P4 webhooks")]
