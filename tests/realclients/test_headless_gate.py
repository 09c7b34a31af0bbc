"""Headless `claude -p` gated through Runbell (issue 20 items 1 and 2), with the real
Claude Code and only the model scripted: `runbell hook install claude-code --gate Bash`
(command hooks, or `--http` hooks posting to `runbell serve`) makes the Bash call the
scripted model asks for an input request; approved, the command runs; rejected, nothing
runs and the model reads the reason in its tool result.
"""

from __future__ import annotations

import json
import subprocess
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
from tests.timeouts import scaled

pytestmark = pytest.mark.realclients

PROMPT = "Write hello to out.txt"


def install(session: Session, key: str, *extra: str) -> dict[str, Any]:
    """`runbell hook install claude-code --gate Bash …` in the project, as the docs say."""
    res = subprocess.run(
        [RUNBELL, "hook", "install", "claude-code", "--gate", "Bash", *extra],
        cwd=session.project,
        env=session.env(key),
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    settings: dict[str, Any] = json.loads(
        (session.project / ".claude" / "settings.json").read_text()
    )
    assert settings["hooks"]["PreToolUse"][0]["matcher"] == "Bash", settings
    return settings


def claude_p(session: Session, key: str) -> tuple[subprocess.Popen[str], str]:
    """`claude -p` asked to write out.txt, started; its run id."""
    claude = npm.install(*npm.CLAUDE_CODE)
    claude_home(session)
    session_id = new_session_id()
    proc = subprocess.Popen(
        [str(claude), "-p", PROMPT, "--session-id", session_id],
        cwd=session.project,
        env=claude_env(session, key),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, f"cc-{session_id}"


def finished(session: Session, proc: subprocess.Popen[str]) -> int:
    out, _ = proc.communicate(timeout=scaled(120))
    session.output = out
    return proc.returncode


def answer(runbell: Runbell, request: dict[str, Any], decision: str) -> None:
    body = {
        "decision": decision,
        "expected_run_version": request["run_version"],
        "expected_request_version": request["version"],
    }
    with runbell.owner() as api:
        r = api.post(
            f"/v1/input-requests/{request['id']}/responses",
            json=body,
            headers={"Idempotency-Key": f"{decision}-{request['id']}"},
        )
    assert r.status_code == 200, r.text


def tool_results(session: Session) -> str:
    """Every tool_result the scripted model was sent, as text."""
    found = []
    for path, body in list(session.model.requests):
        for message in body.get("messages") or [] if path == "/v1/messages" else []:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append(json.dumps(block.get("content")))
    return "\n".join(found)


def gated_request(session: Session, runbell: Runbell, run_id: str) -> dict[str, Any]:
    def pending() -> dict[str, Any] | None:
        run = runbell.run(run_id)
        return None if run is None else run["pending_input_request"]

    request: dict[str, Any] = session.wait("the gated Bash call as an input request", pending)
    assert request["kind"] == "approval" and "Bash" in request["summary"]
    assert COMMAND in json.dumps(request["details"])
    assert not (session.project / "out.txt").exists()  # nothing before the answer
    return request


@pytest.mark.parametrize("http", [False, True], ids=["command", "http"])
def test_claude_p_gated_call_approved_in_runbell_runs(
    session: Session, runbell: Runbell, http: bool
) -> None:
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        settings = install(session, key, *(["--http"] if http else []))
        if http:
            handler = settings["hooks"]["PreToolUse"][0]["hooks"][0]
            assert handler["type"] == "http" and handler["url"].startswith(runbell.url)
        proc, run_id = claude_p(session, key)
        request = gated_request(session, runbell, run_id)
        answer(runbell, request, "approve")
        assert finished(session, proc) == 0
        assert (session.project / "out.txt").read_text() == "hello\n"
        run = session.wait(
            "the turn's run to end completed",
            lambda: (r := runbell.run(run_id)) is not None and r["state"] == "completed" and r,
        )
        assert run["pending_input_request"] is None
        assert "hook failed" not in session.hook_log_text()


def test_claude_p_gated_call_rejected_in_runbell_does_not_run(
    session: Session, runbell: Runbell
) -> None:
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        install(session, key)
        proc, run_id = claude_p(session, key)
        answer(runbell, gated_request(session, runbell, run_id), "reject")
        finished(session, proc)
        assert not (session.project / "out.txt").exists()
        assert "Denied in Runbell" in tool_results(session)
        assert "hook failed" not in session.hook_log_text()
