"""How much CPU a ``runbell`` command costs before it does anything (issue 16's floor:
every command starts in ≤ 150 ms of CPU), what a hook call costs with a real payload and
how soon ``runbell mcp`` is ready (issue 20's floors: a ``runbell hook`` call ≤ 150 ms of
CPU, ``runbell mcp`` ready in ≤ 1 s).

Each command below is run ``N`` times as a child process (stdout and stderr to
/dev/null, ``COLUMNS=80``); its CPU is the child's user + system time
(``resource.getrusage(RUSAGE_CHILDREN)`` before and after). The baseline, ``python -c
pass`` with the same interpreter, is measured in the same run, and the runs are
interleaved (one of each command per round) so that a change in the machine's load hits
every row alike. Reported: min and median per command, and the min over the baseline's
min (what ``runbell`` itself adds).

The hook rows are whole calls, as Claude Code makes them: ``runbell hook claude-code``
with ``tests/fixtures/claude_code/user_prompt_submit.json`` on stdin, once against a
``runbell serve`` started for the run (SQLite, a tenant, its runtime key and owner: the
call makes sure of the turn's run and signals ``working``; after the first round these
are the duplicates a repeated hook sends), once with ``RUNBELL_URL`` on a port nobody
listens on (the call tries twice and gives up silently). The ``runbell mcp`` row starts
the server over stdio against the same ``runbell serve``, sends MCP ``initialize``, and
counts the CPU until the process exits after its stdin closes; its *ready* column is the
wall time from the start to the ``initialize`` answer — the one wall time measured here
(what an MCP client waits for), so on a shared machine it is mostly other people's work.

Runbell's modules are compiled to bytecode first (``compileall``), as an installed wheel
has them: with ``PYTHONDONTWRITEBYTECODE=1`` and no ``.pyc`` every start would compile
them again, which is not what a user pays.

    python -m bench.cli_start [N]      # N runs of each (default 20)

It prints the table, writes it to ``bench/profile/cli-start.md`` (which ``bench.report``
copies into every BENCHMARKS.md it writes) and replaces that section of BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.common import PYTHON, REPO, RUNBELL, child_env

FLOOR_MS = 150.0
READY_FLOOR_S = 1.0
PAYLOAD = REPO / "tests" / "fixtures" / "claude_code" / "user_prompt_submit.json"
PROFILE = REPO / "bench" / "profile" / "cli-start.md"
HEADING = "### Command start: `--help`, hook calls, `runbell mcp`"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench.cli_start", "version": "0"},
    },
}


@dataclass(frozen=True)
class Start:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # on top of the common environment
    stdin: Path | None = None
    mcp: bool = False  # answer initialize, then close stdin


COMMANDS: list[Start] = [
    Start("python -c pass", [PYTHON, "-c", "pass"]),
    Start("runbell --help", [RUNBELL, "--help"]),
    Start("runbell report --help", [RUNBELL, "report", "--help"]),
    Start("runbell secret-key", [RUNBELL, "secret-key"]),
    Start("runbell hook claude-code --help", [RUNBELL, "hook", "claude-code", "--help"]),
    Start("runbell deliveries list --help", [RUNBELL, "deliveries", "list", "--help"]),
    Start("runbell completion bash", [RUNBELL, "completion", "bash"]),
]


def compile_runbell() -> None:
    """Write the bytecode of the ``runbell`` package the command imports."""
    where = subprocess.run(
        [PYTHON, "-c", "import os, runbell; print(os.path.dirname(runbell.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        env=child_env(),
    ).stdout.strip()
    subprocess.run([PYTHON, "-m", "compileall", "-q", where], check=True)


def cpu_ms(start: Start, env: dict[str, str]) -> tuple[float, float | None]:
    """The CPU (user + system) one run of ``start`` used, in milliseconds, and for
    ``runbell mcp`` the seconds until its initialize answer."""
    env = {**env, **start.env}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ready = None
    if start.mcp:
        ready = _mcp_ready(start.argv, env)
    else:
        with (start.stdin or Path(os.devnull)).open("rb") as stdin:
            subprocess.run(
                start.argv,
                env=env,
                stdin=stdin,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used * 1000, ready


def _mcp_ready(argv: list[str], env: dict[str, str]) -> float:
    began = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    ready = time.monotonic() - began
    proc.stdin.close()
    proc.stdout.read()
    proc.wait(60)
    if b'"result"' not in line:
        raise RuntimeError(f"runbell mcp did not answer initialize: {line[:300]!r}")
    return ready


@contextmanager
def hook_commands(workdir: Path) -> Iterator[list[Start]]:
    """The hook and MCP rows, with a ``runbell serve`` (SQLite) for them to talk to."""
    from bench import targets
    from bench.servers import Databases, Server, free_port

    secret = targets.new_secret_key()
    dbs = Databases(workdir, secret)
    db = dbs.sqlite("cli-start")
    core = targets.open_core(db.url, db.data_dir, secret)
    try:
        tenant = targets.setup_tenant(core)
    finally:
        targets.close_core(core)
    server = Server(dbs.env(db), "serve", workdir / "serve.log").ready()
    try:
        reach = {
            "RUNBELL_URL": server.url,
            "RUNBELL_KEY": tenant.runtime_key,
            "RUNBELL_OWNER": tenant.owner_email,
            "RUNBELL_HOOK_STATE_DIR": str(workdir / "hook-state"),
        }
        nobody = {**reach, "RUNBELL_URL": f"http://127.0.0.1:{free_port()}"}
        hook = [RUNBELL, "hook", "claude-code"]
        yield [
            Start("runbell hook claude-code (server up)", hook, reach, PAYLOAD),
            Start("runbell hook claude-code (no server)", hook, nobody, PAYLOAD),
            Start("runbell mcp (initialize, then EOF)", [RUNBELL, "mcp"], reach, mcp=True),
        ]
    finally:
        server.stop()
        dbs.close()


@dataclass
class Samples:
    cpu: dict[str, list[float]]
    ready: dict[str, list[float]]


def measure(commands: list[Start], runs: int) -> Samples:
    # child_env: no RUNBELL_* from this shell, and this checkout's runbell on the path.
    env = child_env(COLUMNS="80")
    samples = Samples({c.name: [] for c in commands}, {})
    for start in commands:  # warm-up: the file cache, not the numbers
        cpu_ms(start, env)
    for _ in range(runs):
        for start in commands:
            cpu, ready = cpu_ms(start, env)
            samples.cpu[start.name].append(cpu)
            if ready is not None:
                samples.ready.setdefault(start.name, []).append(ready)
    return samples


def table(samples: Samples, runs: int, load: list[tuple[float, ...]]) -> str:
    base = min(samples.cpu["python -c pass"])
    width = max(len(name) for name in samples.cpu)
    shown = " → ".join(" ".join(f"{x:.2f}" for x in at) for at in load)
    lines = [
        f"CPU per start (user+sys of the child), {runs} runs each, interleaved",
        f"load average (1, 5, 15 min) at start → end: {shown}",
        "",
        f"{'command':<{width}}  {'min ms':>7}  {'median':>7}  {'min − python':>12}  floor",
    ]
    for name, values in samples.cpu.items():
        low, mid = min(values), statistics.median(values)
        extra = "" if name == "python -c pass" else f"{low - base:12.1f}"
        floor = ""
        if name in samples.ready:
            floor = "(ready below)"
        elif name != "python -c pass":
            floor = "ok" if low <= FLOOR_MS else "❌ over"
        lines.append(f"{name:<{width}}  {low:7.1f}  {mid:7.1f}  {extra:>12}  {floor}")
    for name, values in samples.ready.items():
        low, mid = min(values), statistics.median(values)
        met = "ok" if low <= READY_FLOOR_S else "❌ over"
        lines.append("")
        lines.append(
            f"{name}: ready (initialize answered) after min {low:.2f} s, median {mid:.2f} s "
            f"(wall)  {met}"
        )
    lines.append("")
    lines.append(
        f"floors: every command and hook call ≤ {FLOOR_MS:.0f} ms of CPU (min over the runs); "
        f"runbell mcp ready in ≤ {READY_FLOOR_S:.0f} s"
    )
    return "\n".join(lines)


def section(text: str) -> str:
    """The Markdown section for bench/profile/ and BENCHMARKS.md."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cores = os.cpu_count()
    return "\n".join(
        [
            HEADING,
            "",
            f"Written by `python -m bench.cli_start` ({stamp}, {cores} cores; see that "
            "module's docstring for what each row is). The CPU is the child's user + system "
            "time, the min over the runs is what the floors are checked on; the machine is "
            "usually shared, so medians are pessimistic.",
            "",
            "Before issue 20's cuts (same machine, load average 12-14, 3 runs): a hook call "
            "with a payload took 178 ms (min, server up or not); `runbell mcp` 961 ms of CPU, "
            'ready after 3.35 s. The cuts are listed in docs/architecture.md ("The command '
            "line\"); what is left of `runbell mcp` is mostly the `mcp` SDK's own import.",
            "",
            "```text",
            text,
            "```",
            "",
        ]
    )


def splice(benchmarks: str, new: str) -> str:
    """``benchmarks`` with its section under :data:`HEADING` replaced by ``new`` (up to
    the next ``###``/``##`` heading), or ``new`` put first under ``## Profile``."""
    pattern = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^##|\Z)", re.S | re.M)
    if pattern.search(benchmarks):
        return pattern.sub(lambda _: new + "\n", benchmarks, count=1)
    marker = "## Profile\n"
    at = benchmarks.find(marker)
    if at < 0:
        return benchmarks.rstrip("\n") + "\n\n## Profile\n\n" + new
    at += len(marker)
    return benchmarks[:at] + "\n" + new + "\n" + benchmarks[at:].lstrip("\n")


def main(argv: list[str]) -> None:
    runs = int(argv[0]) if argv else 20
    compile_runbell()
    with (
        tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp,
        hook_commands(Path(tmp)) as hooks,
    ):
        before = os.getloadavg()
        samples = measure([*COMMANDS, *hooks], runs)
        text = table(samples, runs, [before, os.getloadavg()])
    print(text)
    new = section(text)
    PROFILE.write_text(new)
    benchmarks = REPO / "BENCHMARKS.md"
    if benchmarks.exists():
        benchmarks.write_text(splice(benchmarks.read_text(), new))
    print(f"\nwritten to {PROFILE.relative_to(REPO)} and BENCHMARKS.md")


if __name__ == "__main__":
    main(sys.argv[1:])
