"""P7: P1 and feed-page latency with history tables at N rows, against the same at 0 rows.

Two databases side by side, identical but for :func:`bench.seed.history` (``N`` rows
in each of transitions, inbound events, notifications, deliveries and feed events, for
the same tenant and owner the benchmark then uses). Interleaved, ABBA:

- P1 at 8 writers (:func:`bench.p1_core.signal_batch`, counted like P1): throughput
  and per-signal p99, history vs empty;
- a feed page: ``GET /v1/events?after=<head-100>&limit=100`` with the owner's token (the
  latest page, as a client following the feed reads it), open loop at
  ``mode.p7_feed_rate``/s against ``runbell serve`` on each database; p99 per repeat.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from bench import seed, targets, verify
from bench.common import (
    Check,
    CorrectnessError,
    Figure,
    Row,
    Tally,
    interleaved,
    percentile,
    ratios,
    sized,
)
from bench.context import Bench
from bench.p1_core import signal_batch
from bench.servers import Server

WRITERS = 8


def feed_path(read: sa.Engine, tenant_id: str) -> str:
    with read.connect() as conn:
        head = int(
            conn.execute(
                sa.text("SELECT feed_seq FROM tenants WHERE id = :t"), {"t": tenant_id}
            ).scalar_one()
        )
    return f"/v1/events?after={max(0, head - 100)}&limit=100"


def check_page(srv: Server, path: str, token: str) -> None:
    req = urllib.request.Request(srv.url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as rsp:
        page = json.loads(rsp.read())
    seqs = [int(e["id"]) for e in page["events"]]
    if not seqs or seqs != sorted(seqs) or len(set(seqs)) != len(seqs):
        raise CorrectnessError(f"P7 feed page {path}: ids {seqs[:5]}… not strictly increasing")


def feed_load(ctx: Bench, srv: Server, path: str, token: str) -> float:
    rate, seconds = ctx.mode.p7_feed_rate, ctx.mode.p2_open_seconds
    result = ctx.loadgen(
        {
            "targets": [["127.0.0.1", srv.port]],
            "mode": "open",
            "conns": 32,
            "seconds": seconds,
            "rate": rate,
            "request": {
                "kind": "get",
                "path": path,
                "token": token,
                "count": int(rate * seconds) + 1,
            },
        }
    )
    if result["failed_indexes"] or result["ok"] != result["sent"]:
        raise CorrectnessError(
            f"P7 feed page: {result['sent']} sent, {result['ok']} answered 2xx "
            f"({result['statuses']}, {result['errors']})"
        )
    p99: float = result["latency_ms"]["p99"]
    return p99


def run_size(ctx: Bench, kind: str, rows: int) -> None:
    mode = ctx.mode
    label = f"P7 {kind} {rows:,}"
    short = f"p7-{kind[:2]}{rows}"
    with (
        ctx.database(kind, "p7empty") as empty,
        ctx.database(kind, "p7hist") as hist,
        ctx.core(empty) as core_e,
        ctx.core(hist) as core_h,
        ctx.read_engine(empty) as read_e,
        ctx.read_engine(hist) as read_h,
    ):
        ten_e = targets.setup_tenant(core_e)
        ten_h = targets.setup_tenant(core_h)
        took = seed.history(hist.url, ten_h.tenant_id, ten_h.source.id, ten_h.owner_id, rows)
        ctx.say(
            f"{label}: seeded {rows:,} rows in each of {len(seed.TABLES)} tables in {took:.0f}s"
        )
        tallies: list[Tally] = []

        def batch(core: Any, read: Any, tenant: targets.Tenant, prefix: str, n: int) -> Any:
            b, tally = signal_batch(core, read, tenant, prefix, WRITERS, n)
            tallies.append(tally)
            return b

        warm_e = batch(core_e, read_e, ten_e, f"{short}-we-", mode.p1_min)
        warm_h = batch(core_h, read_h, ten_h, f"{short}-wh-", mode.p1_min)
        # Both sides send the same number, sized so the slower one lasts about a repeat.
        n = sized(
            min(warm_e.rate, warm_h.rate), mode.p1_seconds, max(2 * WRITERS, mode.p1_min // 2),
            mode.p1_max,
        )  # fmt: skip
        thr_h, thr_e, p99_h, p99_e = (
            Figure("signals/s"),
            Figure("signals/s"),
            Figure("ms"),
            Figure("ms"),
        )

        def on_hist(rep: int) -> None:
            b = batch(core_h, read_h, ten_h, f"{short}-h{rep}-", n)
            thr_h.add(b.rate)
            p99_h.add(percentile(b.latencies, 99) * 1000)

        def on_empty(rep: int) -> None:
            b = batch(core_e, read_e, ten_e, f"{short}-e{rep}-", n)
            thr_e.add(b.rate)
            p99_e.add(percentile(b.latencies, 99) * 1000)

        interleaved(mode.repeats, on_hist, on_empty)

        feed_h, feed_e = Figure("ms"), Figure("ms")
        with ctx.serve_each([empty, hist]) as (srv_e, srv_h):
            path_e = feed_path(read_e, ten_e.tenant_id)
            path_h = feed_path(read_h, ten_h.tenant_id)
            check_page(srv_e, path_e, ten_e.owner_token)
            check_page(srv_h, path_h, ten_h.owner_token)
            feed_load(ctx, srv_e, path_e, ten_e.owner_token)  # warm-up
            feed_load(ctx, srv_h, path_h, ten_h.owner_token)
            interleaved(
                mode.repeats,
                lambda rep: feed_h.add(feed_load(ctx, srv_h, path_h, ten_h.owner_token)),
                lambda rep: feed_e.add(feed_load(ctx, srv_e, path_e, ten_e.owner_token)),
            )
    quick = "" if rows >= 1_000_000 else " (quick-mode size)"
    history = f"history tables at {rows:,} rows{quick}"
    ctx.add(
        Row(
            id=f"{label} P1",
            what=f"P1 signals/s, {WRITERS} writers, {history}",
            measured=thr_h,
            baseline=thr_e,
            baseline_what="the same at 0 rows",
            ratio=ratios(thr_h, thr_e),
            floor=(Check("ratio", ">=", 0.8, "≥ 0.8× empty"),),
            goal=(Check("ratio", ">=", 0.9, "≥ 0.9× empty"),),
        )
    )
    ctx.add(
        Row(
            id=f"{label} P1 p99",
            what=f"P1 per-signal p99, {WRITERS} writers, {history}",
            measured=p99_h,
            baseline=p99_e,
            baseline_what="the same at 0 rows",
            ratio=ratios(p99_h, p99_e),
            floor=(Check("ratio", "<=", 1.5, "p99 ≤ 1.5× empty"),),
        )
    )
    ctx.add(
        Row(
            id=f"{label} feed p99",
            what=f"latest feed page (`GET /v1/events`, 100 events, owner token), open loop "
            f"at {mode.p7_feed_rate:g}/s, {history}",
            measured=feed_h,
            baseline=feed_e,
            baseline_what="the same at 0 rows",
            ratio=ratios(feed_h, feed_e),
            floor=(Check("ratio", "<=", 1.5, "p99 ≤ 1.5× empty"),),
        )
    )
    ctx.tallies.append(verify.merge(tallies, label))


def run(ctx: Bench, kinds: Sequence[str]) -> None:
    for kind in kinds:
        sizes = ctx.mode.p7_sqlite_rows if kind == "sqlite" else ctx.mode.p7_pg_rows
        for rows in sizes:
            run_size(ctx, kind, rows)
