"""Hook payload → what to report: the pure part of the Claude Code and Codex hooks.

No I/O here: a payload (the JSON a runtime hands its hook) and, for Claude Code, the
session's local turn state go in; a :class:`HookPlan` comes out — the runs to make sure of,
the signals and progress to send, the approval to ask for, and the new turn state. The
shells (:mod:`runbell.hooks.claude_code`, :mod:`runbell.hooks.codex`) carry a plan out
through the SDK.

Runs, by runtime:

- **Claude Code** numbers nothing, and a finished run accepts nothing (terminal states
  absorb), so a session is a chain of runs, one per turn: ``cc-<session_id>`` first, then
  ``cc-<session_id>.2``, … The hook keeps the session's turn number in a small local state
  file (:class:`Turn`). ``SessionStart`` makes the first run (``queued``: no stall clock
  while nobody has asked anything yet), ``UserPromptSubmit`` starts a turn (``working``),
  ``Stop`` ends it (``completed``, unless background tasks still run), ``StopFailure``
  fails it with the error class. A subagent is a child run of its own,
  ``cc-<session_id>.agent-<agent_id>`` (its parent in ``metadata.parent_run``), so
  several finishing together are several completions.
- **Codex** sends a ``turn_id`` with every turn event (hooks) and a ``turn-id`` with the
  legacy ``notify``, so a turn is the run ``codex-<session_id>.<turn_id>`` and no local
  state is needed; ``SessionStart`` has no turn and reports nothing.

Event ids are derived from the run and the payload, so the same hook run twice (the
same handler in user and project settings) is a duplicate, not a second report.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any, Literal

# The output (permission_output) and what a person may edit live in hooks.editing;
# permission_output is re-exported here, where callers have always found it.
from runbell.hooks.editing import editable_input
from runbell.hooks.editing import permission_output as permission_output

# The action builder and the detail bounds live in their own module; re-exported here.
from runbell.hooks.tool_actions import MAX_DETAIL_CHARS as MAX_DETAIL_CHARS
from runbell.hooks.tool_actions import approval_action as approval_action
from runbell.hooks.tool_actions import clip as clip

_UNSAFE = re.compile(r"[^A-Za-z0-9._:@~-]+")
MAX_ID = 200

# The Notification types that mean "the agent waits for you", with the public reason.
WAITING = {
    "permission_prompt": "Claude Code asks for permission",
    "idle_prompt": "Claude Code is waiting for your input",
    "elicitation_dialog": "Claude Code asks you a question",
}
# StopFailure `error` values the hooks reference documents; anything else is `unknown`.
ERROR_CLASSES = frozenset(
    {
        "rate_limit",
        "overloaded",
        "authentication_failed",
        "oauth_org_not_allowed",
        "billing_error",
        "invalid_request",
        "model_not_found",
        "server_error",
        "max_output_tokens",
        "unknown",
    }
)
# Errors a person must fix (a login, a bill, a wrong model) rather than wait out.
USER_ACTION = frozenset(
    {"authentication_failed", "oauth_org_not_allowed", "billing_error", "model_not_found"}
)


class PayloadError(ValueError):
    """The payload is not a hook payload this hook understands (the hook stays silent)."""


@dataclass(frozen=True)
class Turn:
    """A Claude Code session's local state: the current turn's number (0: none yet) and
    whether the hook already finished that turn's run."""

    number: int = 0
    finished: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "finished": self.finished}

    @classmethod
    def from_json(cls, data: Any) -> Turn:
        if not isinstance(data, dict):
            return cls()
        number = data.get("number")
        finished = data.get("finished")
        if not isinstance(number, int) or number < 0 or not isinstance(finished, bool):
            return cls()
        return cls(number, finished)


@dataclass(frozen=True)
class EnsureRun:
    """Create the run if it is missing (in ``state``), and make sure it is at least
    ``working`` when ``state`` is ``working`` (a ``queued`` run is moved on)."""

    run_id: str
    title: str
    state: Literal["queued", "working"]
    kind: str = "coding"
    metadata: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] | None = None


@dataclass(frozen=True)
class HookSignal:
    run_id: str
    state: str
    event_id: str
    reason: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class Progress:
    run_id: str
    message: str


@dataclass(frozen=True)
class Approval:
    """A permission prompt to put to the person: one input request, bound to this prompt
    (its id is derived from the payload), that expires with the hook's timeout."""

    run_id: str
    request_id: str
    summary: str
    details: dict[str, Any]
    action: dict[str, Any] | None = None  # what approving lets happen, shown first
    # What the person may edit before approving (``{schema, value}``; None: nothing),
    # the tool's input it is laid over, and whose hook asks (claude-code, codex).
    editable: dict[str, Any] | None = None
    tool_input: dict[str, Any] | None = None
    runtime: str = "claude-code"
    event: str = "PermissionRequest"  # or PreToolUse: the gate (runbell.hooks.gate)


Action = EnsureRun | HookSignal | Progress


@dataclass(frozen=True)
class HookPlan:
    actions: tuple[Action, ...] = ()
    approval: Approval | None = None
    turn: Turn | None = None  # the new local turn state (Claude Code), None: unchanged

    @property
    def run_ids(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for action in self.actions:
            seen.setdefault(action.run_id, None)
        return tuple(seen)


NOTHING = HookPlan()


def safe_id(*parts: str) -> str:
    """A run or request id from ``parts``: characters the API refuses become ``-``; an id
    that would be too long keeps its start and ends in a hash of the whole."""
    raw = ".".join(parts)
    cleaned = _UNSAFE.sub("-", raw).strip("-.") or "x"
    if not cleaned[0].isalnum():
        cleaned = "x" + cleaned
    if len(cleaned) <= MAX_ID:
        return cleaned
    digest = hashlib.sha256(raw.encode()).hexdigest()[:16]
    return f"{cleaned[: MAX_ID - 17]}~{digest}"


def event_id(run_id: str, payload: Mapping[str, Any], what: str) -> str:
    """A stable event id: the same payload for the same run is the same event."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(f"{run_id}\n{what}\n{canonical}".encode()).hexdigest()[:32]
    return f"hook-{digest}"


def _text(payload: Mapping[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value.strip() else None


def _required(payload: Mapping[str, Any], key: str) -> str:
    value = _text(payload, key)
    if value is None:
        raise PayloadError(f"{key} is missing")
    return value


def _project(payload: Mapping[str, Any]) -> str:
    cwd = _text(payload, "cwd")
    return PurePath(cwd).name or cwd if cwd else "session"


def running_tasks(payload: Mapping[str, Any]) -> int:
    """How many of the payload's ``background_tasks`` are still running."""
    tasks = payload.get("background_tasks")
    if not isinstance(tasks, list):
        return 0
    return sum(
        1
        for task in tasks
        if isinstance(task, Mapping) and task.get("status") in ("running", "pending", None)
    )


def _finished_details(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    message = payload.get("last_assistant_message")
    if not isinstance(message, str) or not message:
        return None
    return {"last_assistant_message": clip(message)}


def approval_details(runtime: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    details: dict[str, Any] = {
        "runtime": runtime,
        "tool_name": payload.get("tool_name"),
        "tool_input": clip(payload.get("tool_input")),
        "cwd": payload.get("cwd"),
    }
    for key in ("permission_mode", "permission_suggestions", "agent_type"):
        if key in payload:
            details[key] = clip(payload[key])
    return details


def _approval(runtime: str, label: str, run_id: str, payload: Mapping[str, Any]) -> Approval:
    tool = _text(payload, "tool_name") or "a tool"
    # Bound to this one prompt: a different prompt is a different request id, so opening
    # it supersedes the previous one on the same run.
    request_id = "perm-" + event_id(run_id, payload, "permission")[5:29]
    tool_input = payload.get("tool_input")
    tool_input = dict(tool_input) if isinstance(tool_input, Mapping) else None
    return Approval(
        run_id=run_id,
        request_id=request_id,
        summary=f"{label} wants to use {tool}"[:300],
        details=approval_details(runtime, payload),
        action=approval_action(payload),
        editable=editable_input(tool, tool_input),
        tool_input=tool_input,
        runtime=runtime,
    )


# ----------------------------------------------------------------------------- Claude Code


def claude_turn_run(session_id: str, number: int) -> str:
    return safe_id(f"cc-{session_id}" if number <= 1 else f"cc-{session_id}.{number}")


def claude_agent_run(session_id: str, agent_id: str) -> str:
    return safe_id(f"cc-{session_id}.agent-{agent_id}")


def plan_claude_code(payload: Mapping[str, Any], turn: Turn) -> HookPlan:
    """What one Claude Code hook event reports, given the session's turn state."""
    if not isinstance(payload, Mapping):
        raise PayloadError("the hook input is not a JSON object")
    event = _required(payload, "hook_event_name")
    session = _required(payload, "session_id")
    project = _project(payload)
    meta = {"runtime": "claude-code", "session_id": session, "cwd": payload.get("cwd")}

    def turn_run(number: int, state: Literal["queued", "working"], **kw: Any) -> EnsureRun:
        title = f"Claude Code: {project}" + (f" (turn {number})" if number > 1 else "")
        return EnsureRun(claude_turn_run(session, number), title[:500], state, metadata=meta, **kw)

    # Which turn this event belongs to, and whether it starts a new one.
    current = turn if turn.number > 0 else Turn(1, False)
    starts = event in ("UserPromptSubmit", "PermissionRequest") and turn.finished
    if starts:
        current = Turn(turn.number + 1, False)
    run_id = claude_turn_run(session, current.number)
    new_turn = current if current != turn else None

    if event == "SessionStart":
        if turn.number > 0:
            return NOTHING  # a resume or a compaction of a session we already know
        return HookPlan((turn_run(1, "queued"),), turn=current)

    agent_id = _text(payload, "agent_id")
    if event in ("SubagentStart", "SubagentStop"):
        if agent_id is None:
            raise PayloadError("agent_id is missing")
        child = claude_agent_run(session, agent_id)
        agent_type = _text(payload, "agent_type") or "subagent"
        ensure = EnsureRun(
            child,
            f"Claude Code subagent {agent_type}: {project}"[:500],
            "working",
            metadata={**meta, "parent_run": run_id, "agent_id": agent_id},
            details=_finished_details(payload) if event == "SubagentStop" else None,
        )
        if event == "SubagentStart":
            return HookPlan((ensure,), turn=new_turn)
        waiting = running_tasks(payload)
        if waiting:
            return HookPlan(
                (ensure, Progress(child, f"{waiting} background task(s) still running")),
                turn=new_turn,
            )
        done = HookSignal(
            child, "completed", event_id(child, payload, "stop"), f"{agent_type} done"
        )
        return HookPlan((ensure, done), turn=new_turn)

    # Inside a subagent, prompts and notifications belong to the subagent's own run.
    target = claude_agent_run(session, agent_id) if agent_id else run_id

    if event == "UserPromptSubmit":
        # The person typed: whatever the run waited for (an idle prompt, a question), it
        # is working again. A run already working records this as stale, nothing more.
        resume = HookSignal(run_id, "working", event_id(run_id, payload, "prompt"), "prompted")
        return HookPlan((turn_run(current.number, "working"), resume), turn=new_turn)

    if event == "PermissionRequest":
        ensure = (
            turn_run(current.number, "working")
            if target == run_id
            else EnsureRun(
                target,
                f"Claude Code subagent: {project}"[:500],
                "working",
                metadata={**meta, "parent_run": run_id, "agent_id": agent_id},
            )
        )
        approval = _approval("claude-code", "Claude Code", target, payload)
        return HookPlan((ensure,), approval=approval, turn=new_turn)

    if event == "Notification":
        kind = _text(payload, "notification_type")
        reason = WAITING.get(kind or "")
        if reason is None or (turn.finished and target == run_id):
            # Not a wait, or after the turn already ended: its completion said it.
            return HookPlan(turn=new_turn)
        signal = HookSignal(target, "input_required", event_id(target, payload, "wait"), reason)
        if target != run_id:
            return HookPlan((signal,), turn=new_turn)
        return HookPlan((turn_run(current.number, "working"), signal), turn=new_turn)

    if event == "Stop":
        if turn.finished:
            return NOTHING  # the same Stop twice (two identical handlers)
        details = _finished_details(payload)
        ensure = turn_run(current.number, "working", details=details)
        waiting = running_tasks(payload)
        if waiting:
            message = f"turn ended; {waiting} background task(s) still running"
            return HookPlan((ensure, Progress(run_id, message)), turn=new_turn)
        done = HookSignal(run_id, "completed", event_id(run_id, payload, "stop"), "turn finished")
        return HookPlan((ensure, done), turn=replace(current, finished=True))

    if event == "StopFailure":
        if turn.finished:
            return NOTHING
        error_class = _text(payload, "error") or "unknown"
        if error_class not in ERROR_CLASSES:
            error_class = "unknown"
        error: dict[str, Any] = {
            "code": error_class,
            # StopFailure is Claude Code giving up after its own retries: the turn is
            # over until someone asks again, so it is never "retrying by itself".
            "retryable": False,
            "user_action_required": error_class in USER_ACTION,
        }
        details_text = _text(payload, "error_details")
        if details_text:
            error["message"] = details_text[:2000]
        failed = HookSignal(
            run_id,
            "failed",
            event_id(run_id, payload, "failure"),
            f"Claude Code stopped: {error_class}",
            error,
        )
        ensure = turn_run(current.number, "working")
        return HookPlan((ensure, failed), turn=replace(current, finished=True))

    return HookPlan(turn=new_turn)  # an event this hook does not map


# ----------------------------------------------------------------------------- Codex


def codex_turn_run(session_id: str, turn_id: str) -> str:
    return safe_id(f"codex-{session_id}.{turn_id}")


def _codex_ensure(session: str, turn_id: str, payload: Mapping[str, Any], **kw: Any) -> EnsureRun:
    return EnsureRun(
        codex_turn_run(session, turn_id),
        f"Codex: {_project(payload)}"[:500],
        "working",
        metadata={
            "runtime": "codex",
            "session_id": session,
            "turn_id": turn_id,
            "cwd": payload.get("cwd"),
        },
        **kw,
    )


# Codex's TUI names each session with a turn of its own, passed to `notify` like any
# other (codex-cli 0.171.0): `"client": "codex-tui"`, its input starting with this.
CODEX_TITLE_TURN = "Generate a concise, single-line task title"


def is_codex_title_turn(payload: Mapping[str, Any]) -> bool:
    """Whether a notify payload is the TUI's own title-generation turn, not the person's."""
    messages = payload.get("input-messages")
    first = messages[0] if isinstance(messages, list) and messages else None
    return (
        payload.get("client") == "codex-tui"
        and isinstance(first, str)
        and first.lstrip().startswith(CODEX_TITLE_TURN)
    )


def plan_codex_notify(payload: Mapping[str, Any]) -> HookPlan:
    """The legacy ``notify`` payload (``agent-turn-complete``): one completed turn. The
    TUI's title-generation turn reports nothing (no run, no "A run finished")."""
    if not isinstance(payload, Mapping):
        raise PayloadError("the notify argument is not a JSON object")
    if payload.get("type") != "agent-turn-complete" or is_codex_title_turn(payload):
        return NOTHING
    thread = _required(payload, "thread-id")
    turn_value = payload.get("turn-id")
    if not isinstance(turn_value, str | int) or isinstance(turn_value, bool):
        raise PayloadError("turn-id is missing")
    turn_id = str(turn_value)
    message = payload.get("last-assistant-message")
    details = {"last_assistant_message": clip(message)} if isinstance(message, str) else None
    ensure = _codex_ensure(thread, turn_id, payload, details=details)
    done = HookSignal(
        ensure.run_id, "completed", event_id(ensure.run_id, payload, "notify"), "turn finished"
    )
    return HookPlan((ensure, done))


def plan_codex_hook(payload: Mapping[str, Any]) -> HookPlan:
    """One of Codex's newer hooks (stdin JSON, snake_case, ``turn_id`` on turn events)."""
    if not isinstance(payload, Mapping):
        raise PayloadError("the hook input is not a JSON object")
    event = _required(payload, "hook_event_name")
    session = _required(payload, "session_id")
    if event == "SessionStart":
        return NOTHING  # no turn yet: the first prompt starts the first run
    turn_value = payload.get("turn_id")
    if not isinstance(turn_value, str | int) or isinstance(turn_value, bool):
        return NOTHING  # an event outside a turn
    turn_id = str(turn_value)
    run_id = codex_turn_run(session, turn_id)
    if event == "UserPromptSubmit":
        return HookPlan((_codex_ensure(session, turn_id, payload),))
    if event == "PermissionRequest":
        ensure = _codex_ensure(session, turn_id, payload)
        return HookPlan((ensure,), approval=_approval("codex", "Codex", run_id, payload))
    if event == "Stop":
        ensure = _codex_ensure(session, turn_id, payload, details=_finished_details(payload))
        done = HookSignal(run_id, "completed", event_id(run_id, payload, "stop"), "turn finished")
        return HookPlan((ensure, done))
    return NOTHING
