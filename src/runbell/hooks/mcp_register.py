"""Registering Runbell's MCP server with Claude Code for every directory.

A plain ``claude mcp add`` registers a server at *local* scope: for the directory it ran
in only, so elsewhere ``claude mcp list`` says "No MCP servers configured". These are the
``claude mcp add --scope user`` commands that register it once for the user (in
``~/.claude.json``), over stdio (``runbell mcp``, started by Claude Code) or over HTTP (the
server's own ``/mcp``, nothing to run where the agent runs). The values come from
``RUNBELL_URL``/``RUNBELL_KEY``/``RUNBELL_OWNER``, else the ``runbell login`` file.

Example::

    >>> from runbell.client.config import ClientConfig
    >>> cfg = ClientConfig("http://127.0.0.1:8080", "rbk_x", "you@example.com")
    >>> add_command("http", cfg, "runbell")[:8]
    ['claude', 'mcp', 'add', '--scope', 'user', '--transport', 'http', 'runbell']
"""

from __future__ import annotations

import shlex
from typing import Literal

from runbell.client.config import ClientConfig

Transport = Literal["stdio", "http"]
NAME = "runbell"  # the server's name in Claude Code (`claude mcp get runbell`)


def add_command(transport: Transport, config: ClientConfig, runbell: str) -> list[str]:
    """``claude mcp add --scope user …`` for ``transport``; ``runbell`` is how Claude Code
    starts this ``runbell`` (stdio)."""
    head = ["claude", "mcp", "add", "--scope", "user"]
    if transport == "http":
        cmd = [*head, "--transport", "http", NAME, f"{config.url}/mcp"]
        cmd += ["--header", f"Authorization: Bearer {config.key}"]
        if config.owner:
            cmd += ["--header", f"X-Runbell-Owner: {config.owner}"]
        return cmd
    env = {"RUNBELL_URL": config.url, "RUNBELL_KEY": config.key}
    if config.owner:
        env["RUNBELL_OWNER"] = config.owner
    cmd = [*head, NAME]
    for name, value in env.items():
        cmd += ["--env", f"{name}={value}"]
    return [*cmd, "--", runbell, "mcp"]


def remove_command() -> list[str]:
    """Removes an earlier registration at user scope, so installing again updates it."""
    return ["claude", "mcp", "remove", "--scope", "user", NAME]


def shell_text(cmd: list[str]) -> str:
    """The command as a person pastes it into a shell."""
    return shlex.join(cmd)
