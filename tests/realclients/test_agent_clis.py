"""The real Claude Code and Codex CLIs, hooked up as the integration docs say, against a
real `runbell serve`; only the model is scripted (:mod:`tests.realclients.model`).

- Claude Code, interactive in tmux, with the docs' scoped key: its permission prompt
  becomes an input request, approving it in Runbell lets the command run, and the turn's
  run ends completed; Claude Code's own `permission_prompt` Notification, reported after
  the answer, raises no second "needs your input" (issue 20 row 2).
- The same with a key lacking ``input_requests.create``: no request, the hook log names
  the capability, and Claude Code's own dialog stays up, approving nothing.
- Codex ``exec`` with ``notify`` and the hooks: the turn lands in Runbell completed.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.test_worker_processes import RUNBELL
from tests.realclients import npm
from tests.realclients.harness import (
    HOOK_CAPABILITIES,
    Runbell,
    Session,
    claude_env,
    claude_home,
    new_session_id,
)
from tests.realclients.model import COMMAND
from tests.realclients.tmux import Tmux, require_tmux
from tests.timeouts import scaled

pytestmark = pytest.mark.realclients

PROMPT = "Write hello to out.txt"
CLAUDE_DIALOG = "Do you want to proceed?"
CLAUDE_PROMPT = "\u276f"  # the input line's marker, a heavy right-pointing angle


def install_claude_hooks(session: Session, key: str, **extra: str) -> None:
    """`runbell hook install claude-code` in the project, as the docs say (``extra``:
    environment, e.g. ``RUNBELL_HOOK_TIMEOUT``)."""
    res = subprocess.run(
        [RUNBELL, "hook", "install", "claude-code"],
        cwd=session.project,
        env=session.env(key, **extra),
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    settings = json.loads((session.project / ".claude" / "settings.json").read_text())
    assert "PermissionRequest" in settings["hooks"], settings


def hold_notifications(session: Session) -> Path:
    """Wrap the installed `Notification` handler: it holds each payload until the file
    ``released`` exists (the test creates it after answering in Runbell), then runs the
    real `runbell hook claude-code` on it, then appends the payload to
    ``notifications.jsonl``. That replays issue 20's order deterministically: Claude Code
    sends `permission_prompt` about 6 s after its dialog, and on a loaded machine the
    hook's report reached Runbell only after the person had answered there."""
    root = session.root
    path = session.project / ".claude" / "settings.json"
    settings = json.loads(path.read_text())
    for group in settings["hooks"]["Notification"]:
        for handler in group["hooks"]:
            handler["command"] = (
                f"payload=$(cat); touch '{root}/held'; n=0; "
                f"while [ ! -e '{root}/released' ] && [ $n -lt 250 ]; do sleep 0.1; "
                "n=$((n+1)); done; "
                f"printf '%s' \"$payload\" | {handler['command']}; "
                f"printf '%s\\n' \"$payload\" >> '{root}/notifications.jsonl'"
            )
    path.write_text(json.dumps(settings, indent=2))
    return root / "notifications.jsonl"


def handled_notifications(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def start_claude(session: Session, key: str, *, notifications: bool = False, **extra: str) -> str:
    """Claude Code in tmux, asked to write out.txt; its session id. ``notifications``:
    hold each Notification until the test releases it (:func:`hold_notifications`);
    ``extra``: environment for the install and for Claude Code and its hooks."""
    claude = npm.install(*npm.CLAUDE_CODE)
    require_tmux()
    install_claude_hooks(session, key, **extra)
    if notifications:
        hold_notifications(session)
    claude_home(session)
    session_id = new_session_id()
    session.tmux = Tmux()
    argv = [str(claude), "--session-id", session_id]
    session.tmux.start(argv, claude_env(session, key, **extra), session.project)
    session.tmux.wait_for("Claude Code's prompt", lambda pane: CLAUDE_PROMPT in pane)
    session.tmux.type(PROMPT)
    session.tmux.wait_for("the prompt typed", lambda pane: PROMPT in pane)
    session.tmux.send("Enter")
    return session_id


def pending_request(runbell: Runbell, run_id: str) -> dict[str, Any] | None:
    run = runbell.run(run_id)
    return None if run is None else run["pending_input_request"]


def test_claude_code_permission_prompt_approved_in_runbell(
    session: Session, runbell: Runbell
) -> None:
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        run_id = f"cc-{start_claude(session, key, notifications=True)}"
        request = session.wait(
            "the permission prompt as an input request",
            lambda: pending_request(runbell, run_id),
        )
        assert request["kind"] == "approval"
        assert "Bash" in request["summary"]
        assert COMMAND in json.dumps(request["details"])
        assert not (session.project / "out.txt").exists()  # nothing before the answer

        # Claude Code's own `permission_prompt` Notification, ~6 s after its dialog, is
        # held (see hold_notifications) until the person has answered in Runbell.
        session.wait("Claude Code's permission_prompt Notification", (session.root / "held").exists)
        runbell.approve(request)
        (session.root / "released").touch()

        out = session.project / "out.txt"
        session.wait("Claude Code to run the command", out.exists)
        session.wait("out.txt written", lambda: out.read_text() == "hello\n")
        run = session.wait(
            "the turn's run to end completed",
            lambda: (r := runbell.run(run_id)) is not None and r["state"] == "completed" and r,
        )
        assert run["pending_input_request"] is None
        assert "hook failed" not in session.hook_log_text()

        # Issue 20 row 2: once the hook has reported that late Notification, the owner
        # still has exactly one "needs your input" for the one prompt.
        log = session.root / "notifications.jsonl"
        session.wait(
            "Claude Code's permission_prompt Notification, handled by the hook",
            lambda: any(
                n.get("notification_type") == "permission_prompt"
                for n in handled_notifications(log)
            ),
        )
        with runbell.owner() as api:
            notes = api.get("/v1/notifications", params={"limit": 100}).json()["notifications"]
            steps = api.get(f"/v1/runs/{run_id}/history").json()["steps"]
        asked = [n for n in notes if n["run_id"] == run_id]
        assert sorted(n["attention_type"] for n in asked) == ["completed", "input_required"]
        waits = [st for st in steps if st.get("to_state") == "input_required"]
        assert len(waits) == 1, steps  # the request's own; the late report moved nothing
        assert runbell.run(run_id)["state"] == "completed"  # type: ignore[index]
        assert "hook failed" not in session.hook_log_text()


def test_claude_code_key_without_input_requests_create_leaves_the_dialog(
    session: Session, runbell: Runbell
) -> None:
    key = runbell.key("runs.report", "runs.read")
    with session.explained():
        run_id = f"cc-{start_claude(session, key)}"
        session.wait(
            "the hook log to name the missing capability",
            lambda: "RUNBELL_KEY lacks input_requests.create" in session.hook_log_text(),
        )
        assert session.tmux is not None
        pane = session.tmux.wait_for(
            "Claude Code's own permission dialog", lambda pane: CLAUDE_DIALOG in pane
        )
        assert COMMAND in pane
        # The hook stepped aside: the turn is reported, nothing was asked nor allowed
        # (Claude Code's own Notification may have marked it input_required since).
        run = runbell.run(run_id)
        assert run is not None and run["state"] in ("working", "input_required"), run
        assert run["pending_input_request"] is None
        assert not (session.project / "out.txt").exists()
        assert "Allowed by PermissionRequest hook" not in pane
        assert CLAUDE_DIALOG in session.tmux.pane()  # still waiting for the person


def codex_config(session: Session, key: str) -> None:
    """~/.codex/config.toml (the scripted provider, a trusted project, the notify line)
    and ~/.codex/hooks.json, both from `runbell hook install codex`."""
    res = subprocess.run(
        [RUNBELL, "hook", "install", "codex"],
        env=session.env(key),
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    notify = next(line for line in lines if line.startswith("notify = "))
    start = next(i for i, line in enumerate(lines) if line.startswith("{"))
    hooks = json.loads("\n".join(lines[start:]))
    assert set(hooks["hooks"]) >= {"Stop", "PermissionRequest"}, hooks
    codex_home = session.home / ".codex"
    codex_home.mkdir()
    (codex_home / "hooks.json").write_text(json.dumps(hooks))
    (codex_home / "config.toml").write_text(
        f"""{notify}
model = "scripted"
model_provider = "fake"

[model_providers.fake]
name = "fake"
base_url = "{session.model.url}/v1"
env_key = "FAKE_MODEL_KEY"
wire_api = "responses"

[projects."{session.project}"]
trust_level = "trusted"
"""
    )


def test_codex_turn_lands_completed(session: Session, runbell: Runbell) -> None:
    codex = npm.install(*npm.CODEX)
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        codex_config(session, key)
        res = subprocess.run(
            [str(codex), "exec", "--dangerously-bypass-hook-trust", "--skip-git-repo-check",
             "Say hello"],
            cwd=session.project,
            env=session.env(key, FAKE_MODEL_KEY="scripted"),
            capture_output=True,
            text=True,
            timeout=scaled(120),
            stdin=subprocess.DEVNULL,
            check=False,
        )  # fmt: skip
        session.output = res.stdout + res.stderr
        assert res.returncode == 0, f"codex exec exited {res.returncode}"
        assert "/v1/responses" in session.model.paths()

        thread = re.search(r"^session id: (\S+)$", session.output, re.MULTILINE)
        assert thread is not None, "codex exec names its session"
        prefix = f"codex-{thread[1]}."  # codex-<session_id>.<turn_id>

        def completed_turn() -> dict[str, Any] | None:
            turns = [r for r in runbell.runs() if r["run_id"].startswith(prefix)]
            return next((r for r in turns if r["state"] == "completed"), None)

        session.wait("the Codex turn's run to land completed", completed_turn)
        assert "hook failed" not in session.hook_log_text()
