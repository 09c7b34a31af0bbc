"""Entry point: ``python -m bench.run [--full | --tiny] [--only P1,P2] [--out BENCHMARKS.md]``.

Runs the selected benchmarks in order (P4 builds on P3's figure, so it runs after it),
writes the report, and exits:

- 0 when every benchmark ran and nothing was lost or doubled (floors and goals missed
  are reported in the file, they never fail a run);
- 1 when a correctness check failed (work lost or doubled), whatever else happened;
- 2 when a benchmark could not run at all (the harness broke: it must not rot silently).

After a failure the work directory (servers' and helpers' logs) is kept and named.

``--tiny`` runs every selected benchmark at a size that takes seconds and keeps only its
correctness checks (the smoke test in tests/acceptance runs it); its timings mean
nothing. ``--db sqlite`` (or ``postgres``) limits the database-parametrized rows.
"""

from __future__ import annotations

import argparse
import importlib
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench import targets
from bench.common import FULL, QUICK, TINY, CorrectnessError
from bench.context import Bench
from bench.servers import PG_ADMIN_URL, Databases

ALL = ("P1", "P2", "P2-put", "P2-mixed", "P2-pg", "P3", "P4", "P5", "P6", "P7")
KINDS = ("sqlite", "postgres")


def benchmarks(kinds: tuple[str, ...]) -> dict[str, Callable[[Bench], None]]:
    def call(module: str, fn: str, *args: object) -> Callable[[Bench], None]:
        return lambda ctx: getattr(importlib.import_module(f"bench.{module}"), fn)(ctx, *args)

    return {
        "P1": call("p1_core", "run", kinds),
        "P2": call("p2_http", "run_sqlite"),
        "P2-put": call("p2_put", "run_put"),
        "P2-mixed": call("p2_put", "run_mixed"),
        "P2-pg": call("p2_http", "run_postgres"),
        "P3": call("p3_delivery", "run_p3"),
        "P4": call("p3_delivery", "run_p4"),
        "P5": call("p5_streams", "run_p5"),
        "P6": call("p5_streams", "run_p6"),
        "P7": call("p7_history", "run", kinds),
    }


def needs_postgres(bench_id: str, kinds: tuple[str, ...]) -> bool:
    return bench_id in ("P2-pg", "P3", "P4") or (bench_id in ("P1", "P7") and "postgres" in kinds)


def raise_fd_limit() -> None:
    """Thousands of SSE streams need as many descriptors (children inherit this)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="full sizes (make bench FULL=1)")
    size.add_argument("--tiny", action="store_true", help="correctness only, seconds")
    p.add_argument("--only", default=",".join(ALL), help=f"comma list of {', '.join(ALL)}")
    p.add_argument("--db", default=",".join(KINDS), help="sqlite,postgres")
    p.add_argument("--out", default="BENCHMARKS.md", help="report file ('-' for none)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = p.parse_args(argv)
    args.only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = set(args.only) - set(ALL)
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    args.kinds = tuple(k for k in KINDS if k in args.db.split(","))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    mode = TINY if args.tiny else FULL if args.full else QUICK
    raise_fd_limit()
    workdir = Path(tempfile.mkdtemp(prefix="runbell-bench-"))
    secret = targets.new_secret_key()
    dbs = Databases(workdir, secret)
    ctx = Bench(mode=mode, workdir=workdir, dbs=dbs, secret_key=secret)
    targets.configure_logging(ctx.logs / "in-process.log")
    ctx.say(f"mode {mode.name}; work directory {workdir}")
    errors = wrong = 0
    table = benchmarks(args.kinds)
    uses_pg = any(needs_postgres(b, args.kinds) for b in args.only)
    # SIGTERM unwinds like Ctrl-C: servers stopped, temporary databases dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if uses_pg:
            try:
                for name in dbs.drop_stale():
                    ctx.say(f"dropped {name}, left by a bench run that is gone")
            except Exception as exc:  # unreachable: the PostgreSQL benchmarks will say so
                ctx.say(f"PostgreSQL: {type(exc).__name__}: {exc}")
        for bench_id in ALL:
            if bench_id not in args.only:
                continue
            t0 = time.monotonic()
            ctx.say(f"== {bench_id}")
            try:
                table[bench_id](ctx)
            except CorrectnessError as exc:
                wrong += 1
                ctx.failures.append(f"{bench_id}: {exc}")
                ctx.say(f"CORRECTNESS FAILURE {bench_id}: {exc}")
            except Exception as exc:
                errors += 1
                detail = "".join(traceback.format_exception(exc))
                ctx.failures.append(f"{bench_id} could not run: {type(exc).__name__}: {exc}")
                ctx.say(f"ERROR {bench_id}:\n{detail}")
            ctx.say(f"{bench_id} took {time.monotonic() - t0:.0f}s")
    finally:
        ctx.close()
        dbs.close()
    if args.out != "-":
        from bench import report

        report.write(
            ctx,
            Path(args.out),
            selected=args.only,
            kinds=args.kinds,
            pg_url=PG_ADMIN_URL if uses_pg else None,
        )
        ctx.say(f"wrote {args.out}")
    if args.keep or ctx.failures:
        ctx.say(f"kept {workdir} (logs in {ctx.logs})")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    ctx.say(f"done in {time.monotonic() - ctx.started:.0f}s")
    return 1 if wrong else 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
