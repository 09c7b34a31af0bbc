"""`runbell api`, `runbell serve` and `runbell worker --scheduler` as real child processes,
shaped like :class:`~tests.acceptance.test_worker_processes.WorkerProc` (a log file,
``launch``/``ready``/``stop``/``kill``), so the fault tests can mix them with workers and
wait on all of them with one ``wait_for``."""

from __future__ import annotations

import subprocess
from contextlib import ExitStack
from pathlib import Path

import httpx

from tests.acceptance.test_worker_processes import RUNBELL, WorkerProc, wait_for
from tests.conftest import free_port
from tests.plain_http import TLS
from tests.timeouts import scaled


class ApiProc(WorkerProc):
    """One `runbell api` child on a free loopback port."""

    command = "api"

    def __init__(self, env: dict[str, str], log: Path) -> None:
        super().__init__(env, log)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def launch(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [RUNBELL, self.command, "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> None:
        def answers() -> bool:
            try:
                return (
                    httpx.get(f"{self.url}/readyz", timeout=scaled(5), verify=TLS).status_code
                    == 200
                )
            except httpx.HTTPError:
                return False

        # Start-up is mostly imports: slow on a loaded machine.
        wait_for(answers, f"{self.log.name} to answer", [self], timeout=scaled(90))


class ServeProc(ApiProc):
    """`runbell serve`: the API, a delivery worker and the scheduler in one process."""

    command = "serve"


class SchedulerProc(WorkerProc):
    """`runbell worker --scheduler`: a delivery worker that also runs the sweeps."""

    def launch(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [RUNBELL, "worker", "--scheduler"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )


def start_all(stack: ExitStack, procs: list[WorkerProc]) -> list[WorkerProc]:
    """Launch every child at once (killed when ``stack`` closes), then wait for each."""
    for proc in procs:
        stack.callback(proc.kill)
        proc.launch()
    for proc in procs:
        proc.ready()
    return procs


def start_apis(stack: ExitStack, env: dict[str, str], logs: Path, count: int) -> list[ApiProc]:
    apis = [ApiProc(env, logs / f"api{n}.log") for n in range(1, count + 1)]
    start_all(stack, list(apis))
    return apis
