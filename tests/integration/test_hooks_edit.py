"""Edit before approving, through the hooks (issue 19 item 3): the recorded Claude Code
PermissionRequest offers the command as an editable value; the person fixes it from the
phone and approves; the hook prints the documented ``updatedInput`` with the edited
command, so Claude Code runs the fixed one. Codex reserves ``updatedInput`` (it fails
closed), so there the edit is a deny whose message carries the edited command. A real
hook process against a live server, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from runbell.hooks.mapping import permission_output
from tests.integration.test_hooks import (  # noqa: F401 (fixtures used by name)
    CODEX_TURN,
    RUN1,
    api,
    env,
    finish,
    fixture,
    hook,
    pending,
    start,
)
from tests.timeouts import WAIT

SRC = str(Path(__file__).resolve().parents[2] / "src")
FIXED = "rm -rf node_modules/.cache && npm ci"


@pytest.fixture
def hook_env(env: dict[str, str]) -> dict[str, str]:  # noqa: F811 (the imported fixture)
    # The hook process imports this checkout's runbell, not whatever the venv points at.
    return {**env, "PYTHONPATH": SRC}


def approve_edited(api: httpx.Client, run_id: str, edit: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    """As the owner on another device: read the editable value, approve it edited."""
    found = pending(api, run_id)
    request_id = found["request"]["id"]
    request = api.get(f"/v1/input-requests/{request_id}").json()["input_request"]
    value = {**request["editable"]["value"], **edit}
    response = api.post(
        f"/v1/input-requests/{request_id}/responses",
        headers={"Idempotency-Key": uuid.uuid4().hex},
        json={
            "decision": "approve",
            "value": value,
            "expected_run_version": found["run"]["version"],
            "expected_request_version": found["request"]["version"],
        },
    )
    assert response.status_code == 200, response.text
    return dict(request)


def test_claude_code_runs_the_command_edited_from_the_phone(
    hook_env: dict[str, str],
    api: httpx.Client,  # noqa: F811
) -> None:
    hook(hook_env, fixture("claude_code", "user_prompt_submit"))
    payload = fixture("claude_code", "permission_request")
    proc = start(hook_env, payload, RUNBELL_HOOK_TIMEOUT="60")
    seen: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: seen.update(approve_edited(api, RUN1, {"command": FIXED})), daemon=True
    )
    thread.start()
    code, out, err = finish(proc)
    thread.join(timeout=WAIT)
    assert (code, err) == (0, "")
    # The request offered the command, with a schema that keeps it a string.
    assert seen["editable"]["value"] == {"command": "rm -rf node_modules && npm ci"}
    assert seen["editable"]["schema"]["properties"]["command"]["type"] == "string"
    # The documented PermissionRequest output, with the edited command in updatedInput
    # (the rest of the tool's input kept).
    printed = json.loads(out)
    assert printed == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {
                "behavior": "allow",
                "updatedInput": {**payload["tool_input"], "command": FIXED},
            },
        }
    }
    assert printed == permission_output(
        True, updated_input={**payload["tool_input"], "command": FIXED}
    )


def test_claude_code_write_is_editable(hook_env: dict[str, str], api: httpx.Client) -> None:  # noqa: F811
    hook(hook_env, fixture("claude_code", "user_prompt_submit"))
    payload = fixture(
        "claude_code",
        "permission_request",
        tool_name="Write",
        tool_input={"file_path": "/home/dev/shop/notes.md", "content": "draft\n"},
    )
    proc = start(hook_env, payload, RUNBELL_HOOK_TIMEOUT="60")
    thread = threading.Thread(
        target=approve_edited, args=(api, RUN1, {"content": "final\n"}), daemon=True
    )
    thread.start()
    code, out, err = finish(proc)
    thread.join(timeout=WAIT)
    assert (code, err) == (0, "")
    decision = json.loads(out)["hookSpecificOutput"]["decision"]
    assert decision == {
        "behavior": "allow",
        "updatedInput": {"file_path": "/home/dev/shop/notes.md", "content": "final\n"},
    }


def test_codex_fails_closed_on_an_edit(hook_env: dict[str, str], api: httpx.Client) -> None:  # noqa: F811
    assert hook(hook_env, fixture("codex", "user_prompt_submit"), "codex") == ""
    proc = start(
        hook_env, fixture("codex", "permission_request"), "codex", RUNBELL_HOOK_TIMEOUT="60"
    )
    edited = "git push origin feature/rename --dry-run"
    thread = threading.Thread(
        target=approve_edited, args=(api, CODEX_TURN, {"command": edited}), daemon=True
    )
    thread.start()
    code, out, err = finish(proc)
    thread.join(timeout=WAIT)
    assert (code, err) == (0, "")
    decision = json.loads(out)["hookSpecificOutput"]["decision"]
    # Never updatedInput (Codex fails closed on it): a deny carrying the edited command.
    assert set(decision) == {"behavior", "message"}
    assert decision["behavior"] == "deny"
    assert edited in decision["message"]
