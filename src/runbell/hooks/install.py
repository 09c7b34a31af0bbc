"""The settings snippets ``runbell hook install`` writes or prints.

Claude Code: one handler per mapped event, merged into ``.claude/settings.json`` (project)
or ``~/.claude/settings.json`` (user). Merging keeps every existing key and hook; an event
that already runs ``… hook claude-code`` is left as it is, so installing twice changes
nothing. Codex: the ``notify`` line for ``config.toml`` and a ``hooks.json`` document,
printed for the person to paste (Codex keeps one ``notify`` program, which may be theirs).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CLAUDE_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PermissionRequest",
    "Notification",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "StopFailure",
)
CODEX_EVENTS = ("UserPromptSubmit", "PermissionRequest", "Stop")
# A reporting hook is a couple of quick requests; Claude Code waits for it.
REPORT_TIMEOUT = 30
# The approval hook waits RUNBELL_HOOK_TIMEOUT, then needs a moment to answer.
APPROVAL_MARGIN = 30


class SettingsError(Exception):
    """The existing settings file cannot be merged (it is not a JSON object)."""


def runbell_command() -> str:
    """How a hook runs this ``runbell``: the bare name when it is the one on PATH,
    otherwise its absolute path."""
    exe = Path(sys.argv[0])
    found = shutil.which("runbell")
    if exe.name == "runbell" and found and exe.exists() and os.path.samefile(found, exe):
        return "runbell"
    if exe.name == "runbell" and exe.exists():
        return shlex.quote(str(exe.resolve()))
    return "runbell"


def claude_snippet(command: str, approval_timeout: float) -> dict[str, Any]:
    hooks: dict[str, Any] = {}
    for event in CLAUDE_EVENTS:
        timeout = (
            int(approval_timeout) + APPROVAL_MARGIN
            if event == "PermissionRequest"
            else REPORT_TIMEOUT
        )
        handler = {"type": "command", "command": f"{command} hook claude-code", "timeout": timeout}
        hooks[event] = [{"hooks": [handler]}]
    return {"hooks": hooks}


def _ours(group: Any, suffix: str) -> bool:
    """Whether a matcher group runs Runbell's hook: a command ending in ``suffix`` (maybe
    followed by ``--gate`` patterns) or an HTTP hook posting to ``/v1/hooks/<runtime>``."""
    if not isinstance(group, Mapping):
        return False
    handlers = group.get("hooks")
    if not isinstance(handlers, list):
        return False
    url_part = "/v1/hooks/" + suffix.split()[-1]
    return any(
        isinstance(h, Mapping)
        and (
            (
                isinstance(h.get("command"), str)
                and (h["command"].rstrip().endswith(suffix) or f"{suffix} --gate " in h["command"])
            )
            or (isinstance(h.get("url"), str) and url_part in h["url"])
        )
        for h in handlers
    )


def merge(existing: Mapping[str, Any], snippet: Mapping[str, Any], suffix: str) -> dict[str, Any]:
    """``existing`` settings with the snippet's handlers added: nothing of anyone else's
    removed or reordered. An event already running Runbell's hook the same way is left
    alone (installing twice changes nothing); run another way (other gates, command
    instead of HTTP) Runbell's groups are replaced by the snippet's."""
    merged: dict[str, Any] = json.loads(json.dumps(existing))  # a deep copy of plain JSON
    hooks = merged.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError('"hooks" is not an object')
    for event, groups in snippet["hooks"].items():
        current = hooks.setdefault(event, [])
        if not isinstance(current, list):
            raise SettingsError(f'"hooks.{event}" is not a list')
        ours = [group for group in current if _ours(group, suffix)]
        if ours == groups:
            continue
        if ours:
            current[:] = [group for group in current if not _ours(group, suffix)]
        current.extend(json.loads(json.dumps(groups)))
    return merged


def claude_settings_path(scope: str, project_dir: Path, home: Path) -> Path:
    if scope == "user":
        return home / ".claude" / "settings.json"
    return project_dir / ".claude" / "settings.json"


def install_claude(path: Path, snippet: Mapping[str, Any]) -> dict[str, Any]:
    """Merge the snippet into the settings file at ``path`` (created if missing) and
    write it back atomically. Returns the merged settings."""
    existing: Any = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if text.strip():
            try:
                existing = json.loads(text)
            except ValueError as exc:
                raise SettingsError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(existing, dict):
        raise SettingsError(f"{path} is not a JSON object")
    merged = merge(existing, snippet, " hook claude-code")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".runbell-tmp")
    tmp.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return merged


def codex_text(command: str, approval_timeout: float) -> str:
    argv = [*shlex.split(command), "hook", "codex"]
    hooks: dict[str, Any] = {}
    for event in CODEX_EVENTS:
        timeout = (
            int(approval_timeout) + APPROVAL_MARGIN
            if event == "PermissionRequest"
            else REPORT_TIMEOUT
        )
        hooks[event] = [
            {"hooks": [{"type": "command", "command": f"{command} hook codex", "timeout": timeout}]}
        ]
    return (
        "# ~/.codex/config.toml (top level): every finished turn lands in your inbox\n"
        f"notify = {json.dumps(argv)}\n"
        "\n"
        "# ~/.codex/hooks.json (or <repo>/.codex/hooks.json): approve Codex's permission\n"
        "# prompts from any device; review and trust the hooks once in Codex's /hooks\n"
        f"{json.dumps({'hooks': hooks}, indent=2)}\n"
    )
