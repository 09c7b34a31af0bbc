"""A real `runbell serve` for the agent CLIs, and what a test needs around one session:
a throwaway HOME, the hook log, and the pane and logs to print when something fails."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from runbell.app import build
from runbell.testing import make_tenant
from tests.acceptance.processes import ServeProc
from tests.acceptance.test_worker_processes import child_env, run_cli
from tests.conftest import make_settings
from tests.realclients.model import ScriptedModel
from tests.realclients.tmux import Tmux
from tests.timeouts import WAIT

KEY = re.compile(r"\brbk_[A-Za-z0-9_-]{20,}")
# The scoped key the integration docs recommend for the hooks.
HOOK_CAPABILITIES = ("runs.report", "input_requests.create", "runs.read")
ANTHROPIC_KEY = "sk-ant-scripted-0123456789abcdefghijklmnopqrstuv"


@dataclass
class Runbell:
    """`runbell serve` on a SQLite database with tenant ``acme`` and its owner."""

    serve: ServeProc
    env: dict[str, str]  # for `runbell …` admin commands on the same database
    owner_email: str
    owner_token: str

    @property
    def url(self) -> str:
        return self.serve.url

    def key(self, *capabilities: str) -> str:
        """A new scoped runtime key, made as the docs say: `runbell key create …`."""
        args = ["key", "create", "--tenant", "acme", "--name", "hooks"]
        for cap in capabilities:
            args += ["--capability", cap]
        res = run_cli(self.env, *args, "--runs", "cc-*", "--runs", "codex-*")
        assert res.returncode == 0, res.stdout + res.stderr
        found = KEY.findall(res.stdout)
        assert len(found) == 1, res.stdout
        return str(found[0])

    def owner(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.owner_token}"},
            timeout=WAIT,
        )

    def run(self, run_id: str) -> dict[str, Any] | None:
        with self.owner() as api:
            r = api.get(f"/v1/runs/{run_id}")
        if r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        return dict(r.json())

    def runs(self) -> list[dict[str, Any]]:
        with self.owner() as api:
            r = api.get("/v1/runs", params={"limit": 200})
        assert r.status_code == 200, r.text
        return list(r.json()["runs"])

    def approve(self, request: dict[str, Any]) -> None:
        """Answer an input request as the owner, as the web app does."""
        body = {
            "decision": "approve",
            "expected_run_version": request["run_version"],
            "expected_request_version": request["version"],
        }
        with self.owner() as api:
            r = api.post(
                f"/v1/input-requests/{request['id']}/responses",
                json=body,
                headers={"Idempotency-Key": f"approve-{request['id']}"},
            )
        assert r.status_code == 200, r.text


@contextlib.contextmanager
def runbell_serve(data_dir: Path, sqlite_template: Path) -> Iterator[Runbell]:
    db = data_dir / "runbell.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    core = build(make_settings(data_dir, url), migrate=False)
    creds = make_tenant(core, "acme")
    core.db.dispose()
    env = child_env(data_dir, url)
    serve = ServeProc(env, data_dir / "serve.log")
    try:
        serve.launch()
        serve.ready()
        yield Runbell(serve, env, creds.owner_email, creds.owner_token)
    finally:
        serve.kill()


@dataclass
class Session:
    """One agent CLI session's surroundings: a throwaway HOME, a project directory, the
    hook log, and (for interactive sessions) the tmux pane."""

    root: Path
    runbell: Runbell
    model: ScriptedModel
    tmux: Tmux | None = None
    output: str = ""  # a headless session's output
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def hook_log(self) -> Path:
        return self.root / "hook.log"

    def hook_log_text(self) -> str:
        return self.hook_log.read_text(errors="replace") if self.hook_log.exists() else ""

    def env(self, key: str, **extra: str) -> dict[str, str]:
        """A clean environment for the agent and its hooks (nothing of ours leaks in but
        PYTHONPATH, so the hooks run this checkout's Runbell)."""
        env = {
            "HOME": str(self.home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "RUNBELL_URL": self.runbell.url,
            "RUNBELL_KEY": key,
            "RUNBELL_OWNER": self.runbell.owner_email,
            "RUNBELL_HOOK_LOG": str(self.hook_log),
        }
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env.update(extra)
        return env

    def diagnostics(self) -> str:
        parts = [f"--- hook log ({self.hook_log})\n{self.hook_log_text() or '(empty)'}"]
        if self.tmux is not None:
            parts.append(f"--- tmux pane\n{self.tmux.pane().rstrip()}")
        if self.output:
            parts.append(f"--- agent output\n{self.output[-4000:]}")
        parts.append(f"--- model requests: {self.model.paths()}")
        parts.append(f"--- runbell serve log\n{self.runbell.serve.output[-3000:]}")
        return "\n".join(parts + self.notes)

    @contextlib.contextmanager
    def explained(self) -> Iterator[Session]:
        """Any failure inside prints the pane, the hook log and the server's log."""
        try:
            yield self
        except BaseException:
            print(self.diagnostics())
            raise

    def wait(self, what: str, condition: Callable[[], Any], timeout: float = WAIT) -> Any:
        """Poll ``condition`` until it returns something truthy, and return that."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if not self.runbell.serve.alive():
                raise AssertionError(f"waiting for {what}: runbell serve exited")
            if time.monotonic() > deadline:
                raise AssertionError(f"waiting for {what}: not within {timeout:.0f}s")
            time.sleep(0.2)


def claude_home(session: Session) -> None:
    """~/.claude.json as the notes say: no onboarding, no trust dialog, the key approved."""
    doc = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [ANTHROPIC_KEY[-20:]], "rejected": []},
        "projects": {
            str(session.project): {
                "hasTrustDialogAccepted": True,
                "hasTrustDialogHooksAccepted": True,
                "hasCompletedProjectOnboarding": True,
            }
        },
    }
    (session.home / ".claude.json").write_text(json.dumps(doc))


def claude_env(session: Session, key: str, **extra: str) -> dict[str, str]:
    return session.env(
        key,
        **extra,
        ANTHROPIC_BASE_URL=session.model.url,
        ANTHROPIC_API_KEY=ANTHROPIC_KEY,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
    )


def new_session_id() -> str:
    return str(uuid.uuid4())
