"""The ``runbell`` command: serve, migrate, account administration, and the commands
scripts and CI jobs report with.

One module per concept: :mod:`~runbell.cli.serve` (``migrate``, ``serve``, ``api``,
``worker``), :mod:`~runbell.cli.admin` (``tenant``, ``key``, ``user``, ``source``),
:mod:`~runbell.cli.deliveries` (``deliveries``), :mod:`~runbell.cli.retention`
(``tenant retention``, ``prune``), :mod:`~runbell.cli.agent` (``login``, ``report``,
``progress``, ``ask``, ``wait``: for scripts and CI, on :mod:`runbell.client`),
:mod:`~runbell.cli.hooks` (``hook``: Claude Code and Codex), :mod:`~runbell.cli.mcp`
(``mcp``, the MCP server over stdio);
:mod:`~runbell.cli.welcome` is the first start's text and :mod:`~runbell.cli.common`
what every command shares. This module only puts them together as one Typer
application, :data:`app` (the ``runbell`` entry point).

Starting is light (well under 150 ms of CPU): these modules import only Typer at their
top; each command imports its implementation when it runs (see :mod:`~runbell.cli.common`,
which also holds the help and error style and the exit codes).
"""

from __future__ import annotations

from runbell.cli import admin, agent, common, deliveries, hooks, retention, serve
from runbell.cli.mcp import mcp

app = common.group(
    "Runbell: trustworthy attention for background AI-agent work.",
    pretty_exceptions_enable=False,
)
admin.tenant_app.add_typer(retention.retention_app, name="retention")
app.add_typer(admin.tenant_app, name="tenant")
app.add_typer(admin.key_app, name="key")
app.add_typer(admin.user_app, name="user")
app.add_typer(admin.source_app, name="source")
app.add_typer(deliveries.deliveries_app, name="deliveries")
app.add_typer(hooks.hook_app, name="hook")
for command in (serve.migrate, serve.serve, serve.api, serve.worker, retention.prune, mcp):
    app.command(cls=common.Command)(command)
app.command("secret-key", cls=common.Command)(admin.secret_key)
for script_command in (agent.login, agent.report, agent.progress, agent.ask, agent.wait):
    app.command(cls=agent.AgentCommand)(script_command)

__all__ = ["app"]
