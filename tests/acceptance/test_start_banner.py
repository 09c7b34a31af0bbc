"""What `make run` (``runbell serve --demo``) prints in a terminal, first start and restart
(issue 16 rows 7, 12 and 14): the secrets are printed (stdout is a terminal, so no file is
written), last, once the port accepts connections, and the demo's log lines do not bury
them; a restart on the same database makes no demo promise and prints a fresh sign-in
link, again only once the port accepts connections.

stdout is a real pseudo-terminal (:mod:`pty`), stderr a file, as a terminal shows both.
Each line is handled the moment it is read: a line holding a sign-in link is checked by
connecting to the port right then.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.acceptance.test_cli import (
    KEY,
    RUNBELL,
    TOKEN,
    WELCOME,
    Served,
    cli_env,
    secrets_file,
)
from tests.acceptance.test_first_hour import LINK, ROOT, second_terminal, signs_in
from tests.conftest import free_port
from tests.timeouts import WAIT, scaled

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PROMISE = "will ask for your approval"


class Terminal:
    """`runbell serve --demo` with stdout on a pseudo-terminal; stderr to ``<name>.err``."""

    def __init__(self, env: dict[str, str], workdir: Path, name: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.err_path = workdir / f"{name}.err"
        self.lines: list[str] = []
        self.accepting_at: list[str] = []  # lines holding a link, each seen with the port open
        self._buffer = b""
        master, slave = pty.openpty()
        with self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [RUNBELL, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--demo"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=slave,
                stderr=err,
                cwd=ROOT,
            )
        os.close(slave)
        self.master = master

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def _take(self, line: str) -> None:
        line = ANSI.sub("", line).rstrip("\r")
        if LINK.search(line):
            # Printed now: the port must accept a connection now.
            with socket.create_connection(("127.0.0.1", self.port), timeout=WAIT):
                self.accepting_at.append(line)
        self.lines.append(line)

    def read(self, seconds: float) -> bool:
        """Read what arrives within ``seconds``; False once the terminal is closed."""
        ready, _, _ = select.select([self.master], [], [], seconds)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed its side
            return False
        if not chunk:
            return False
        self._buffer += chunk
        *complete, self._buffer = self._buffer.split(b"\n")
        for raw in complete:
            self._take(raw.decode(errors="replace"))
        return True

    def until(self, done: Callable[[], bool], what: str, timeout: float = scaled(120)) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if not self.read(0.2) or self.proc.poll() is not None:
                raise AssertionError(f"serve ended before {what}:\n{self.text}\n{self.stderr}")
            if time.monotonic() > deadline:
                late = f"no {what} within {timeout:.0f}s"
                raise AssertionError(f"{late}:\n{self.text}\n{self.stderr}")

    def drain(self) -> list[str]:
        """Whatever stdout has printed by now (and not read yet)."""
        before = len(self.lines)
        while True:
            seen = (len(self.lines), len(self._buffer))
            if not self.read(0.5) or (len(self.lines), len(self._buffer)) == seen:
                break
        return [*self.lines[before:], self._buffer.decode(errors="replace")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=WAIT)
        os.close(self.master)


def approve_demo_and_wait_for_completion(url: str, token: str) -> None:
    me = {"Authorization": f"Bearer {token}"}
    deadline = time.monotonic() + scaled(120)
    with httpx.Client(base_url=url, timeout=WAIT, trust_env=False) as http:
        while True:
            r = http.get("/v1/input-requests/demo-approve-deploy", headers=me)
            if r.status_code == 200 and r.json()["input_request"]["state"] == "pending":
                request: dict[str, Any] = r.json()["input_request"]
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        answer = http.post(
            "/v1/input-requests/demo-approve-deploy/responses",
            headers={**me, "Idempotency-Key": "banner-test-1"},
            json={
                "decision": "approve",
                "expected_run_version": request["run_version"],
                "expected_request_version": request["version"],
            },
        )
        assert answer.status_code == 200, answer.text
        while http.get("/v1/runs/demo-deploy", headers=me).json()["state"] != "completed":
            assert time.monotonic() < deadline, "the demo run never completed"
            time.sleep(0.2)


def test_make_run_in_a_terminal_first_start_then_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**second_terminal(), "RUNBELL_DATA_DIR": str(data), "PYTHONUNBUFFERED": "1"}

    # --- first start -------------------------------------------------------------------
    first = Terminal(env, tmp_path, "first")
    try:
        first.until(lambda: any("API reference" in line for line in first.lines), "the secrets")
        out = first.text
        # The secrets, printed to the terminal; no file written.
        assert out.count(WELCOME) == 1
        assert len(set(KEY.findall(out))) == 2 and TOKEN.search(out), out
        assert not list(data.glob("first-start*"))
        # The sign-in link line was printed with the port already accepting connections.
        [(base, token)] = LINK.findall(out)
        assert base == first.url and len(first.accepting_at) == 1, first.accepting_at
        # The secrets block comes last: after the listening line and the demo's promise.
        welcome_at = out.index(WELCOME)
        assert out.index("Runbell listening on") < welcome_at, out
        assert out.index(f"Demo: a run {PROMISE} in a few seconds") < welcome_at, out
        assert out.rstrip().endswith(f"API reference (served by this server): {first.url}/docs")
        assert "docs/api.md" not in out  # a wheel install has no docs/
        # The demo's first seconds (both runs, the approval request, a dozen webhook
        # deliveries) print nothing more and log no per-item line that would bury it.
        user_token = TOKEN.findall(out)[0]
        approve_demo_and_wait_for_completion(first.url, user_token)
        assert [line for line in first.drain() if line.strip()] == []
        log = first.stderr
        assert "demo.waiting_for_approval" in log, log
        assert not re.search(r"delivery\.attempted .*outcome=accepted", log), log
        assert "run.created" not in log and "Traceback" not in log, log
        signs_in(f"{base}/auth/{token}")
    finally:
        first.stop()

    # --- restart on the same database -------------------------------------------------
    again = Terminal(env, tmp_path, "again")
    try:
        again.until(lambda: any("login-link" in line for line in again.lines), "how to sign in")
        out = again.text
        assert WELCOME not in out and not KEY.search(out) and not TOKEN.search(out), out
        assert PROMISE not in out, out  # the demo ran once; no promise of another
        assert "Demo: it ran on the first start of this database" in out, out
        assert "delete ./data" in out or f"delete {data}" in out, out
        # A fresh sign-in link, printed once the port accepted connections; it works.
        [(base, token)] = LINK.findall(out)
        assert base == again.url and len(again.accepting_at) == 1, again.accepting_at
        signs_in(f"{base}/auth/{token}")
        assert "Traceback" not in again.stderr
    finally:
        again.stop()


def test_without_a_terminal_the_first_start_writes_its_secrets_once_to_a_private_file(
    tmp_path: Path, db_url: str
) -> None:
    """Both databases, stdout a pipe (a journal, a container log): no secret printed or
    logged; one 0600 file in RUNBELL_DATA_DIR (created 0700 when missing, as on a
    PostgreSQL host where nothing else lives there) holds working keys; a restart leaves
    it as it was and prints no secret."""
    data = tmp_path / "state" / "runbell"
    env = {**cli_env(data, db_url)}
    with Served(env, tmp_path, "first") as served:
        printed = served.stdout + served.stderr
        assert not KEY.search(printed) and not TOKEN.search(printed), printed
        assert not LINK.search(printed), printed
        path = secrets_file(served.stdout)
        assert path.parent == data.resolve()
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        written = path.read_text()
        assert written.count(WELCOME) == 1 and LINK.search(written)
        runtime_key = KEY.findall(written.split("runtime key", 1)[1])[0]
        made = httpx.put(
            f"{served.url}/v1/runs/secrets-file-1",
            json={"owner": "you@example.com"},
            headers={"Authorization": f"Bearer {runtime_key}"},
            timeout=WAIT,
        )
        assert made.status_code == 201, made.text
        served.terminate()
    with Served(env, tmp_path, "again") as again:
        printed = again.stdout + again.stderr
        assert WELCOME not in printed and not KEY.search(printed) and not LINK.search(printed)
        again.terminate()
    assert path.read_text() == written
    assert [p.name for p in data.iterdir() if p.name.startswith("first-start")] == [path.name]
