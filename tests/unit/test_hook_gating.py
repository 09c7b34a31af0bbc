"""The headless gate (issue 20 item 1): which PreToolUse calls are put to the person, the
plan they make (the permission prompt's), the decision printed for each answer, and the
settings `runbell hook install claude-code --gate … [--http]` writes. Pure: the hook
process against a server is in tests/integration/test_hook_http_gate.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runbell.hooks import gate, handlers, install
from runbell.hooks.mapping import Turn, plan_claude_code

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude_code"
RUN1 = "cc-2f6c1c2e-8a4b-4d1e-9c3f-5b7a9e0d1c42"


def pre(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / "pre_tool_use.json").read_text())
    payload.update(changes)
    return payload


@pytest.mark.parametrize(
    ("pattern", "tool", "tool_input", "hit"),
    [
        ("Bash", "Bash", {"command": "ls"}, True),
        ("Bash", "Write", {"file_path": "/srv/x"}, False),
        ("Bash(git push*)", "Bash", {"command": "git push origin main"}, True),
        ("Bash(git push*)", "Bash", {"command": "git status"}, False),
        ("Bash(npm run test:*)", "Bash", {"command": "npm run test -- -x"}, True),
        ("Write(/etc/**)", "Write", {"file_path": "/etc/nginx/nginx.conf"}, True),
        ("Write(/etc/**)", "Write", {"file_path": "/home/dev/etc/x"}, False),
        ("Edit(*.py)", "Edit", {"file_path": "src/app.py"}, True),
        ("Write(/etc/**)", "Write", {}, False),
        ("WebFetch(https://example.com/*)", "WebFetch", {"url": "https://example.com/a"}, True),
        ("mcp__github__create_issue", "mcp__github__create_issue", {}, True),
        ("Bash(*)", "Bash", {}, True),
    ],
)
def test_patterns(pattern: str, tool: str, tool_input: dict[str, Any], hit: bool) -> None:
    assert gate.parse_gate(pattern).matches(tool, tool_input) is hit


@pytest.mark.parametrize("bad", ["", "Write()", "Bash(x", "two words", "a" * 600])
def test_a_malformed_pattern_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        gate.parse_gate(bad)


@pytest.mark.parametrize(
    ("entrypoint", "asked"),
    [("sdk-cli", True), ("sdk-py", True), (None, True), ("", True), ("cli", False),
     ("claude-vscode", False)],
)  # fmt: skip
def test_only_sessions_without_a_dialog_are_gated(entrypoint: str | None, asked: bool) -> None:
    """Interactive sessions keep PermissionRequest: one question per tool call."""
    plan = gate.plan_gate(pre(), Turn(1, False), gate.parse_gates(["Bash"]), entrypoint)
    assert (plan.approval is not None) is asked
    if not asked:
        assert plan.actions == () and plan.turn is None


def test_a_gated_call_is_the_permission_prompt_it_stands_for() -> None:
    plan = gate.plan_gate(pre(), Turn(1, False), gate.parse_gates(["Bash"]), "sdk-cli")
    prompt = plan_claude_code(pre(hook_event_name="PermissionRequest"), Turn(1, False))
    assert plan.approval is not None and prompt.approval is not None
    assert plan.approval.event == "PreToolUse"
    assert plan.approval.run_id == RUN1
    assert plan.approval.action == {
        "kind": "shell", "command": "rm -rf node_modules && npm ci", "cwd": "/home/dev/shop"
    }  # fmt: skip
    assert plan.approval.summary == prompt.approval.summary
    assert plan.actions == prompt.actions
    other = gate.plan_gate(
        pre(tool_use_id="toolu_02"), Turn(1, False), gate.parse_gates(["Bash"]), ""
    )
    assert other.approval is not None and other.approval.request_id != plan.approval.request_id


def test_an_ungated_call_and_other_events_pass_through() -> None:
    gates = gate.parse_gates(["Write(/etc/**)"])
    assert gate.plan_gate(pre(), Turn(1, False), gates, "sdk-cli").approval is None
    stop = json.loads((FIXTURES / "stop.json").read_text())
    assert gate.plan_gate(stop, Turn(1, False), gates, "sdk-cli") == plan_claude_code(
        stop, Turn(1, False)
    )


def decision(out: dict[str, Any] | None) -> tuple[str, str] | None:
    if out is None:
        return None
    specific = out["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse"
    return specific["permissionDecision"], specific["permissionDecisionReason"]


def test_each_answer_is_a_documented_decision() -> None:
    plan = gate.plan_gate(pre(), Turn(1, False), gate.parse_gates(["Bash"]), "sdk-cli")
    approval = plan.approval
    assert approval is not None
    assert decision(gate.answer_output(approval, "answered", "approve", None, False)) == (
        "allow", "Approved in Runbell"
    )  # fmt: skip
    assert decision(gate.answer_output(approval, "answered", "reject", None, False)) == (
        "deny", "Denied in Runbell"
    )  # fmt: skip
    for outcome in ("timeout", "expired", "superseded", "cancelled"):
        found = decision(gate.answer_output(approval, outcome, None, None, False))
        assert found is not None and found[0] == "ask"
    edited = gate.answer_output(approval, "answered", "approve", {"command": "npm ci"}, True)
    assert edited is not None
    assert edited["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert edited["hookSpecificOutput"]["updatedInput"] == {
        "command": "npm ci", "description": "Reinstall dependencies"
    }  # fmt: skip


def test_permission_request_answers_are_unchanged() -> None:
    prompt = plan_claude_code(pre(hook_event_name="PermissionRequest"), Turn(1, False))
    assert prompt.approval is not None
    assert gate.answer_output(prompt.approval, "timeout", None, None, False) is None
    out = gate.answer_output(prompt.approval, "answered", "reject", None, False)
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "Denied in Runbell"},
        }
    }


def test_install_with_gates_writes_pretooluse_matchers() -> None:
    snippet = handlers.claude_settings("runbell", 120, ["Bash", "Write(/etc/**)", "Write(*.pem)"])
    groups = snippet["hooks"]["PreToolUse"]
    assert [g["matcher"] for g in groups] == ["Bash", "Write"]
    assert groups[0]["hooks"][0]["command"] == "runbell hook claude-code --gate Bash"
    assert groups[1]["hooks"][0]["command"] == (
        "runbell hook claude-code --gate 'Write(/etc/**)' --gate 'Write(*.pem)'"
    )
    assert groups[1]["hooks"][0]["timeout"] == 150
    assert "PermissionRequest" in snippet["hooks"]  # interactive sessions keep it
    with pytest.raises(ValueError):
        handlers.claude_settings("runbell", 120, ["Write("])


def test_reinstalling_other_gates_replaces_ours_only() -> None:
    theirs = {"matcher": "Bash", "hooks": [{"type": "command", "command": "./lint.sh"}]}
    first = install.merge(
        {"hooks": {"PreToolUse": [theirs]}},
        handlers.claude_settings("runbell", 120, ["Bash"]),
        " hook claude-code",
    )
    assert len(first["hooks"]["PreToolUse"]) == 2
    again = handlers.claude_settings("runbell", 120, ["Bash"])
    assert install.merge(first, again, " hook claude-code") == first
    other = install.merge(
        first, handlers.claude_settings("runbell", 120, ["Write"]), " hook claude-code"
    )
    assert other["hooks"]["PreToolUse"][0] == theirs
    assert [g["matcher"] for g in other["hooks"]["PreToolUse"]] == ["Bash", "Write"]
    assert len(other["hooks"]["PreToolUse"]) == 2


def test_install_http_writes_http_hooks() -> None:
    snippet = handlers.claude_settings("runbell", 120, ["Bash(git push*)"], "https://rb.example/")
    request = snippet["hooks"]["PermissionRequest"][0]["hooks"][0]
    assert request == {
        "type": "http",
        "url": "https://rb.example/v1/hooks/claude-code?timeout=120",
        "headers": {
            "Authorization": "Bearer $RUNBELL_KEY",
            "X-Runbell-Entrypoint": "$CLAUDE_CODE_ENTRYPOINT",
        },
        "allowedEnvVars": ["RUNBELL_KEY", "CLAUDE_CODE_ENTRYPOINT"],
        "timeout": 150,
    }
    assert snippet["hooks"]["Stop"][0]["hooks"][0]["timeout"] == install.REPORT_TIMEOUT
    pretool = snippet["hooks"]["PreToolUse"][0]
    assert pretool["matcher"] == "Bash"
    assert pretool["hooks"][0]["url"].endswith("?timeout=120&gate=Bash%28git+push%2A%29")
    # Switching a command install to HTTP replaces Runbell's groups, keeps the rest.
    commands = install.merge({}, handlers.claude_settings("runbell", 120), " hook claude-code")
    switched = install.merge(commands, snippet, " hook claude-code")
    assert all(
        g["hooks"][0]["type"] == "http" for groups in switched["hooks"].values() for g in groups
    )
