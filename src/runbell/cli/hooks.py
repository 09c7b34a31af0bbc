"""``runbell hook …``: the Claude Code and Codex hooks, and their installation.

The hook commands print nothing but the runtime's documented JSON (a permission decision)
and always exit 0: a hook that fails must leave the agent exactly as if no hook ran.
Problems go to ``RUNBELL_HOOK_LOG`` when it is set. The work is in :mod:`runbell.hooks`.
"""

# No ``from __future__ import annotations`` in the command modules: Typer would then
# eval every parameter's annotation string when `runbell` starts (runbell.cli.common).
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from runbell.cli import common
from runbell.cli.common import Command

hook_app = common.group(
    "Claude Code and Codex hooks: report runs, answer approvals."
)
install_app = common.group("Write or print a runtime's hook settings.")
hook_app.add_typer(install_app, name="install")


def _finish(run: Callable[[], str]) -> None:
    from runbell.hooks import report

    environ = os.environ
    try:
        output = run()
    except BaseException as exc:  # a hook never fails loudly; see the module docstring
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise typer.Exit(0) from None
        report.log(environ, f"hook failed: {type(exc).__name__}: {exc}")
        raise typer.Exit(0) from None
    if output:
        sys.stdout.write(output + "\n")
        sys.stdout.flush()
    raise typer.Exit(0)


@hook_app.command("claude-code", cls=Command)
def claude_code() -> None:
    """Report one Claude Code hook event (its JSON on stdin).

    Configured by RUNBELL_URL, RUNBELL_KEY and RUNBELL_OWNER, or the `runbell login`
    file; RUNBELL_HOOK_TIMEOUT is how long a permission prompt waits for an answer
    (seconds, default 120)."""
    from runbell.hooks import claude_code as hook

    _finish(lambda: hook.handle(sys.stdin.read(), os.environ))


@hook_app.command("codex", cls=Command)
def codex(
    payload: Annotated[
        str | None,
        typer.Argument(metavar="JSON", help="the legacy notify JSON (Codex appends it)"),
    ] = None,
) -> None:
    """Report a Codex notify call or hook event.

    A notify call's JSON is the last argument; a hook event's comes on stdin."""
    from runbell.hooks import codex as hook

    def run() -> str:
        stdin = None if payload is not None else sys.stdin.read()
        return hook.handle(payload, stdin, os.environ)

    _finish(run)


@install_app.command("claude-code", cls=Command)
def install_claude_code(
    user: Annotated[
        bool, typer.Option("--user/--project", help="~/.claude/settings.json, or this project's")
    ] = False,
    print_only: Annotated[
        bool, typer.Option("--print", help="print the snippet instead of writing it")
    ] = False,
) -> None:
    """Merge the Runbell hooks into Claude Code's settings.

    .claude/settings.json (--user: ~/.claude/settings.json), with the hooks already there
    kept: nothing is removed, and installing twice changes nothing."""
    from runbell.hooks import install, report

    snippet = install.claude_snippet(install.runbell_command(), report.hook_timeout(os.environ))
    if print_only:
        typer.echo(json.dumps(snippet, indent=2))
        return
    path = install.claude_settings_path("user" if user else "project", Path.cwd(), Path.home())
    try:
        install.install_claude(path, snippet)
    except (install.SettingsError, OSError) as exc:
        common.fail(str(exc))
    typer.echo(f"Runbell hooks merged into {path}")


@install_app.command("codex", cls=Command)
def install_codex() -> None:
    """Print the config.toml notify line and the hooks.json for Codex."""
    from runbell.hooks import install, report

    typer.echo(install.codex_text(install.runbell_command(), report.hook_timeout(os.environ)))
