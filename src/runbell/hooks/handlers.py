"""The Claude Code settings snippet with the headless gate and in its HTTP form (issue 20
items 1 and 2), built on :func:`runbell.hooks.install.claude_snippet`.

- ``--gate PATTERN`` adds ``PreToolUse`` matcher groups, one per tool name (the matcher),
  whose handler carries that tool's patterns: ``runbell hook claude-code --gate
  'Write(/etc/**)'`` for a command hook, ``?gate=Write(/etc/**)`` in the URL for an HTTP
  hook. Claude Code's matcher picks the tool; the hook matches the pattern.
- ``--http`` writes ``type: "http"`` handlers posting to ``<server>/v1/hooks/claude-code``
  with ``Authorization: Bearer $RUNBELL_KEY`` and ``X-Runbell-Entrypoint:
  $CLAUDE_CODE_ENTRYPOINT`` (both named in ``allowedEnvVars``: Claude Code interpolates
  only those), ``?timeout=`` for how long the server waits for a person's answer and
  ``?owner=`` (``RUNBELL_OWNER``) for who owns the runs it creates.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from runbell.hooks.gate import ENTRYPOINT_HEADER, ToolGate, parse_gates
from runbell.hooks.install import APPROVAL_MARGIN, REPORT_TIMEOUT, claude_snippet

#: Events whose hook waits for a person.
WAITING = ("PermissionRequest", "PreToolUse")
KEY_VAR = "RUNBELL_KEY"


def _by_tool(gates: Sequence[ToolGate]) -> dict[str, list[ToolGate]]:
    tools: dict[str, list[ToolGate]] = {}
    for g in gates:
        tools.setdefault(g.tool, []).append(g)
    return tools


def hook_url(
    server: str,
    runtime: str,
    timeout: float,
    gates: Sequence[ToolGate] = (),
    owner: str | None = None,
) -> str:
    query = [("timeout", str(int(timeout)))]
    if owner:
        query.append(("owner", owner))
    query += [("gate", str(g)) for g in gates]
    return f"{server.rstrip('/')}/v1/hooks/{runtime}?{urlencode(query)}"


def http_handler(
    server: str,
    timeout: float,
    gates: Sequence[ToolGate],
    event: str,
    owner: str | None = None,
) -> dict[str, Any]:
    wait = int(timeout) + APPROVAL_MARGIN if event in WAITING else REPORT_TIMEOUT
    return {
        "type": "http",
        "url": hook_url(server, "claude-code", timeout, gates, owner),
        "headers": {
            "Authorization": f"Bearer ${KEY_VAR}",
            ENTRYPOINT_HEADER: "$CLAUDE_CODE_ENTRYPOINT",
        },
        "allowedEnvVars": [KEY_VAR, "CLAUDE_CODE_ENTRYPOINT"],
        "timeout": wait,
    }


def claude_settings(
    command: str,
    approval_timeout: float,
    gates: Sequence[str] = (),
    http: str | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """The hooks to merge into Claude Code's settings: the usual events, ``PreToolUse``
    groups for ``gates``, as command hooks or (``http``: the server's URL) HTTP hooks."""
    chosen = parse_gates(gates)
    snippet = claude_snippet(command, approval_timeout)
    hooks: dict[str, Any] = snippet["hooks"]
    if http is not None:
        for event in hooks:
            hooks[event] = [{"hooks": [http_handler(http, approval_timeout, (), event, owner)]}]
    groups = []
    for tool, patterns in _by_tool(chosen).items():
        if http is not None:
            handler = http_handler(http, approval_timeout, patterns, "PreToolUse", owner)
        else:
            flags = " ".join(f"--gate {shlex.quote(str(g))}" for g in patterns)
            handler = {
                "type": "command",
                "command": f"{command} hook claude-code {flags}",
                "timeout": int(approval_timeout) + APPROVAL_MARGIN,
            }
        groups.append({"matcher": tool, "hooks": [handler]})
    if groups:
        hooks["PreToolUse"] = groups
    return snippet
