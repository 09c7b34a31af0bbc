"""Editable values (issue 19 item 3): the JSON Schema subset, value checks that name the
path, what counts as an edit; and the hooks' editable inputs and outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runbell.domain import editable
from runbell.domain.errors import ValidationFailed
from runbell.hooks.editing import editable_input, edited_output

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
COMMAND = {
    "type": "object",
    "properties": {"command": {"type": "string", "maxLength": 20}},
    "required": ["command"],
}


def test_a_value_is_checked_and_problems_name_the_path() -> None:
    spec = editable.parse_spec({"schema": COMMAND, "value": {"command": "ls"}})
    assert spec is not None and spec.single_string == "command"
    assert editable.check_value(spec, {"command": "ls -la"}) is None
    assert editable.check_value(spec, {"command": 3}) == ("command", "3 is not of type 'string'")
    with pytest.raises(ValidationFailed) as caught:
        editable.require_value(spec, {"command": "x" * 21})
    assert caught.value.extra["field"] == "value.command"
    assert editable.is_edited(spec, {"command": "ls -la"})
    assert not editable.is_edited(spec, {"command": "ls"})


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        {"type": "number", "minimum": 0, "maximum": 1.5},
        {"type": "string", "enum": ["a", "b"], "minLength": 1},
        {"type": "boolean", "title": "Go?", "description": "say so"},
        {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    ],
)
def test_the_subset_is_accepted(schema: dict[str, Any]) -> None:
    initial = {"array": [], "number": 1, "string": "a", "boolean": True}[schema["type"]]
    assert editable.parse_spec({"schema": schema, "value": initial}) is not None


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ({"type": "string", "pattern": "^a"}, "editable.schema.pattern"),
        ({"type": ["string", "null"]}, "editable.schema.type"),
        ({"type": "string", "maxItems": 1}, "editable.schema.maxItems"),
        ({"type": "object", "required": ["x"]}, "editable.schema.required"),
        ({"type": "string", "items": {"type": "string"}}, "editable.schema.items"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "oneOf": []}}},
            "editable.schema.properties.a.oneOf",
        ),
        ({"type": "string", "maxLength": -1}, "editable.schema.maxLength"),
        ({"type": "string", "enum": []}, "editable.schema.enum"),
    ],
)
def test_outside_the_subset_is_refused(schema: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        editable.parse_spec({"schema": schema, "value": "a"})
    assert caught.value.extra["field"] == field


def test_the_hook_offers_bash_write_and_edit_inputs() -> None:
    payload = json.loads((FIXTURES / "claude_code" / "permission_request.json").read_text())
    offered = editable_input("Bash", payload["tool_input"])
    assert offered is not None
    assert offered["value"] == {"command": "rm -rf node_modules && npm ci"}
    assert editable.parse_spec(offered) is not None  # within the subset
    write = editable_input("Write", {"file_path": "/a", "content": "x"})
    assert write is not None and write["value"] == {"file_path": "/a", "content": "x"}
    edit = editable_input("Edit", {"file_path": "/a", "old_string": "x", "new_string": ""})
    assert edit is not None and editable.parse_spec(edit) is not None
    assert editable_input("WebFetch", {"url": "https://example.com"}) is None
    assert editable_input("Bash", {"command": "x" * 30_000}) is None  # too long to show


def test_an_edited_approval_is_updated_input_for_claude_code_and_a_deny_for_codex() -> None:
    tool_input = {"command": "rm -rf node_modules && npm ci", "description": "Reinstall"}
    out = edited_output("claude-code", tool_input, {"command": "npm ci"})
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {
                "behavior": "allow",
                "updatedInput": {"command": "npm ci", "description": "Reinstall"},
            },
        }
    }
    decision = edited_output("codex", tool_input, {"command": "npm ci"})["hookSpecificOutput"][
        "decision"
    ]
    assert decision["behavior"] == "deny" and "updatedInput" not in decision
    assert "npm ci" in decision["message"]
