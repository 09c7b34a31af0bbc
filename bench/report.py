"""BENCHMARKS.md: the machine, the databases' settings, the commit, and every row."""

from __future__ import annotations

import contextlib
import importlib.metadata
import math
import os
import platform
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench import targets
from bench.common import CALIBRATION_N, REPO, Figure, Row, calibration_us, load1
from bench.context import Bench

PG_SETTINGS = (
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_level",
    "wal_sync_method",
    "commit_delay",
    "shared_buffers",
    "work_mem",
    "max_connections",
)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _ram() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "unknown"


def _git() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    dirty = [
        line
        for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
        if not line.endswith("BENCHMARKS.md")
    ]
    return f"`{commit}` ({branch}{', with uncommitted changes' if dirty else ''})"


def _sqlite_pragmas() -> str:
    """What Runbell's own engine sets on every SQLite connection."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = targets.make_engine(f"sqlite:///{tmp}/p.db")
        try:
            with engine.connect() as conn:
                out = [
                    f"{p}={conn.exec_driver_sql(f'PRAGMA {p}').scalar()}"
                    for p in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
                ]
        finally:
            engine.dispose()
    return ", ".join(out) + " (synchronous 1 = NORMAL); writes begin with BEGIN IMMEDIATE"


def _postgres(url: str) -> tuple[str, str]:
    try:
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
            version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            settings = ", ".join(
                f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
                for name in PG_SETTINGS
            )
        return version, settings
    except Exception as exc:
        return "unreachable", f"{type(exc).__name__}"


def _versions() -> str:
    names = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "psycopg", "sse-starlette")
    out = []
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out.append(f"{name} {importlib.metadata.version(name)}")
    return ", ".join(out)


# --- formatting --------------------------------------------------------------------------


def _num(v: float) -> str:
    if v is None or math.isnan(v):
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    if abs(v) >= 1:
        return f"{v:,.2f}"
    return f"{v:.3g}"


def _unit(unit: str) -> str:
    return {"×": "×", "ms": " ms", "MB": " MB", "cores": " cores"}.get(unit, f" {unit}")


def fmt(fig: Figure | None) -> str:
    if fig is None or not fig.values:
        return "—"
    text = f"{_num(fig.median)}{_unit(fig.unit)}"
    if len(fig.values) > 1:
        text += f" ({_num(fig.lo)}–{_num(fig.hi)})"
    return text


def _loads(row: Row) -> str:
    loads = list(row.measured.loads) + (list(row.baseline.loads) if row.baseline else [])
    if not loads:
        return "—"
    med = statistics.median(loads)
    return f"{med:.1f} ({min(loads):.1f}–{max(loads):.1f})"


def _met(row: Row) -> str:
    parts = []
    for name, checks in (("floor", row.floor), ("goal", row.goal)):
        if not checks:
            continue
        verdict = row.verdict(checks)
        parts.append(
            f"{name} {'✅ met' if verdict else '❌ not met' if verdict is False else '? n/a'}"
        )
    return " · ".join(parts) or "—"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: Sequence[Row]) -> list[str]:
    out = [
        "| id | what | measured (median, min–max) | baseline | ratio | floor | goal | met? "
        "| load avg |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        baseline = "—" if r.baseline is None else f"{fmt(r.baseline)}: {r.baseline_what}"
        what = r.what + (f" — {r.note}" if r.note else "")
        out.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    r.id,
                    what,
                    fmt(r.measured),
                    baseline,
                    fmt(r.ratio),
                    "; ".join(c.text for c in r.floor) or "—",
                    "; ".join(c.text for c in r.goal) or "—",
                    _met(r),
                    _loads(r),
                )
            )
            + " |"
        )
    return out


def write(
    ctx: Bench,
    path: Path,
    *,
    selected: Sequence[str],
    kinds: Sequence[str],
    pg_url: str | None,
) -> None:
    mode = ctx.mode
    pg_version, pg_settings = _postgres(pg_url) if pg_url else ("not used", "—")
    elapsed = time.monotonic() - ctx.started
    lines = [
        "# Runbell benchmarks",
        "",
        f"Written by `python -m bench.run` (`make bench{' FULL=1' if mode.name == 'full' else ''}`)"
        " — see `bench/README.md` for what each row measures and how.",
        "",
    ]
    loads = _all_loads(ctx)
    if loads and max(loads) > (os.cpu_count() or 1):
        lines += [
            f"> **Measured on a loaded machine**: the 1-minute load average was "
            f"{min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores while these figures "
            "were taken (other work shared the CPUs). Absolute figures are pessimistic and "
            "noisy; the ratios to the interleaved baselines are the steadier numbers. To be "
            "re-measured on a quiet machine.",
            "",
        ]
    if mode.tiny:
        lines += [
            "> **Tiny mode: correctness checks only.** The sizes are too small for the "
            "figures to mean anything.",
            "",
        ]
    lines += [
        f"- **mode**: {mode.name} ({mode.repeats} interleaved repeats per figure after a "
        f"warm-up), benchmarks {', '.join(selected)}, databases {', '.join(kinds)}",
        f"- **date**: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s in all",
        f"- **commit**: {_git()}",
        f"- **machine**: {_cpu_model()}, {os.cpu_count()} cores, {_ram()} RAM, Linux "
        f"{platform.release()}; 1-minute load average {load1():.1f} when the report was "
        "written",
        f"- **Python** {platform.python_version()}; {_versions()}",
        f"- **CPU calibration**: {calibration_us():.0f} µs of thread CPU for a fixed "
        f"pure-Python loop ({CALIBRATION_N:,} iterations, best of 5), measured as the report "
        "was written: the yardstick for the CPU µs per signal in P1's rows",
        f"- **SQLite** {sqlite3.sqlite_version}: {_sqlite_pragmas()}",
        f"- **PostgreSQL** {pg_version}: {pg_settings}",
        "",
    ]
    lines += table(ctx.rows)
    lines += ["", "## Correctness: what was sent against what was stored and delivered", ""]
    lines += [
        "| benchmark | sent | stored | delivered / notified | ok |",
        "|---|---|---|---|---|",
    ]
    for t in ctx.tallies:
        delivered = "—" if t.delivered is None else f"{t.delivered:,}"
        lines.append(
            f"| {t.id} | {t.sent:,} | {t.stored:,} | {delivered} | {'yes' if t.ok else 'NO'} |"
        )
    if ctx.failures:
        lines += ["", "## Failures", ""]
        lines += [f"- {_cell(f)}" for f in ctx.failures]
    lines += ["", "## Notes", ""]
    lines += [f"- {n}" for n in (*standard_notes(ctx), *ctx.notes)]
    lines += ["", "## Profile", ""]
    # One file of findings per area (bench/profile/*.md), written by hand from py-spy /
    # tracemalloc runs, so that the findings survive every regeneration of this report.
    notes = sorted((Path(__file__).parent / "profile").glob("*.md"))
    lines += [n.read_text().strip() + "\n" for n in notes] or [
        "_To be filled from py-spy/pyinstrument runs._",
        "",
    ]
    path.write_text("\n".join(lines))


def standard_notes(ctx: Bench) -> list[str]:
    mode = ctx.mode
    notes = [
        "Each figure is the median of its repeats, with the min–max spread; the load "
        "average column is the 1-minute load average sampled at each repeat (subject and "
        "baseline), median and range. Subject and baseline alternate A B, B A, … and the "
        "ratio is the median of the per-pair ratios.",
        "Throughput rows are closed loop (each connection or thread sends its next "
        "operation when the previous one finished); latency rows are open loop (requests "
        "are due at fixed times and their latency counts from the due time, so a slow "
        "server cannot slow the load down and hide its queueing).",
        "A run fails only when work is lost or doubled (see the correctness table); a floor "
        "or goal that is not met is reported here and fails nothing.",
        "P1 and P7's P1 call Runbell in-process (`bench/targets.py`, the only module that "
        "imports `runbell`); everything else goes through `runbell serve`, `runbell api`, "
        "`runbell worker` and `runbell migrate` processes, with the load generator, the "
        "webhook receiver and the SSE subscribers in processes of their own.",
        "Servers log at their default level (INFO, to a file); the in-process core logs "
        "the same way.",
        "P1 and P3 floors and goals on rate apply where the issue names them (P1 at 8 "
        "writers, P3's absolute rates at 2 workers); the other rows are shown for context.",
    ]
    if mode.name != "full":
        notes.append(
            f"{mode.name} mode uses smaller sizes than `make bench FULL=1`: P6 opens "
            f"{mode.p6_subscribers:,} subscribers (the issue says 10,000; RSS is projected "
            "linearly to 10,000 and labelled), P7 seeds "
            f"{', '.join(f'{n:,}' for n in mode.p7_sqlite_rows)} rows on SQLite and "
            f"{', '.join(f'{n:,}' for n in mode.p7_pg_rows) or 'none'} on PostgreSQL "
            "(FULL: 1 M, and 1 M + 10 M)"
            + (
                ""
                if mode.tiny
                else f"; repeats last about {mode.p1_seconds:g} s (P1), "
                f"{mode.p2_seconds:g} s (P2), {mode.p3_seconds:g} s (P3)"
            )
            + "."
        )
    took = time.monotonic() - ctx.started
    if mode.name == "quick" and took > 300:
        notes.append(
            "Quick mode's sizes aim at 5 minutes on this 2-core machine when it is not shared "
            f"(not yet checked on a quiet one); this run took {took / 60:.1f} minutes at the "
            "load average shown."
        )
    return notes


def _all_loads(ctx: Bench) -> list[float]:
    return [
        x for r in ctx.rows for x in r.measured.loads + (r.baseline.loads if r.baseline else [])
    ]
