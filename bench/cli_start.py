"""How much CPU a ``runbell`` command costs before it does anything (issue 16's floor:
every command starts in ≤ 150 ms of CPU).

Each command line below is run ``N`` times as a child process (stdout and stderr to
/dev/null, ``COLUMNS=80``); its CPU is the child's user + system time
(``resource.getrusage(RUSAGE_CHILDREN)`` before and after). The baseline, ``python -c
pass`` with the same interpreter, is measured in the same run, and the runs are
interleaved (one of each command per round) so that a change in the machine's load hits
every row alike. Reported: min and median per command, and the min over the baseline's
min (what ``runbell`` itself adds). Wall time is not measured: on a shared machine it is
mostly other people's work.

Runbell's modules are compiled to bytecode first (``compileall``), as an installed wheel
has them: with ``PYTHONDONTWRITEBYTECODE=1`` and no ``.pyc`` every start would compile
them again, which is not what a user pays.

    python -m bench.cli_start [N]      # N runs of each (default 20)
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys

from bench.common import PYTHON, RUNBELL

FLOOR_MS = 150.0

COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", [PYTHON, "-c", "pass"]),
    ("runbell --help", [RUNBELL, "--help"]),
    ("runbell report --help", [RUNBELL, "report", "--help"]),
    ("runbell secret-key", [RUNBELL, "secret-key"]),
    ("runbell hook claude-code --help", [RUNBELL, "hook", "claude-code", "--help"]),
    ("runbell deliveries list --help", [RUNBELL, "deliveries", "list", "--help"]),
    ("runbell completion bash", [RUNBELL, "completion", "bash"]),
]


def compile_runbell() -> None:
    """Write the bytecode of the ``runbell`` package the command imports."""
    where = subprocess.run(
        [PYTHON, "-c", "import os, runbell; print(os.path.dirname(runbell.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run([PYTHON, "-m", "compileall", "-q", where], check=True)


def cpu_ms(argv: list[str], env: dict[str, str]) -> float:
    """The CPU (user + system) one run of ``argv`` used, in milliseconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used * 1000


def measure(runs: int) -> dict[str, list[float]]:
    env = {**os.environ, "COLUMNS": "80"}
    samples: dict[str, list[float]] = {name: [] for name, _ in COMMANDS}
    for _, argv in COMMANDS:  # warm-up: the file cache, not the numbers
        cpu_ms(argv, env)
    for _ in range(runs):
        for name, argv in COMMANDS:
            samples[name].append(cpu_ms(argv, env))
    return samples


def table(samples: dict[str, list[float]], runs: int, load: list[tuple[float, ...]]) -> str:
    base = min(samples["python -c pass"])
    width = max(len(name) for name in samples)
    shown = " → ".join(" ".join(f"{x:.2f}" for x in at) for at in load)
    lines = [
        f"CPU per start (user+sys of the child), {runs} runs each, interleaved",
        f"load average (1, 5, 15 min) at start → end: {shown}",
        "",
        f"{'command':<{width}}  {'min ms':>7}  {'median':>7}  {'min − python':>12}  floor",
    ]
    for name, values in samples.items():
        low, mid = min(values), statistics.median(values)
        extra = "" if name == "python -c pass" else f"{low - base:12.1f}"
        floor = "" if name == "python -c pass" else ("ok" if low <= FLOOR_MS else "❌ over")
        lines.append(f"{name:<{width}}  {low:7.1f}  {mid:7.1f}  {extra:>12}  {floor}")
    lines.append("")
    lines.append(f"floor: every command ≤ {FLOOR_MS:.0f} ms of CPU (min over the runs)")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    runs = int(argv[0]) if argv else 20
    compile_runbell()
    before = os.getloadavg()
    samples = measure(runs)
    print(table(samples, runs, [before, os.getloadavg()]))


if __name__ == "__main__":
    main(sys.argv[1:])
