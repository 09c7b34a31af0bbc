"""A permission prompt's tool call → the typed action a person sees first (the pure part;
``runbell.domain.actions`` on the server checks it and flags its risks), and the bounding
of sensitive details, so that a huge tool input still fits the API's body limit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Sensitive details are capped so that a huge tool input (a Write of a whole file) still
# fits the API's body limit; the person sees the start of each long string.
MAX_DETAIL_CHARS = 4000
MAX_DETAIL_ITEMS = 50
# An action's long text (a written file, a diff) is cut too: the request must fit the API's
# body cap, and the raw details stay below the preview.
MAX_ACTION_CHARS = 20_000
SHELL_TOOLS = ("Bash", "shell", "local_shell", "exec_command")


def clip(value: Any, depth: int = 0) -> Any:
    """``value`` made safe to store as sensitive details: long strings cut, long lists and
    deep nesting bounded."""
    if isinstance(value, str):
        if len(value) <= MAX_DETAIL_CHARS:
            return value
        return value[:MAX_DETAIL_CHARS] + f"… ({len(value) - MAX_DETAIL_CHARS} more characters)"
    if depth >= 6:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())[:MAX_DETAIL_ITEMS]
        return {str(k): clip(v, depth + 1) for k, v in items}
    if isinstance(value, list | tuple):
        return [clip(v, depth + 1) for v in list(value)[:MAX_DETAIL_ITEMS]]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def _text(payload: Mapping[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value.strip() else None


def _cut(text: str, limit: int = MAX_ACTION_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters)"


def edit_diff(path: str, edits: list[tuple[str, str]]) -> str:
    """A unified diff of an Edit's (or MultiEdit's) replacements: one hunk per edit, old
    string against new, without the file around them (the hook never reads the file)."""
    import difflib  # only an Edit's approval needs it (a hook call's start stays light)

    out: list[str] = []
    for old, new in edits:
        lines = difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"a/{path}", f"b/{path}", lineterm="", n=3
        )
        hunk = list(lines)
        out.extend(hunk if not out else hunk[2:])  # the file header once
    return "\n".join(out) + ("\n" if out else "")


def approval_action(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The typed action (``runbell.domain.actions``) of a permission prompt, from its
    ``tool_name`` and ``tool_input``: Bash → shell, Write → file_write, Edit and MultiEdit
    → file_edit with a unified diff, WebFetch → web_fetch, ``mcp__server__tool`` →
    mcp_tool, anything else → generic. None when the prompt names no tool."""
    tool = _text(payload, "tool_name")
    if tool is None:
        return None
    raw = payload.get("tool_input")
    args: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    cwd = _text(payload, "cwd")
    where = {"cwd": cwd[:4096]} if cwd else {}
    command = args.get("command")
    path = args.get("file_path") or args.get("path")
    if tool in SHELL_TOOLS and command:
        if isinstance(command, list):  # Codex's argv form
            command = " ".join(str(part) for part in command)
        if isinstance(command, str) and command.strip():
            return {"kind": "shell", "command": _cut(command), **where}
    if tool == "Write" and isinstance(path, str) and path.strip():
        content = args.get("content")
        body = {"content": _cut(content)} if isinstance(content, str) else {}
        return {"kind": "file_write", "path": path[:4096], **body, **where}
    if tool in ("Edit", "MultiEdit") and isinstance(path, str) and path.strip():
        raw_edits = args.get("edits") if tool == "MultiEdit" else [args]
        edits = [
            (str(e.get("old_string") or ""), str(e.get("new_string") or ""))
            for e in (raw_edits if isinstance(raw_edits, list) else [])
            if isinstance(e, Mapping)
        ]
        if edits:
            diff = _cut(edit_diff(path, edits))
            return {"kind": "file_edit", "path": path[:4096], "diff": diff, **where}
    url = args.get("url")
    if tool == "WebFetch" and isinstance(url, str) and url.startswith(("http://", "https://")):
        return {"kind": "web_fetch", "url": url[:2000]}
    arguments = clip(dict(args))
    if tool.startswith("mcp__") and "__" in tool[5:]:
        server, name = tool[5:].split("__", 1)
        if server and name:
            return {
                "kind": "mcp_tool",
                "server": server[:200],
                "tool": name[:200],
                "arguments": arguments,
            }
    return {"kind": "generic", "tool": tool[:200], "arguments": arguments}
