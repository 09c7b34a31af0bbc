"""Claude Code's permission prompt answered every other way (issue 20 item 7), with the
real interactive Claude Code in tmux, hooked up as the docs say, and only the model
scripted; :mod:`tests.realclients.test_agent_clis` has the approval.

- Rejected in Runbell: Claude Code's dialog goes away, the command never runs, the model
  reads "Denied in Runbell" in its tool result, and the turn's run ends completed (Stop).
- No answer within ``RUNBELL_HOOK_TIMEOUT``: the request ends (cancelled), the run is back to
  working, Claude Code's own dialog is still up; answered there, the command runs and the
  run ends completed.
- A subagent's Bash call: its prompt becomes an input request on the subagent's own run;
  approved in Runbell, the subagent runs the command and both runs end completed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.realclients.harness import HOOK_CAPABILITIES, Runbell, Session
from tests.realclients.model import COMMAND
from tests.realclients.test_agent_clis import CLAUDE_DIALOG, pending_request, start_claude

pytestmark = pytest.mark.realclients

DENIED = "Denied in Runbell"


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


def completed(session: Session, run_id: str) -> dict[str, Any]:
    runbell = session.runbell
    run: dict[str, Any] = session.wait(
        f"{run_id} to end completed",
        lambda: (r := runbell.run(run_id)) is not None and r["state"] == "completed" and r,
    )
    assert run["pending_input_request"] is None
    return run


def test_claude_code_prompt_rejected_in_runbell(session: Session, runbell: Runbell) -> None:
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        run_id = f"cc-{start_claude(session, key)}"
        request = session.wait(
            "the prompt as an input request", lambda: pending_request(runbell, run_id)
        )
        answer(runbell, request, "reject")
        session.wait(
            "the model to read the rejection",
            lambda: any(DENIED in text for text in session.model.tool_results()),
        )
        completed(session, run_id)
        assert not (session.project / "out.txt").exists()
        assert session.tmux is not None
        assert CLAUDE_DIALOG not in session.tmux.pane()
        assert "hook failed" not in session.hook_log_text()


def test_claude_code_prompt_unanswered_falls_back_to_its_dialog(
    session: Session, runbell: Runbell
) -> None:
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        run_id = f"cc-{start_claude(session, key, RUNBELL_HOOK_TIMEOUT='3')}"
        request = session.wait(
            "the prompt as an input request", lambda: pending_request(runbell, run_id)
        )
        with runbell.owner() as api:

            def ended() -> dict[str, Any] | None:
                doc = api.get(f"/v1/input-requests/{request['id']}").json()
                return doc if doc["input_request"]["state"] != "pending" else None

            doc = session.wait("the request to end unanswered", ended)
        session.notes.append(f"--- the request after the timeout\n{json.dumps(doc)}")
        # As claude-code.md says: the hook moves the run back to working, which cancels
        # the request (seen every time); the server's expiry sweep may get there first.
        assert doc["input_request"]["state"] in ("cancelled", "expired"), doc
        assert not doc["actionable"]
        run = session.wait(
            "the run back to working",
            lambda: (r := runbell.run(run_id)) is not None and r["state"] == "working" and r,
        )
        assert run["pending_input_request"] is None
        assert not (session.project / "out.txt").exists()

        # Claude Code's own dialog has been up all along: the person answers it there.
        assert session.tmux is not None
        pane = session.tmux.wait_for("Claude Code's own dialog", lambda pane: CLAUDE_DIALOG in pane)
        assert COMMAND in pane
        session.tmux.send("Enter")  # "1. Yes", the dialog's default
        out = session.project / "out.txt"
        session.wait("Claude Code to run the command", out.exists)
        completed(session, run_id)
        assert "hook failed" not in session.hook_log_text()


@pytest.mark.parametrize("model_options", [{"subagent": True}], ids=["subagent"])
def test_claude_code_subagent_prompt_approved_in_runbell(
    session: Session, runbell: Runbell
) -> None:
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        session_id = start_claude(session, key)
        run_id = f"cc-{session_id}"
        prefix = f"{run_id}.agent-"

        def subagent_request() -> tuple[dict[str, Any], dict[str, Any]] | None:
            for listed in runbell.runs():
                if listed["run_id"].startswith(prefix):
                    run = runbell.run(listed["run_id"])
                    if run is not None and run["pending_input_request"]:
                        return run, run["pending_input_request"]
            return None

        child, request = session.wait("the subagent's prompt as an input request", subagent_request)
        assert child["metadata"]["parent_run"] == run_id
        assert request["kind"] == "approval" and "Bash" in request["summary"]
        assert COMMAND in json.dumps(request["details"])
        assert not (session.project / "out.txt").exists()
        parent = runbell.run(run_id)
        assert parent is not None and parent["pending_input_request"] is None

        answer(runbell, request, "approve")
        out = session.project / "out.txt"
        session.wait("the subagent to run the command", out.exists)
        session.wait("out.txt written", lambda: out.read_text() == "hello\n")
        completed(session, child["run_id"])
        completed(session, run_id)
        assert "hook failed" not in session.hook_log_text()
