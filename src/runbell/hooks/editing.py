"""What a person may edit in a permission prompt, and the PermissionRequest output
(issue 19 item 3): pure, like :mod:`runbell.hooks.mapping`.

Claude Code's Bash, Write and Edit inputs are offered as an ``editable`` value (the
command; the path and the text). An approval of an edited value is Claude Code's
documented ``decision.updatedInput``; Codex reserves ``updatedInput`` and fails closed on
it, so there the edit is a deny whose message carries the edited command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["editable_input", "edited_output", "permission_output"]


#: The fields of a tool's input the person may edit before approving, by tool. Values
#: longer than :data:`MAX_EDITABLE` are not offered (the form must show all of it).
EDITABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "Bash": ("command",),
    "Write": ("file_path", "content"),
    "Edit": ("file_path", "new_string"),
}
MAX_EDITABLE = 20_000


def editable_input(tool: str, tool_input: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``editable`` of a permission prompt: the tool's string fields the person may
    change (``{command}`` for Bash, the path and the text for Write and Edit), with a
    schema that keeps them strings; None when the tool or its input does not fit."""
    names = EDITABLE_FIELDS.get(tool)
    if names is None or tool_input is None:
        return None
    value = {name: tool_input.get(name) for name in names}
    if not all(isinstance(v, str) and len(v) <= MAX_EDITABLE for v in value.values()):
        return None
    properties = {
        name: {
            "type": "string",
            "maxLength": MAX_EDITABLE,
            **({"minLength": 1} if name != "new_string" else {}),
        }
        for name in names
    }
    schema = {"type": "object", "properties": properties, "required": list(names)}
    return {"schema": schema, "value": value}


def permission_output(
    approved: bool, message: str | None = None, updated_input: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The documented PermissionRequest answer, the same for Claude Code and Codex:
    ``hookSpecificOutput.decision.behavior`` ``allow`` or ``deny`` (with a ``message``).
    ``updated_input`` (Claude Code only: the person edited the tool's input before
    approving) adds ``decision.updatedInput``; never for Codex, which fails closed on
    ``updatedInput``, ``updatedPermissions`` and ``interrupt``."""
    decision: dict[str, Any] = {"behavior": "allow" if approved else "deny"}
    if approved and updated_input is not None:
        decision["updatedInput"] = dict(updated_input)
    if not approved:
        decision["message"] = message or "Denied in Runbell"
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}


def edited_output(runtime: str, tool_input: Mapping[str, Any] | None, value: Any) -> dict[str, Any]:
    """The answer to a prompt the person approved with an edited input: Claude Code runs
    the edited input (``updatedInput``: the tool's input with the edited fields laid
    over it). Codex reserves ``updatedInput`` (it fails closed), so there the edit is a
    deny whose message carries the edited command for the model to run instead."""
    edited = dict(value) if isinstance(value, Mapping) else {}
    if runtime == "codex":
        shown = edited.get("command")
        text = shown if isinstance(shown, str) else json.dumps(edited, sort_keys=True)
        return permission_output(
            False,
            "Edited in Runbell: not run as asked. The person approved this instead; "
            f"run exactly this if it still fits: {text}",
        )
    return permission_output(True, updated_input={**(tool_input or {}), **edited})
