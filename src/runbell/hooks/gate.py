"""Headless approvals (issue 20 item 1): the ``PreToolUse`` gate, pure like
:mod:`runbell.hooks.mapping`.

``claude -p`` never calls ``PermissionRequest`` (the model just gets "This command
requires approval"), but it runs ``PreToolUse`` hooks and honours their documented
decision, ``hookSpecificOutput.permissionDecision`` ``allow`` / ``deny`` / ``ask`` with a
``permissionDecisionReason``. So the tools and patterns chosen at install
(``runbell hook install claude-code --gate 'Bash' --gate 'Write(/etc/**)'``) are put to
the person in Runbell exactly as a permission prompt is (the same input request with the
same typed action preview) and the answer becomes that decision:

- approved → ``allow`` (an edited input: ``allow`` with ``updatedInput``);
- rejected → ``deny``, with "Denied in Runbell" as the reason the model reads;
- no answer in time, the prompt superseded, Runbell unreachable → ``ask``: Claude Code's
  normal permission flow, which in ``-p`` means the call does not run.

**One question per tool call.** Interactive sessions keep ``PermissionRequest``, which
fires only when Claude Code would ask anyway (after the settings' allow rules) and whose
dialog a Runbell answer dismisses. If the gate asked there too, a call would be asked
twice, so the gate applies only where nobody can answer a dialog: Claude Code names how it
was started in ``CLAUDE_CODE_ENTRYPOINT`` (``cli`` for the interactive terminal,
``sdk-cli`` for ``claude -p``, ``sdk-ts`` / ``sdk-py`` for the Agent SDK), inherited by
command hooks and sent by the HTTP hook as the ``X-Runbell-Entrypoint`` header. An
interactive entrypoint (:data:`INTERACTIVE`) skips the gate (no output: the call goes on
as if no hook ran); any other entrypoint, or none at all, is gated.

A pattern is a tool name (``Bash``, ``Write``, ``mcp__github__create_issue``) or a tool
name with a glob over the call's main argument in parentheses, the way Claude Code writes
permission rules: ``Bash(git push*)``, ``Bash(npm run test:*)`` (``:*`` is a prefix
match), ``Write(/etc/**)``, ``Edit(*.py)``, ``WebFetch(https://example.com/*)``. The
argument is the command for shell tools, ``file_path`` (or ``path``) for file tools, the
``url`` for WebFetch; ``*`` and ``**`` both match across ``/``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from runbell.hooks.editing import edited_output, permission_output
from runbell.hooks.mapping import Approval, HookPlan, PayloadError, Turn, plan_claude_code
from runbell.hooks.tool_actions import SHELL_TOOLS

#: Entrypoints where a person sits at Claude Code's own dialog: PermissionRequest asks.
INTERACTIVE = frozenset({"cli", "claude-vscode", "claude-desktop", "claude-jetbrains"})
#: The header the HTTP hook carries ``$CLAUDE_CODE_ENTRYPOINT`` in.
ENTRYPOINT_HEADER = "X-Runbell-Entrypoint"
DENIED = "Denied in Runbell"
_PATTERN = re.compile(r"^\s*([A-Za-z0-9_.:-]+)\s*(?:\((.*)\))?\s*$", re.DOTALL)
MAX_PATTERN = 500


@dataclass(frozen=True)
class ToolGate:
    """One ``--gate`` pattern: a tool name and, optionally, a glob over its argument."""

    tool: str
    glob: str | None = None

    def __str__(self) -> str:
        return self.tool if self.glob is None else f"{self.tool}({self.glob})"

    def matches(self, tool: str, tool_input: Mapping[str, Any]) -> bool:
        if tool != self.tool:
            return False
        if self.glob is None:
            return True
        subject = gated_argument(tool, tool_input)
        if subject is None:
            return False
        glob = self.glob[:-2] + "*" if self.glob.endswith(":*") else self.glob
        return fnmatch.fnmatchcase(subject, glob.replace("**", "*"))


def parse_gate(text: str) -> ToolGate:
    """``Bash`` → ToolGate("Bash"); ``Write(/etc/**)`` → ToolGate("Write", "/etc/**")."""
    match = _PATTERN.match(text) if len(text) <= MAX_PATTERN else None
    if match is None:
        raise ValueError(f"{text!r} is not a tool name or Tool(pattern), e.g. 'Write(/etc/**)'")
    tool, glob = match[1], match[2]
    if glob is not None and not glob.strip():
        raise ValueError(f"{text!r} has an empty pattern: write just {tool!r} for every call")
    return ToolGate(tool, None if glob is None or glob.strip() in ("*", "**") else glob.strip())


def parse_gates(texts: Iterable[str]) -> tuple[ToolGate, ...]:
    return tuple(parse_gate(t) for t in texts)


def gated_argument(tool: str, tool_input: Mapping[str, Any]) -> str | None:
    """The string a pattern's glob is matched against (None: the call has none)."""
    if tool in SHELL_TOOLS:
        command = tool_input.get("command")
        if isinstance(command, list):  # Codex's argv form
            command = " ".join(str(part) for part in command)
        return command if isinstance(command, str) else None
    for key in ("file_path", "path", "notebook_path", "url", "pattern", "query"):
        value = tool_input.get(key)
        if isinstance(value, str):
            return value
    return None


def interactive(entrypoint: str | None) -> bool:
    """Whether Claude Code was started where a person answers its dialogs."""
    return (entrypoint or "").strip() in INTERACTIVE


def gated(payload: Mapping[str, Any], gates: Iterable[ToolGate], entrypoint: str | None) -> bool:
    """Whether this ``PreToolUse`` call is to be put to the person in Runbell."""
    if interactive(entrypoint):
        return False
    tool = payload.get("tool_name")
    raw = payload.get("tool_input")
    tool_input: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    return isinstance(tool, str) and any(g.matches(tool, tool_input) for g in gates)


def plan_gate(
    payload: Mapping[str, Any], turn: Turn, gates: Iterable[ToolGate], entrypoint: str | None
) -> HookPlan:
    """A Claude Code event with the gate: ``PreToolUse`` of a gated call is planned as
    the permission prompt it stands for (the same run, request and action preview), its
    approval answered as a ``PreToolUse`` decision; any other event as usual."""
    if payload.get("hook_event_name") != "PreToolUse":
        return plan_claude_code(payload, turn)
    if not gated(payload, tuple(gates), entrypoint):
        return HookPlan()
    plan = plan_claude_code({**payload, "hook_event_name": "PermissionRequest"}, turn)
    if plan.approval is None:  # pragma: no cover - PermissionRequest always asks
        raise PayloadError("nothing to ask")
    return replace(plan, approval=replace(plan.approval, event="PreToolUse"))


def pretool_output(decision: str, reason: str, updated_input: Any = None) -> dict[str, Any]:
    """The documented ``PreToolUse`` decision: ``allow``, ``deny`` or ``ask``."""
    out: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    }
    if updated_input is not None:
        out["updatedInput"] = dict(updated_input)
    return {"hookSpecificOutput": out}


def no_answer(why: str = "no answer in Runbell in time") -> dict[str, Any]:
    return pretool_output("ask", f"{why}: Claude Code's own permission flow decides")


def answer_output(
    approval: Approval, outcome: str, decision: str | None, value: Any, edited: bool
) -> dict[str, Any] | None:
    """What the hook prints for how the person's request ended: the runtime's documented
    decision, or None (PermissionRequest: print nothing, the agent's own dialog stays).
    ``outcome`` is ``answered``, ``timeout``, ``expired``, ``superseded``, ``cancelled``."""
    pretool = approval.event == "PreToolUse"
    if outcome == "answered" and decision == "approve":
        if edited and isinstance(value, Mapping):
            out = edited_output(approval.runtime, approval.tool_input, value)
            if pretool:
                allowed = out["hookSpecificOutput"]["decision"]
                if allowed["behavior"] != "allow":  # Codex: the edit is a deny
                    return pretool_output("deny", allowed.get("message") or DENIED)
                return pretool_output("allow", "Approved in Runbell", allowed["updatedInput"])
            return out
        return (
            pretool_output("allow", "Approved in Runbell") if pretool else permission_output(True)
        )
    if outcome == "answered" and decision == "reject":
        return pretool_output("deny", DENIED) if pretool else permission_output(False, DENIED)
    return no_answer() if pretool else None
