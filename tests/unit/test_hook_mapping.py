"""The pure hook mapping: recorded Claude Code and Codex payloads → runs, signals,
progress and approvals (no I/O; the hook processes are tested in
tests/integration/test_hooks.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runbell.hooks import claude_code, install, report
from runbell.hooks.mapping import (
    MAX_DETAIL_CHARS,
    MAX_ID,
    EnsureRun,
    HookPlan,
    HookSignal,
    PayloadError,
    Progress,
    Turn,
    clip,
    permission_output,
    plan_claude_code,
    plan_codex_hook,
    plan_codex_notify,
    safe_id,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SESSION = "2f6c1c2e-8a4b-4d1e-9c3f-5b7a9e0d1c42"
RUN1 = f"cc-{SESSION}"


def cc(name: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / "claude_code" / f"{name}.json").read_text())
    payload.update(changes)
    return payload


def codex(name: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / "codex" / f"{name}.json").read_text())
    payload.update(changes)
    return payload


def signals(plan: HookPlan) -> list[tuple[str, str]]:
    return [(a.run_id, a.state) for a in plan.actions if isinstance(a, HookSignal)]


def ensures(plan: HookPlan) -> list[tuple[str, str]]:
    return [(a.run_id, a.state) for a in plan.actions if isinstance(a, EnsureRun)]


def test_a_session_is_a_chain_of_turn_runs() -> None:
    start = plan_claude_code(cc("session_start"), Turn())
    assert ensures(start) == [(RUN1, "queued")]
    assert start.turn == Turn(1, False)

    prompt = plan_claude_code(cc("user_prompt_submit"), Turn(1, False))
    assert ensures(prompt) == [(RUN1, "working")] and prompt.turn is None

    stop = plan_claude_code(cc("stop"), Turn(1, False))
    assert signals(stop) == [(RUN1, "completed")]
    assert stop.turn == Turn(1, True)
    # What Claude said is sensitive: details, never the public reason.
    ensure = stop.actions[0]
    assert isinstance(ensure, EnsureRun)
    assert ensure.details == {"last_assistant_message": "All 42 tests pass now."}

    # The next prompt is the next run: a finished run accepts nothing.
    again = plan_claude_code(cc("user_prompt_submit", prompt="and now the docs"), Turn(1, True))
    assert ensures(again) == [(f"{RUN1}.2", "working")]
    assert again.turn == Turn(2, False)


def test_session_start_of_a_known_session_reports_nothing() -> None:
    assert plan_claude_code(cc("session_start", source="compact"), Turn(3, False)) == HookPlan()


def test_stop_with_background_tasks_running_is_not_the_end() -> None:
    plan = plan_claude_code(cc("stop_background"), Turn(1, False))
    assert signals(plan) == []
    progress = [a for a in plan.actions if isinstance(a, Progress)]
    assert [p.message for p in progress] == ["turn ended; 1 background task(s) still running"]
    assert plan.turn is None  # still the same, unfinished turn


def test_the_same_stop_twice_reports_once() -> None:
    assert plan_claude_code(cc("stop"), Turn(1, True)) == HookPlan()


@pytest.mark.parametrize(
    ("error", "code", "user_action", "retryable"),
    [
        ("rate_limit", "rate_limit", False, False),
        ("billing_error", "billing_error", True, False),
        ("something_new", "unknown", False, False),
    ],
)
def test_stop_failure_fails_the_turn_with_the_error_class(
    error: str, code: str, user_action: bool, retryable: bool
) -> None:
    plan = plan_claude_code(cc("stop_failure", error=error), Turn(1, False))
    failed = [a for a in plan.actions if isinstance(a, HookSignal)]
    assert [(f.run_id, f.state) for f in failed] == [(RUN1, "failed")]
    assert failed[0].error == {
        "code": code,
        "retryable": retryable,
        "user_action_required": user_action,
        "message": "429 rate_limit_error",
    }
    assert failed[0].reason == f"Claude Code stopped: {code}"
    assert plan.turn == Turn(1, True)


def test_subagents_are_child_runs_of_their_own() -> None:
    start = plan_claude_code(cc("subagent_start"), Turn(1, False))
    child = f"{RUN1}.agent-a1b2c3"
    assert ensures(start) == [(child, "working")]
    assert isinstance(start.actions[0], EnsureRun)
    assert start.actions[0].metadata["parent_run"] == RUN1

    stops = [
        plan_claude_code(cc("subagent_stop", agent_id=f"agent{i}"), Turn(1, False))
        for i in range(3)
    ]
    done = [s for plan in stops for s in plan.actions if isinstance(s, HookSignal)]
    assert [(s.run_id, s.state) for s in done] == [
        (f"{RUN1}.agent-agent{i}", "completed") for i in range(3)
    ]
    assert len({s.event_id for s in done}) == 3


def test_a_subagent_outliving_its_turn_keeps_its_run() -> None:
    # The child id does not depend on the turn number.
    a = plan_claude_code(cc("subagent_stop"), Turn(1, False))
    b = plan_claude_code(cc("subagent_stop"), Turn(4, True))
    assert signals(a) == signals(b)


def test_permission_request_is_an_approval_bound_to_that_prompt() -> None:
    plan = plan_claude_code(cc("permission_request"), Turn(1, False))
    assert ensures(plan) == [(RUN1, "working")]
    approval = plan.approval
    assert approval is not None and approval.run_id == RUN1
    assert approval.summary == "Claude Code wants to use Bash"
    assert approval.details["tool_name"] == "Bash"
    assert approval.details["tool_input"]["command"] == "rm -rf node_modules && npm ci"
    # The same prompt (a second identical handler) is the same request; another prompt
    # is another request, which supersedes it on the server.
    same = plan_claude_code(cc("permission_request"), Turn(1, False)).approval
    other = plan_claude_code(
        cc("permission_request", tool_input={"command": "git push"}), Turn(1, False)
    ).approval
    assert same is not None and other is not None
    assert same.request_id == approval.request_id != other.request_id


def test_a_permission_prompt_after_the_turn_ended_starts_the_next_run() -> None:
    plan = plan_claude_code(cc("permission_request"), Turn(1, True))
    assert plan.approval is not None and plan.approval.run_id == f"{RUN1}.2"
    assert plan.turn == Turn(2, False)


def test_a_subagents_permission_prompt_belongs_to_the_subagent() -> None:
    plan = plan_claude_code(cc("permission_request", agent_id="a9"), Turn(1, False))
    assert plan.approval is not None and plan.approval.run_id == f"{RUN1}.agent-a9"


@pytest.mark.parametrize(
    "name",
    [
        "notification_permission_prompt",
        "notification_idle_prompt",
        "notification_elicitation_dialog",
    ],
)
def test_waiting_notifications_are_input_required(name: str) -> None:
    plan = plan_claude_code(cc(name), Turn(1, False))
    assert signals(plan) == [(RUN1, "input_required")]


def test_other_notifications_and_waits_after_the_end_report_nothing() -> None:
    assert plan_claude_code(cc("notification_auth_success"), Turn(1, False)).actions == ()
    # idle_prompt comes a minute after the turn ended: its completion already told you.
    assert plan_claude_code(cc("notification_idle_prompt"), Turn(1, True)).actions == ()


def test_an_unmapped_event_reports_nothing_and_bad_input_is_refused() -> None:
    assert plan_claude_code(cc("stop", hook_event_name="PreCompact"), Turn(1, False)).actions == ()
    with pytest.raises(PayloadError):
        plan_claude_code({"hook_event_name": "Stop"}, Turn())
    with pytest.raises(PayloadError):
        plan_claude_code(cc("subagent_stop", agent_id=None), Turn(1, False))


def test_event_ids_are_stable_per_run_and_payload() -> None:
    first = signals(plan_claude_code(cc("stop"), Turn(1, False)))
    again = plan_claude_code(cc("stop"), Turn(1, False)).actions[1]
    other_turn = plan_claude_code(cc("stop"), Turn(2, False)).actions[1]
    assert first == [(RUN1, "completed")]
    assert isinstance(again, HookSignal) and isinstance(other_turn, HookSignal)
    original = plan_claude_code(cc("stop"), Turn(1, False)).actions[1]
    assert isinstance(original, HookSignal)
    assert again.event_id == original.event_id != other_turn.event_id


def test_safe_ids_and_clipped_details() -> None:
    assert safe_id("cc-a b/c") == "cc-a-b-c"
    long = safe_id("x" * 500)
    assert len(long) == MAX_ID and long != safe_id("x" * 499)
    clipped = clip({"content": "y" * (MAX_DETAIL_CHARS + 10), "n": 1})
    assert clipped["content"].endswith("(10 more characters)") and clipped["n"] == 1


def test_turn_state_survives_garbage() -> None:
    assert Turn.from_json({"number": 2, "finished": True}) == Turn(2, True)
    assert Turn.from_json({"number": "2"}) == Turn()
    assert Turn.from_json([]) == Turn()


def test_permission_output_is_the_documented_json() -> None:
    assert permission_output(True) == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"},
        }
    }
    assert permission_output(False, "no") == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "no"},
        }
    }


def test_codex_notify_is_one_completed_turn() -> None:
    plan = plan_codex_notify(codex("notify_agent_turn_complete"))
    run = "codex-019a4c2e-7b1d-7c30-9e55-3f0a8d2b6c11.12345"
    assert ensures(plan) == [(run, "working")]
    assert signals(plan) == [(run, "completed")]
    assert plan_codex_notify({"type": "approval-requested"}) == HookPlan()


def test_codex_tuis_title_turn_reports_nothing() -> None:
    # Issue 20 row 4: the TUI's own title-generation turn was an extra "A run finished".
    assert plan_codex_notify(codex("notify_title_turn")) == HookPlan()
    # The same words typed by a person in `codex exec` (no TUI) are a turn like any other.
    typed = codex("notify_title_turn", client="codex_exec")
    assert signals(plan_codex_notify(typed)) == [
        ("codex-019a4c2e-7b1d-7c30-9e55-3f0a8d2b6c11.12344", "completed")
    ]
    # The person's turns of a TUI session still report.
    assert signals(plan_codex_notify(codex("notify_agent_turn_complete"))) != []


def test_codex_hooks() -> None:
    assert plan_codex_hook(codex("session_start")) == HookPlan()
    run = "codex-019a4c2e-7b1d-7c30-9e55-3f0a8d2b6c11.12346"
    assert ensures(plan_codex_hook(codex("user_prompt_submit"))) == [(run, "working")]
    ask = plan_codex_hook(codex("permission_request"))
    assert ask.approval is not None and ask.approval.run_id == run
    assert ask.approval.summary == "Codex wants to use Bash"
    assert signals(plan_codex_hook(codex("stop"))) == [(run, "completed")]
    # The legacy notify of the same turn lands on the same run.
    same_turn = codex("notify_agent_turn_complete", **{"turn-id": "12346"})
    assert signals(plan_codex_notify(same_turn)) == [(run, "completed")]


def test_install_merges_without_clobbering() -> None:
    existing = {
        "model": "opus",
        "hooks": {
            "Stop": [{"matcher": "", "hooks": [{"type": "command", "command": "say done"}]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}]}],
        },
    }
    snippet = install.claude_snippet("runbell", 120)
    merged = install.merge(existing, snippet, " hook claude-code")
    assert merged["model"] == "opus"
    assert merged["hooks"]["PreToolUse"] == existing["hooks"]["PreToolUse"]
    assert merged["hooks"]["Stop"][0] == existing["hooks"]["Stop"][0]
    assert merged["hooks"]["Stop"][1]["hooks"][0]["command"] == "runbell hook claude-code"
    assert set(install.CLAUDE_EVENTS) <= set(merged["hooks"])
    assert merged["hooks"]["PermissionRequest"][0]["hooks"][0]["timeout"] == 150
    assert install.merge(merged, snippet, " hook claude-code") == merged  # twice: no change


def test_hook_timeout_is_bounded() -> None:
    assert report.hook_timeout({}) == report.DEFAULT_TIMEOUT
    assert report.hook_timeout({"RUNBELL_HOOK_TIMEOUT": "30"}) == 30
    assert report.hook_timeout({"RUNBELL_HOOK_TIMEOUT": "0"}) == 1
    assert report.hook_timeout({"RUNBELL_HOOK_TIMEOUT": "soon"}) == report.DEFAULT_TIMEOUT


def test_old_session_state_is_pruned(tmp_path: Path) -> None:
    import os

    old, recent = tmp_path / "claude-code-old.json", tmp_path / "claude-code-new.json"
    for path in (old, recent):
        path.write_text("{}")
    os.utime(old, (1_000, 1_000))
    now = 1_000 + claude_code.KEEP_STATE_S + 1
    os.utime(recent, (now, now))
    assert claude_code.prune(tmp_path, now) == 1
    assert not old.exists() and recent.exists()


def test_the_hook_log_is_private(tmp_path: Path) -> None:
    from runbell.hooks import report

    path = tmp_path / "hook.log"
    report.log({"RUNBELL_HOOK_LOG": str(path)}, "hook failed: ConnectError")
    report.log({"RUNBELL_HOOK_LOG": str(path)}, "again")
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text().count("\n") == 2
