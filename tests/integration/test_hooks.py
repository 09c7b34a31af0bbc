"""The Claude Code and Codex hooks run the way the runtimes run them — a process, the
hook JSON on stdin (or Codex's notify JSON as the last argument), configuration in its
environment — against a real running Runbell (the ``live`` server), on SQLite and
PostgreSQL. Answers come from the owner through the HTTP API, in another thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import runbell
from runbell.hooks.mapping import permission_output
from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer, free_port
from tests.timeouts import WAIT, scaled

RUNBELL = str(Path(sys.executable).with_name("runbell"))
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SESSION = "2f6c1c2e-8a4b-4d1e-9c3f-5b7a9e0d1c42"
RUN1 = f"cc-{SESSION}"
CODEX_TURN = "codex-019a4c2e-7b1d-7c30-9e55-3f0a8d2b6c11.12346"
ALLOW = permission_output(True)
DENY = permission_output(False, "Denied in Runbell")


def fixture(runtime: str, name: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / runtime / f"{name}.json").read_text())
    payload.update(changes)
    return payload


@pytest.fixture
def env(live: LiveServer, creds: TenantCreds, tmp_path: Path) -> dict[str, str]:
    """What the hook process gets: the runtime's environment plus the three RUNBELL_*."""
    home = tmp_path / "home"
    home.mkdir()
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_PROJECT_DIR": str(tmp_path),
        "RUNBELL_URL": live.url,
        "RUNBELL_KEY": creds.runtime_key,
        "RUNBELL_OWNER": creds.owner_email,
        "RUNBELL_HOOK_STATE_DIR": str(tmp_path / "state"),
        "RUNBELL_HOOK_LOG": str(tmp_path / "hook.log"),
        # The runbell under test (a worktree's src/), not whatever the venv installed.
        "PYTHONPATH": str(Path(runbell.__file__).resolve().parents[1]),
    }


@pytest.fixture
def api(live: LiveServer, creds: TenantCreds) -> Iterator[httpx.Client]:
    """The owner's view (a user token), as the web app sees it."""
    with httpx.Client(base_url=live.url, headers=bearer(creds.owner_token), timeout=WAIT) as c:
        yield c


#: Every hook process a test started, reaped after it (see ``reap_hooks``).
STARTED: list[Hook] = []


@pytest.fixture(autouse=True)
def reap_hooks() -> Iterator[None]:
    """After each test, kill and reap the hooks it left running (a test that failed while
    one waited), printing what each said: otherwise the process outlived the test, its
    ResourceWarning failed whichever test ran next (seen in CI), and the failure itself
    said nothing of what the hook did."""
    yield
    while STARTED:
        hook = STARTED.pop()
        if hook.proc.poll() is None:
            hook.proc.kill()
            out, err = hook.proc.communicate()
            print(f"hook {hook.proc.args} was still running; stdout: {out!r}; stderr: {err!r}")
        else:
            hook.proc.communicate()


class Hook:
    """A hook process started the way the runtime starts it, the JSON already on stdin."""

    def __init__(self, env: dict[str, str], payload: dict[str, Any], argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=env["CLAUDE_PROJECT_DIR"],
        )
        STARTED.append(self)
        # The whole JSON, then end of input, as Claude Code writes it.
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload))
        self.proc.stdin.close()
        self.proc.stdin = None  # written and closed: communicate() only reads

    def finish(self) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=scaled(120))
        return self.proc.returncode, out, err


def start(env: dict[str, str], payload: dict[str, Any], *args: str, **extra: str) -> Hook:
    return Hook({**env, **extra}, payload, [RUNBELL, "hook", *(args or ("claude-code",))])


def finish(hook: Hook) -> tuple[int, str, str]:
    return hook.finish()


def hook(env: dict[str, str], payload: dict[str, Any], *args: str, **extra: str) -> str:
    """Run one hook to the end; it must exit 0 with nothing on stderr. Returns stdout."""
    code, out, err = finish(start(env, payload, *args, **extra))
    assert (code, err) == (0, ""), err
    return out


def log_of(env: dict[str, str]) -> str:
    path = Path(env["RUNBELL_HOOK_LOG"])
    return path.read_text() if path.exists() else ""


def run(api: httpx.Client, run_id: str) -> dict[str, Any]:
    response = api.get(f"/v1/runs/{run_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def notifications(api: httpx.Client) -> list[dict[str, Any]]:
    body = api.get("/v1/notifications", params={"limit": 100}).json()
    items: list[dict[str, Any]] = body.get("notifications", body.get("items", []))
    return items


def kinds(api: httpx.Client, run_id: str) -> list[str]:
    return sorted(n["attention_type"] for n in notifications(api) if n["run_id"] == run_id)


#: How long the answering side waits for the hook to open its request: as long as the hook
#: itself waits for the answer (RUNBELL_HOOK_TIMEOUT=60 below). A hook is a new Python
#: process; on a loaded machine (the whole suite on 6 workers) it once took over 30 s.
HOOK_WAIT = scaled(60)


def pending(api: httpx.Client, run_id: str, other_than: str | None = None) -> dict[str, Any]:
    """Wait (bounded) until the run has a pending input request (other than one)."""
    deadline = time.monotonic() + HOOK_WAIT
    while time.monotonic() < deadline:
        response = api.get(f"/v1/runs/{run_id}")
        if response.status_code == 200:
            body = response.json()
            request = body.get("pending_input_request")
            if request and request["id"] != other_than:
                return {"run": body, "request": request}
        time.sleep(0.05)
    raise AssertionError(f"no pending input request on {run_id}")


def answer(api: httpx.Client, run_id: str, decision: str, other_than: str | None = None) -> str:
    """As the owner, in another thread: answer the run's pending request. Returns its id."""
    found = pending(api, run_id, other_than)
    request_id: str = found["request"]["id"]
    response = api.post(
        f"/v1/input-requests/{request_id}/responses",
        headers={"Idempotency-Key": uuid.uuid4().hex},
        json={
            "decision": decision,
            "expected_run_version": found["run"]["version"],
            "expected_request_version": found["request"]["version"],
        },
    )
    assert response.status_code == 200, response.text
    return request_id


def answer_in_thread(api: httpx.Client, run_id: str, decision: str) -> threading.Thread:
    thread = threading.Thread(target=answer, args=(api, run_id, decision), daemon=True)
    thread.start()
    return thread


# ----------------------------------------------------------------------------- Claude Code


def test_a_recorded_claude_code_session(env: dict[str, str], api: httpx.Client) -> None:
    assert hook(env, fixture("claude_code", "session_start")) == ""
    assert run(api, RUN1)["state"] == "queued"  # no prompt yet: no stall clock

    assert hook(env, fixture("claude_code", "user_prompt_submit")) == ""
    assert run(api, RUN1)["state"] == "working"

    assert hook(env, fixture("claude_code", "subagent_start")) == ""
    child = f"{RUN1}.agent-a1b2c3"
    assert run(api, child)["state"] == "working"
    assert run(api, child)["metadata"]["parent_run"] == RUN1

    assert hook(env, fixture("claude_code", "notification_idle_prompt")) == ""
    assert run(api, RUN1)["state"] == "input_required"
    assert hook(env, fixture("claude_code", "user_prompt_submit", prompt="go on")) == ""
    assert run(api, RUN1)["state"] == "working"

    assert hook(env, fixture("claude_code", "subagent_stop")) == ""
    assert run(api, child)["state"] == "completed"

    assert hook(env, fixture("claude_code", "stop")) == ""
    finished = run(api, RUN1)
    assert finished["state"] == "completed"
    assert finished["details"] == {"last_assistant_message": "All 42 tests pass now."}
    assert kinds(api, RUN1) == ["completed", "input_required"]
    assert kinds(api, child) == ["completed"]

    # The next turn is the next run; a failure fails it with the error class.
    assert hook(env, fixture("claude_code", "user_prompt_submit", prompt="deploy")) == ""
    assert run(api, f"{RUN1}.2")["state"] == "working"
    assert hook(env, fixture("claude_code", "stop_failure")) == ""
    failed = run(api, f"{RUN1}.2")
    assert failed["state"] == "failed"
    assert failed["error"]["code"] == "rate_limit"
    assert failed["stop_reason"] == "Claude Code stopped: rate_limit"
    assert kinds(api, f"{RUN1}.2") == ["failed"]
    assert log_of(env) == ""


def test_stop_with_background_tasks_keeps_the_run_working(
    env: dict[str, str], api: httpx.Client
) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    assert hook(env, fixture("claude_code", "stop_background")) == ""
    still = run(api, RUN1)
    assert still["state"] == "working"
    assert still["progress"]["message"] == "turn ended; 1 background task(s) still running"
    assert kinds(api, RUN1) == []
    # The wait notifications on a still-working run are input_required attention.
    hook(env, fixture("claude_code", "notification_elicitation_dialog"))
    assert run(api, RUN1)["state"] == "input_required"
    assert kinds(api, RUN1) == ["input_required"]


def test_three_subagents_finishing_together_are_three_notifications(
    env: dict[str, str], api: httpx.Client
) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    agents = [f"ag{i}" for i in range(3)]
    procs = [start(env, fixture("claude_code", "subagent_stop", agent_id=a)) for a in agents]
    assert [finish(p) for p in procs] == [(0, "", "")] * 3
    completed = [n["run_id"] for n in notifications(api) if n["attention_type"] == "completed"]
    assert sorted(completed) == [f"{RUN1}.agent-{a}" for a in agents]


def test_permission_request_approved_from_another_device(
    env: dict[str, str], api: httpx.Client
) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    proc = start(env, fixture("claude_code", "permission_request"), RUNBELL_HOOK_TIMEOUT="60")
    found = pending(api, RUN1)
    # The approval carries the tool and its input, for a signed-in person only.
    request = api.get(f"/v1/input-requests/{found['request']['id']}").json()["input_request"]
    assert request["kind"] == "approval"
    assert request["summary"] == "Claude Code wants to use Bash"
    assert request["details"]["tool_name"] == "Bash"
    assert request["details"]["tool_input"]["command"] == "rm -rf node_modules && npm ci"
    assert request["expires_at"] is not None
    feed = api.get("/v1/events", params={"after": "earliest"}).json()["events"]
    assert "rm -rf" not in json.dumps(feed)  # never in the feed
    # Claude Code's own permission_prompt notification, ~6 s later, leaves the request be.
    assert hook(env, fixture("claude_code", "notification_permission_prompt")) == ""
    assert pending(api, RUN1)["request"]["id"] == found["request"]["id"]
    assert kinds(api, RUN1) == ["input_required"]  # one alert for the one prompt

    thread = answer_in_thread(api, RUN1, "approve")
    code, out, err = finish(proc)
    thread.join(timeout=HOOK_WAIT)
    assert (code, err) == (0, "")
    assert out.count("\n") == 1 and json.loads(out) == ALLOW
    assert run(api, RUN1)["state"] == "working"


def test_a_permission_prompt_notification_after_the_answer_raises_nothing(
    env: dict[str, str], api: httpx.Client
) -> None:
    """Issue 20 row 2: Claude Code's `permission_prompt` Notification comes ~6 s after its
    dialog; when the person answered in Runbell first, it is news of a settled wait."""
    hook(env, fixture("claude_code", "user_prompt_submit"))
    proc = start(env, fixture("claude_code", "permission_request"), RUNBELL_HOOK_TIMEOUT="60")
    pending(api, RUN1)
    thread = answer_in_thread(api, RUN1, "approve")
    code, out, _ = finish(proc)
    thread.join(timeout=HOOK_WAIT)
    assert code == 0 and json.loads(out) == ALLOW
    assert run(api, RUN1)["state"] == "working"
    before = notifications(api)

    assert hook(env, fixture("claude_code", "notification_permission_prompt_answered")) == ""
    assert run(api, RUN1)["state"] == "working"
    assert notifications(api) == before
    assert kinds(api, RUN1) == ["input_required"]  # the one prompt's one alert
    assert log_of(env) == ""  # stale is an answer, not a failure


def test_codex_tuis_title_turn_reports_nothing(env: dict[str, str], api: httpx.Client) -> None:
    """Issue 20 row 4: no run and no "A run finished" for the TUI's title turn."""
    title = fixture("codex", "notify_title_turn")
    assert hook(env, title, "codex", json.dumps(title)) == ""
    assert api.get("/v1/runs/codex-019a4c2e-7b1d-7c30-9e55-3f0a8d2b6c11.12344").status_code == 404
    assert notifications(api) == []
    assert log_of(env) == ""


def test_permission_request_denied(env: dict[str, str], api: httpx.Client) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    proc = start(env, fixture("claude_code", "permission_request"), RUNBELL_HOOK_TIMEOUT="60")
    thread = answer_in_thread(api, RUN1, "reject")
    code, out, err = finish(proc)
    thread.join(timeout=HOOK_WAIT)
    assert (code, err) == (0, "")
    assert json.loads(out) == DENY


def test_permission_request_timeout_prints_nothing(env: dict[str, str], api: httpx.Client) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    out = hook(env, fixture("claude_code", "permission_request"), RUNBELL_HOOK_TIMEOUT="1")
    assert out == ""  # Claude Code shows its own dialog; nothing was allowed
    after = run(api, RUN1)
    assert after["pending_input_request"] is None
    assert after["state"] == "working"  # the person answers in the terminal now


def test_a_second_prompt_supersedes_the_first(env: dict[str, str], api: httpx.Client) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    first = start(env, fixture("claude_code", "permission_request"), RUNBELL_HOOK_TIMEOUT="60")
    first_id = pending(api, RUN1)["request"]["id"]
    second_payload = fixture(
        "claude_code", "permission_request", tool_input={"command": "git push --force"}
    )
    second = start(env, second_payload, RUNBELL_HOOK_TIMEOUT="60")
    pending(api, RUN1, other_than=first_id)
    # The first prompt's hook learns it was replaced and steps aside.
    assert finish(first) == (0, "", "")
    refused = api.post(
        f"/v1/input-requests/{first_id}/responses",
        headers={"Idempotency-Key": uuid.uuid4().hex},
        json={"decision": "approve", "expected_run_version": 1, "expected_request_version": 1},
    )
    assert refused.status_code == 409
    thread = answer_in_thread(api, RUN1, "approve")
    code, out, _ = finish(second)
    thread.join(timeout=HOOK_WAIT)
    assert code == 0 and json.loads(out) == ALLOW
    # The late permission_prompt Notifications of both prompts (one superseded, one
    # answered) raise nothing more (issue 20 row 2).
    before = kinds(api, RUN1)
    for _ in range(2):
        assert hook(env, fixture("claude_code", "notification_permission_prompt_answered")) == ""
    assert kinds(api, RUN1) == before
    assert run(api, RUN1)["state"] == "working"


def test_server_down_prints_nothing_and_exits_0(env: dict[str, str]) -> None:
    down = {"RUNBELL_URL": f"http://127.0.0.1:{free_port()}"}
    for name in ("permission_request", "stop", "session_start"):
        assert hook(env, fixture("claude_code", name), **down) == ""
    assert "ConnectionFailed" in log_of(env)


def test_bad_input_and_missing_configuration_print_nothing(env: dict[str, str]) -> None:
    proc = subprocess.run(
        [RUNBELL, "hook", "claude-code"], input="not json", text=True, capture_output=True, env=env
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    bare = {k: v for k, v in env.items() if not k.startswith("RUNBELL_") or k == "RUNBELL_HOOK_LOG"}
    assert hook(bare, fixture("claude_code", "stop")) == ""


# ----------------------------------------------------------------------------- Codex


def test_codex_notify_is_one_completed_turn(env: dict[str, str], api: httpx.Client) -> None:
    payload = fixture("codex", "notify_agent_turn_complete")
    proc = subprocess.run(
        [RUNBELL, "hook", "codex", json.dumps(payload)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    run_id = "codex-019a4c2e-7b1d-7c30-9e55-3f0a8d2b6c11.12345"
    turn = run(api, run_id)
    assert turn["state"] == "completed"
    assert turn["details"]["last_assistant_message"].startswith("Rename complete")
    assert kinds(api, run_id) == ["completed"]


def test_codex_permission_request_and_stop(env: dict[str, str], api: httpx.Client) -> None:
    assert hook(env, fixture("codex", "session_start"), "codex") == ""
    assert hook(env, fixture("codex", "user_prompt_submit"), "codex") == ""
    assert run(api, CODEX_TURN)["state"] == "working"
    proc = start(env, fixture("codex", "permission_request"), "codex", RUNBELL_HOOK_TIMEOUT="60")
    thread = answer_in_thread(api, CODEX_TURN, "approve")
    code, out, err = finish(proc)
    thread.join(timeout=HOOK_WAIT)
    assert (code, err) == (0, "")
    assert json.loads(out) == ALLOW  # behavior only: Codex fails closed on anything more
    assert hook(env, fixture("codex", "stop"), "codex") == ""
    assert run(api, CODEX_TURN)["state"] == "completed"
    assert kinds(api, CODEX_TURN) == ["completed", "input_required"]


# ----------------------------------------------------------------------------- install


def test_install_merges_with_existing_settings(tmp_path: Path, env: dict[str, str]) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {
        "permissions": {"allow": ["Bash(npm test)"]},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "afplay done.aiff"}]}]},
    }
    settings.write_text(json.dumps(mine))

    def install(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RUNBELL, "hook", "install", "claude-code", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        )

    printed = install("--print")
    assert printed.returncode == 0
    assert "PermissionRequest" in json.loads(printed.stdout)["hooks"]
    assert json.loads(settings.read_text()) == mine  # --print writes nothing

    assert install("--project").returncode == 0
    merged = json.loads(settings.read_text())
    assert merged["permissions"] == mine["permissions"]
    stop = merged["hooks"]["Stop"]
    assert stop[0] == mine["hooks"]["Stop"][0]
    assert stop[1]["hooks"][0]["command"].endswith("hook claude-code")
    assert install("--project").returncode == 0
    assert json.loads(settings.read_text()) == merged  # twice: no change

    assert install("--user").returncode == 0
    user = json.loads((Path(env["HOME"]) / ".claude" / "settings.json").read_text())
    assert set(user["hooks"]) == set(merged["hooks"])


def test_install_codex_prints_config_lines(env: dict[str, str]) -> None:
    proc = subprocess.run(
        [RUNBELL, "hook", "install", "codex"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0
    assert "notify = [" in proc.stdout and '"hook", "codex"]' in proc.stdout
    hooks_json = proc.stdout[proc.stdout.index("{") :]
    assert set(json.loads(hooks_json)["hooks"]) == {"UserPromptSubmit", "PermissionRequest", "Stop"}
