"""What every benchmark shares: modes and sizes, statistics, result rows, child processes.

A *figure* is one number measured ``repeats`` times after a warm-up; a *row* of
BENCHMARKS.md holds a figure, the baseline measured in the same run (the two alternate,
ABBA, so a change in machine load hits both), their ratio and the issue's floor and goal
checks. A :class:`CorrectnessError` (something sent was lost or doubled) is the only
thing that fails a run; a missed floor or goal is reported, never raised.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
RUNBELL = str(Path(sys.executable).with_name("runbell"))


class CorrectnessError(Exception):
    """Work was lost or doubled: what was sent does not match what was stored/delivered."""


# --- modes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """Sizes and durations. ``tiny`` checks correctness only (seconds, for the smoke test);
    ``quick`` is ``make bench`` (< 5 minutes on a 2-core machine); ``full`` is FULL=1."""

    name: str
    repeats: int
    # P1: seconds of signals per repeat (sized from the warm-up's rate), cap per repeat
    p1_seconds: float
    p1_min: int
    p1_max: int
    # P2: closed-loop seconds per repeat, connections, open-loop seconds per repeat
    p2_seconds: float
    p2_conns: int
    p2_open_seconds: float
    # P3: seconds of draining per repeat (sized from the warm-up), worker counts
    p3_seconds: float
    p3_min: int
    p3_max: int
    p3_workers: tuple[int, ...]
    # P4: open-loop seconds per repeat
    p4_seconds: float
    # P5: subscribers, commits per second, seconds per repeat
    p5_subscribers: int
    p5_rate: float
    p5_seconds: float
    # P6: subscribers held, idle seconds for the CPU figure, wake-ups measured
    p6_subscribers: int
    p6_idle_seconds: float
    p6_wakes: int
    # P7: history sizes per database (0 is always measured as the baseline)
    p7_sqlite_rows: tuple[int, ...]
    p7_pg_rows: tuple[int, ...]
    p7_feed_rate: float

    @property
    def tiny(self) -> bool:
        return self.name == "tiny"


TINY = Mode(
    name="tiny",
    repeats=2,
    p1_seconds=0.0,
    p1_min=12,
    p1_max=12,
    p2_seconds=0.4,
    p2_conns=4,
    p2_open_seconds=0.4,
    p3_seconds=0.0,
    p3_min=16,
    p3_max=16,
    p3_workers=(2,),
    p4_seconds=0.5,
    p5_subscribers=10,
    p5_rate=10.0,
    p5_seconds=0.5,
    p6_subscribers=20,
    p6_idle_seconds=0.5,
    p6_wakes=1,
    p7_sqlite_rows=(2_000,),
    p7_pg_rows=(2_000,),
    p7_feed_rate=20.0,
)

QUICK = Mode(
    name="quick",
    repeats=5,
    p1_seconds=0.5,
    p1_min=40,
    p1_max=3_000,
    p2_seconds=1.0,
    p2_conns=8,
    p2_open_seconds=1.0,
    p3_seconds=0.7,
    p3_min=100,
    p3_max=4_000,
    p3_workers=(1, 2, 4),
    p4_seconds=2.0,
    p5_subscribers=1_000,
    p5_rate=10.0,
    p5_seconds=1.0,
    p6_subscribers=2_000,
    p6_idle_seconds=10.0,
    p6_wakes=5,
    p7_sqlite_rows=(100_000,),
    p7_pg_rows=(100_000,),
    p7_feed_rate=50.0,
)

FULL = Mode(
    name="full",
    repeats=7,
    p1_seconds=3.0,
    p1_min=100,
    p1_max=20_000,
    p2_seconds=5.0,
    p2_conns=8,
    p2_open_seconds=5.0,
    p3_seconds=4.0,
    p3_min=500,
    p3_max=20_000,
    p3_workers=(1, 2, 4),
    p4_seconds=6.0,
    p5_subscribers=1_000,
    p5_rate=10.0,
    p5_seconds=5.0,
    p6_subscribers=10_000,
    p6_idle_seconds=10.0,
    p6_wakes=7,
    p7_sqlite_rows=(1_000_000,),
    p7_pg_rows=(1_000_000, 10_000_000),
    p7_feed_rate=100.0,
)

MODES = {m.name: m for m in (TINY, QUICK, FULL)}


def sized(rate: float, seconds: float, lo: int, hi: int) -> int:
    """How many operations fill ``seconds`` at ``rate``, within [lo, hi]."""
    if seconds <= 0 or rate <= 0:
        return lo
    return max(lo, min(hi, int(rate * seconds)))


# --- statistics ------------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p99 of 100 samples is the 99th smallest)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def load1() -> float:
    return os.getloadavg()[0]


#: The calibration loop's size (fixed: its time is what compares two machines' CPUs).
CALIBRATION_N = 200_000


def calibration_us() -> float:
    """CPU µs of a fixed pure-Python loop on this thread (the best of 5): a yardstick
    printed beside CPU-per-operation figures, so those from two machines compare."""
    best = float("inf")
    for _ in range(5):
        t0 = time.thread_time()
        acc = 0
        for i in range(CALIBRATION_N):
            acc += i * i % 7
        best = min(best, time.thread_time() - t0)
    return best * 1e6


@dataclass
class Figure:
    """One quantity measured once per repeat, with the 1-minute load average beside each."""

    unit: str
    values: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)
        self.loads.append(load1())

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    @property
    def lo(self) -> float:
        return min(self.values) if self.values else math.nan

    @property
    def hi(self) -> float:
        return max(self.values) if self.values else math.nan


def ratios(subject: Figure, baseline: Figure) -> Figure:
    """Per-repeat ratios of interleaved pairs (each pair was measured back to back)."""
    out = Figure("×")
    for s, b, ls, lb in zip(
        subject.values, baseline.values, subject.loads, baseline.loads, strict=False
    ):
        out.values.append(s / b if b else math.nan)
        out.loads.append((ls + lb) / 2)
    return out


def interleaved(repeats: int, a: Callable[[int], None], b: Callable[[int], None]) -> None:
    """Run ``a`` and ``b`` ``repeats`` times each in ABBA order (A B, B A, A B, …)."""
    for rep in range(repeats):
        first, second = (a, b) if rep % 2 == 0 else (b, a)
        first(rep)
        second(rep)


@dataclass(frozen=True)
class Check:
    """One floor or goal condition: ``metric`` (a key of ``Row.metrics``) ``op`` ``limit``."""

    metric: str
    op: str  # ">=" or "<="
    limit: float
    text: str

    def holds(self, metrics: dict[str, float]) -> bool | None:
        value = metrics.get(self.metric)
        if value is None or math.isnan(value):
            return None
        return value >= self.limit if self.op == ">=" else value <= self.limit


@dataclass
class Row:
    id: str
    what: str
    measured: Figure
    baseline: Figure | None = None
    baseline_what: str = "—"
    ratio: Figure | None = None
    floor: tuple[Check, ...] = ()
    goal: tuple[Check, ...] = ()
    extra: dict[str, float] = field(default_factory=dict)  # more metrics for checks
    note: str = ""

    @property
    def metrics(self) -> dict[str, float]:
        out = {"value": self.measured.median, **self.extra}
        if self.ratio is not None:
            out["ratio"] = self.ratio.median
        if self.baseline is not None:
            out["baseline"] = self.baseline.median
        return out

    def verdict(self, checks: tuple[Check, ...]) -> bool | None:
        results = [c.holds(self.metrics) for c in checks]
        if not results:
            return None
        if any(r is False for r in results):
            return False
        if any(r is None for r in results):
            return None
        return True


@dataclass
class Tally:
    """What one benchmark sent against what was stored and delivered (the correctness line)."""

    id: str
    sent: int = 0
    stored: int = 0
    delivered: int | None = None
    detail: str = ""
    ok: bool = True


# --- child processes -------------------------------------------------------------------


def child_env(**extra: str) -> dict[str, str]:
    """This environment without RUNBELL_* (a child gets exactly the settings we pass).

    The child imports ``bench`` and ``runbell`` from this checkout, whatever the virtualenv
    has installed (a shared one may point at another worktree)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNBELL_")}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "src")]))
    env.update(extra)
    return env


class Child:
    """A bench helper process (receiver, SSE clients) spoken to in JSON lines on stdin and
    stdout. Its first line is a greeting (e.g. the port it listens on)."""

    def __init__(self, module: str, config: dict[str, Any], log: Path, **env: str) -> None:
        self.log = log
        self._logfile = log.open("wb")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", module, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._logfile,
            cwd=REPO,
            env=child_env(**env),
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._pumper = threading.Thread(target=self._pump, daemon=True)
        self._pumper.start()
        self.hello = self._read(30.0)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _read(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.log.name}: no answer within {timeout:.0f}s") from None
        if line is None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.log.name} exited ({self.proc.poll()}):\n{tail}")
        out: dict[str, Any] = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"{self.log.name}: {out['error']}")
        return out

    def call(self, cmd: str, timeout: float = 120.0, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        return self._read(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(RuntimeError, OSError, ValueError):
                self.call("quit", timeout=10)
        stop(self.proc)
        self._pumper.join(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._logfile.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop(proc: subprocess.Popen[Any], timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it does not exit in time. Only ever our own children."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def wait_until(cond: Callable[[], bool], what: str, timeout: float, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def proc_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")
