"""P1: signals/s through the core transaction, no HTTP, at 1 and 8 concurrent writers.

Subject: ``writers`` threads, each calling the in-process accept-signal entry point
(:func:`bench.targets.complete_run`) on its share of freshly created working runs — one
``working → completed`` signal per run, which makes one transition, one notification
(the default policy's ``inbox``), its outbox row, an inbound event and feed events, in
one commit. Then the database is counted: every signal stored once.

Baseline: the same number of threads doing a raw single-row ``INSERT`` + ``COMMIT`` into
a scratch table through the same driver and durability — SQLite through the engine
Runbell builds (same PRAGMAs, ``BEGIN IMMEDIATE``), PostgreSQL through psycopg with the
server's own commit settings. The rows are counted too.

Both are sized from a warm-up so each repeat lasts about ``mode.p1_seconds``.

Beside the rate, each subject repeat counts (figures that do not depend on the load):

- **statements per signal**: every statement sent to the driver (a SQLAlchemy
  ``before_cursor_execute`` listener on Runbell's engine; an ``executemany`` counts as one:
  psycopg 3 pipelines it, SQLite runs it in one call);
- **round trips per signal**: those statements plus, per committed batch, the ``COMMIT``
  (and on PostgreSQL the ``BEGIN`` psycopg sends before the first statement), which no
  cursor listener sees, less the round trips PostgreSQL's pipelines saved
  (``runbell.store.fast.saved_round_trips``: statements and BEGINs sent in a pipeline
  beyond the waits for results it made);
- **CPU µs per signal in process**: the thread CPU time of the writer thread plus that of
  the calling threads, over the repeat, per signal; with the CPU calibration figure
  (``bench.common.calibration_us``, a fixed pure-Python loop) measured in the same run.

On SQLite with several writers, a second row, **SQL only** (:func:`sql_replay`): the
statements, parameters and commits the writer sent for a repeat's signals, recorded and
replayed in the same batches through the bare ``sqlite3`` driver on a copy of the
database, interleaved with the same raw baseline. It splits the subject's cost in two:
what the SQL itself takes (indexes, rows, commits) and what Runbell's Python around it
takes (the subject's rate against this one).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import targets, verify
from bench.common import (
    Check,
    CorrectnessError,
    Figure,
    Row,
    Tally,
    calibration_us,
    interleaved,
    percentile,
    ratios,
    sized,
)
from bench.context import Bench
from bench.servers import Db

PAYLOAD = "x" * 200
SCRATCH = {
    "sqlite": "CREATE TABLE IF NOT EXISTS bench_scratch ("
    "id INTEGER PRIMARY KEY, batch TEXT NOT NULL, payload TEXT NOT NULL)",
    "postgres": "CREATE TABLE IF NOT EXISTS bench_scratch ("
    "id BIGSERIAL PRIMARY KEY, batch TEXT NOT NULL, payload TEXT NOT NULL)",
}

# Issue 21's floors and goals at 8 writers (ratios to the raw baseline), and PostgreSQL's
# round trips per signal.
FLOORS = {"sqlite": 0.1, "postgres": 0.1}
GOALS = {"sqlite": 0.2, "postgres": 0.25}
MAX_ROUND_TRIPS = {"postgres": 4.0}


@dataclass
class Batch:
    count: int
    seconds: float
    latencies: list[float]  # seconds, one per operation
    statements: int = 0  # sent to the driver (executemany: one)
    commits: int = 0  # batches the writer committed
    piped: int = 0  # round trips saved by pipelining (PostgreSQL)
    cpu_s: float = 0.0  # writer thread + calling threads

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


def in_threads(
    work: Sequence[Callable[[], list[float]]], cpu: list[float] | None = None
) -> tuple[float, list[float]]:
    """Run each callable in its own thread, released together; (seconds, latencies).
    ``cpu``: each thread's CPU seconds are added to its first element."""
    gate = threading.Barrier(len(work) + 1)
    lock = threading.Lock()
    results: list[list[float]] = [[] for _ in work]
    errors: list[BaseException] = []

    def body(i: int) -> None:
        gate.wait()
        t0 = time.thread_time()
        try:
            results[i] = work[i]()
        except BaseException as exc:
            errors.append(exc)
        if cpu is not None:
            used = time.thread_time() - t0
            with lock:
                cpu[0] += used

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed, [x for r in results for x in r]


# --- subject -------------------------------------------------------------------------------


def signal_batch(
    core: Any,
    engine: sa.Engine,
    tenant: targets.Tenant,
    prefix: str,
    writers: int,
    n: int,
    set_up: Callable[[], None] | None = None,
) -> tuple[Batch, Tally]:
    """``n`` signals over ``writers`` threads, on runs created first (not timed);
    ``set_up`` is called between the two."""
    run_ids = [f"{prefix}{i}" for i in range(n)]
    targets.create_runs(core, tenant, run_ids)  # set-up, not timed
    if set_up is not None:
        set_up()
    outcomes: dict[str, int] = {}
    lock = threading.Lock()

    def writer(mine: Sequence[str]) -> Callable[[], list[float]]:
        def go() -> list[float]:
            lat = []
            for run_id in mine:
                t = time.perf_counter()
                outcome = targets.complete_run(core, tenant, run_id, f"{run_id}-done")
                lat.append(time.perf_counter() - t)
                with lock:
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
            return lat

        return go

    sent = [0]

    def count(*_args: Any) -> None:
        sent[0] += 1

    cpu = [0.0]
    runbell = targets.engine_of(core)
    sa.event.listen(runbell, "before_cursor_execute", count)
    batches, writer_cpu = targets.writer_batches(core), targets.writer_cpu_s(core)
    saved = targets.saved_round_trips()
    try:
        seconds, lat = in_threads([writer(run_ids[w::writers]) for w in range(writers)], cpu)
    finally:
        sa.event.remove(runbell, "before_cursor_execute", count)
    cpu[0] += targets.writer_cpu_s(core) - writer_cpu
    commits = targets.writer_batches(core) - batches
    piped = targets.saved_round_trips() - saved
    tally = verify.check_signals(
        engine,
        tenant.tenant_id,
        prefix,
        tally_id=prefix,
        sent=n,
        applied=outcomes.get("applied", 0),
        outcomes=outcomes,
    )
    return Batch(n, seconds, lat, sent[0], commits, piped, cpu[0]), tally


# --- the SQL alone (SQLite) ----------------------------------------------------------------


def sql_replay(
    core: Any, engine: sa.Engine, tenant: targets.Tenant, prefix: str, writers: int, n: int
) -> float:
    """Signals/s of the subject's SQL alone: ``n`` signals are sent as in the subject
    (untimed) with every statement the writer thread sends recorded — SQL, parameters,
    ``executemany`` or not — and each COMMIT; then the record is replayed, in the same
    batches, on a copy of the database taken just before the signals, through the bare
    ``sqlite3`` driver with Runbell's PRAGMAs: the same statements, parameters and
    commits, with none of Runbell's Python around them. Timed on one thread, as the
    writer runs them. The replay is checked: the copy ends with the ``n`` runs completed."""
    path = Path(str(engine.url.database))
    copy = path.with_name(f"{path.stem}-replay.db")
    record: list[tuple[str, Any, bool]] = []
    writer = "runbell-writer"

    files = (copy, copy.with_name(copy.name + "-wal"), copy.with_name(copy.name + "-shm"))

    def snapshot() -> None:
        for stale in files:
            stale.unlink(missing_ok=True)
        src, dst = sqlite3.connect(path), sqlite3.connect(copy)
        try:
            src.backup(dst)  # a consistent copy, the core's connections still open
        finally:
            src.close()
            dst.close()

    def sent(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, many: bool
    ) -> None:
        if threading.current_thread().name == writer:
            record.append((statement, parameters, many))

    def committed(_conn: Any) -> None:
        if threading.current_thread().name == writer:
            record.append(("COMMIT", None, False))

    runbell = targets.engine_of(core)
    sa.event.listen(runbell, "before_cursor_execute", sent)
    sa.event.listen(runbell, "commit", committed)
    try:
        signal_batch(core, engine, tenant, prefix, writers, n, set_up=snapshot)
    finally:
        sa.event.remove(runbell, "before_cursor_execute", sent)
        sa.event.remove(runbell, "commit", committed)
    raw = sqlite3.connect(copy, isolation_level=None)
    try:
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
            raw.execute(f"PRAGMA {pragma}")
        cur = raw.cursor()
        t0 = time.perf_counter()
        for statement, parameters, many in record:
            if many:
                cur.executemany(statement, parameters)
            else:
                cur.execute(statement, parameters or ())
                if cur.description:
                    cur.fetchall()
        seconds = time.perf_counter() - t0
        done = raw.execute(
            "SELECT count(*) FROM runs WHERE tenant_id = ? AND run_id LIKE ? AND state = ?",
            (tenant.tenant_id, f"{prefix}%", "completed"),
        ).fetchone()[0]
    finally:
        raw.close()
        for leftover in files:
            leftover.unlink(missing_ok=True)
    if done != n:
        raise CorrectnessError(f"SQL replay {prefix}: {done} runs completed of {n}")
    return n / seconds


# --- baseline ------------------------------------------------------------------------------


def raw_batch(db: Db, engine: sa.Engine, batch: str, writers: int, n: int) -> Batch:
    """``n`` single-row INSERT+COMMITs over ``writers`` threads, each on its own connection."""
    shares = [len(range(w, n, writers)) for w in range(writers)]
    if db.is_pg:
        import psycopg

        conns = [psycopg.connect(db.psycopg_dsn()) for _ in range(writers)]

        def pg(conn: Any, k: int) -> Callable[[], list[float]]:
            def go() -> list[float]:
                lat = []
                with conn.cursor() as cur:
                    for _ in range(k):
                        t = time.perf_counter()
                        cur.execute(
                            "INSERT INTO bench_scratch (batch, payload) VALUES (%s, %s)",
                            (batch, PAYLOAD),
                        )
                        conn.commit()
                        lat.append(time.perf_counter() - t)
                return lat

            return go

        try:
            seconds, lat = in_threads([pg(c, k) for c, k in zip(conns, shares, strict=True)])
        finally:
            for c in conns:
                c.close()
    else:
        sconns = [engine.connect() for _ in range(writers)]

        def lite(sconn: sa.Connection, k: int) -> Callable[[], list[float]]:
            def go() -> list[float]:
                lat = []
                for _ in range(k):
                    t = time.perf_counter()
                    with sconn.begin():  # Runbell's engine: BEGIN IMMEDIATE
                        sconn.exec_driver_sql(
                            "INSERT INTO bench_scratch (batch, payload) VALUES (?, ?)",
                            (batch, PAYLOAD),
                        )
                    lat.append(time.perf_counter() - t)
                return lat

            return go

        try:
            seconds, lat = in_threads([lite(sc, k) for sc, k in zip(sconns, shares, strict=True)])
        finally:
            for sc in sconns:
                sc.close()
    with engine.connect() as check:
        stored = check.execute(
            sa.text("SELECT count(*) FROM bench_scratch WHERE batch = :b"), {"b": batch}
        ).scalar_one()
    if stored != n:
        raise CorrectnessError(f"raw baseline {batch}: {stored} rows stored for {n} inserts")
    return Batch(n, seconds, lat)


# --- the benchmark -------------------------------------------------------------------------


@dataclass
class Costs:
    """Per-signal figures of the subject repeats (see the module docstring)."""

    statements: Figure
    round_trips: Figure
    cpu_us: Figure
    batch: Figure  # signals per committed batch
    sql_only: Figure | None = None  # SQLite: the same SQL replayed bare (sql_replay)
    sql_baseline: Figure | None = None  # raw baseline interleaved with those replays


def measure_writers(
    ctx: Bench,
    db: Db,
    core: Any,
    tenant: targets.Tenant,
    writers: int,
    label: str,
) -> tuple[Figure, Figure, Figure, list[Tally], Costs]:
    """Warm up, then interleave subject and baseline; (signals/s, raw/s, p99 ms, tallies,
    per-signal costs)."""
    mode = ctx.mode
    engine = targets.engine_of(core)
    with engine.begin() as conn:
        conn.exec_driver_sql(SCRATCH[db.kind])
    read = verify.read_engine(db.url)
    tallies: list[Tally] = []
    try:
        warm, tally = signal_batch(
            core, read, tenant, f"{label}-warm-", writers, max(mode.p1_min, 2 * writers)
        )
        tallies.append(tally)
        raw_warm = raw_batch(db, engine, f"{label}-warm", writers, max(mode.p1_min, 2 * writers))
        n_sig = sized(warm.rate, mode.p1_seconds, mode.p1_min, mode.p1_max)
        n_raw = sized(raw_warm.rate, mode.p1_seconds, mode.p1_min, 10 * mode.p1_max)
        subject, baseline, p99 = Figure("signals/s"), Figure("inserts/s"), Figure("ms")
        costs = Costs(
            Figure("statements/signal"),
            Figure("round trips/signal"),
            Figure("CPU µs/signal"),
            Figure("signals/batch"),
        )
        per_commit = 2 if db.is_pg else 1  # BEGIN (psycopg's own) and COMMIT; SQLite: COMMIT

        def one_subject(rep: int) -> None:
            batch, tally = signal_batch(core, read, tenant, f"{label}-{rep}-", writers, n_sig)
            subject.add(batch.rate)
            p99.add(percentile(batch.latencies, 99) * 1000)
            costs.statements.add(batch.statements / batch.count)
            trips = batch.statements + per_commit * batch.commits - batch.piped
            costs.round_trips.add(trips / batch.count)
            costs.cpu_us.add(batch.cpu_s / batch.count * 1e6)
            costs.batch.add(batch.count / max(1, batch.commits))
            tallies.append(tally)

        def one_baseline(rep: int) -> None:
            baseline.add(raw_batch(db, engine, f"{label}-{rep}", writers, n_raw).rate)

        interleaved(mode.repeats, one_subject, one_baseline)
        if not db.is_pg and writers > 1:
            # The same SQL with no Python around it, against the same raw baseline.
            costs.sql_only, costs.sql_baseline = Figure("signals/s"), Figure("inserts/s")
            sql_only, sql_baseline = costs.sql_only, costs.sql_baseline

            def one_replay(rep: int) -> None:
                prefix = f"{label}-sql{rep}-"
                sql_only.add(sql_replay(core, read, tenant, prefix, writers, n_sig))

            def one_replay_baseline(rep: int) -> None:
                sql_baseline.add(raw_batch(db, engine, f"{label}-sql{rep}", writers, n_raw).rate)

            interleaved(mode.repeats, one_replay, one_replay_baseline)
    finally:
        read.dispose()
    return subject, baseline, p99, tallies, costs


def run(ctx: Bench, kinds: Sequence[str]) -> None:
    for kind in kinds:
        with ctx.database(kind, "p1") as db, ctx.core(db) as core:
            tenant = targets.setup_tenant(core)
            for writers in (1, 8):
                ctx.say(f"P1 {kind}: {writers} writer(s)")
                subject, baseline, p99, tallies, costs = measure_writers(
                    ctx, db, core, tenant, writers, f"p1-{kind[:2]}{writers}"
                )
                calibration = calibration_us()
                at8 = writers == 8
                floor = [Check("ratio", ">=", FLOORS[kind], f"≥ {FLOORS[kind]}× raw")]
                if kind in MAX_ROUND_TRIPS:
                    most = MAX_ROUND_TRIPS[kind]
                    floor.append(Check("round_trips", "<=", most, f"≤ {most:g} round trips/signal"))
                ctx.add(
                    Row(
                        id=f"P1 {kind} {writers}w",
                        what=f"signals/s through the core transaction, no HTTP, "
                        f"{writers} concurrent writer{'s' if writers > 1 else ''}",
                        measured=subject,
                        baseline=baseline,
                        baseline_what="raw single-row INSERT+COMMIT, same driver and durability",
                        ratio=ratios(subject, baseline),
                        floor=tuple(floor) if at8 else (),
                        goal=(Check("ratio", ">=", GOALS[kind], f"≥ {GOALS[kind]}× raw"),)
                        if at8
                        else (),
                        extra={
                            "p99_ms": p99.median,
                            "statements": costs.statements.median,
                            "round_trips": costs.round_trips.median,
                            "cpu_us": costs.cpu_us.median,
                            "calibration_us": calibration,
                        },
                        note=f"per-signal p99 {p99.median:.1f} ms; per signal "
                        f"{costs.statements.median:.2f} statements, "
                        f"{costs.round_trips.median:.2f} round trips "
                        f"({costs.batch.median:.1f} signals/batch), "
                        f"{costs.cpu_us.median:.0f} µs CPU in process "
                        f"(calibration loop {calibration:.0f} µs)",
                    )
                )
                ctx.tallies.append(verify.merge(tallies, f"P1 {kind} {writers}w"))
                if costs.sql_only is not None and costs.sql_baseline is not None:
                    ctx.add(
                        Row(
                            id=f"P1 {kind} {writers}w, SQL only",
                            what="the same statements, parameters and commits the writer "
                            "sent, replayed through the bare driver with no Runbell Python "
                            "(sql_replay): what the SQL alone allows",
                            measured=costs.sql_only,
                            baseline=costs.sql_baseline,
                            baseline_what="raw single-row INSERT+COMMIT, same driver and "
                            "durability",
                            ratio=ratios(costs.sql_only, costs.sql_baseline),
                            note="reported: a ceiling for the row above, not a floor",
                        )
                    )
