"""``runbell hook …``: the Claude Code and Codex hooks, and their installation.

The hook commands print nothing but the runtime's documented JSON (a permission decision)
and always exit 0: a hook that fails must leave the agent exactly as if no hook ran.
Problems go to ``RUNBELL_HOOK_LOG`` when it is set. The work is in :mod:`runbell.hooks`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

hook_app = typer.Typer(
    help="Hooks for agent runtimes (Claude Code, Codex): report runs, approve from any device.",
    no_args_is_help=True,
)
install_app = typer.Typer(help="Write or print a runtime's hook settings.", no_args_is_help=True)
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


@hook_app.command("claude-code", short_help="Report one Claude Code hook event (JSON on stdin).")
def claude_code() -> None:
    """Report one Claude Code hook event (its JSON on stdin). Configured by RUNBELL_URL,
    RUNBELL_KEY and RUNBELL_OWNER, or the `runbell login` file; RUNBELL_HOOK_TIMEOUT is
    how long a permission prompt waits for an answer (seconds, default 120)."""
    from runbell.hooks import claude_code as hook

    _finish(lambda: hook.handle(sys.stdin.read(), os.environ))


@hook_app.command("codex", short_help="Report a Codex notify call or hook event.")
def codex(
    payload: Annotated[
        str | None,
        typer.Argument(help="The legacy notify JSON (Codex appends it); else stdin."),
    ] = None,
) -> None:
    """Report a Codex notify call (JSON as the last argument) or hook event (stdin)."""
    from runbell.hooks import codex as hook

    def run() -> str:
        stdin = None if payload is not None else sys.stdin.read()
        return hook.handle(payload, stdin, os.environ)

    _finish(run)


@install_app.command(
    "claude-code", short_help="Merge the hooks into .claude/settings.json (or --user, --print)."
)
def install_claude_code(
    user: Annotated[
        bool, typer.Option("--user/--project", help="~/.claude/settings.json, or this project's")
    ] = False,
    print_only: Annotated[
        bool, typer.Option("--print", help="Print the snippet instead of writing it")
    ] = False,
) -> None:
    """Add the Runbell hooks to Claude Code's settings, merged with the hooks already
    there (nothing is removed; installing twice changes nothing)."""
    from runbell.hooks import install, report

    snippet = install.claude_snippet(install.runbell_command(), report.hook_timeout(os.environ))
    if print_only:
        typer.echo(json.dumps(snippet, indent=2))
        return
    path = install.claude_settings_path("user" if user else "project", Path.cwd(), Path.home())
    try:
        install.install_claude(path, snippet)
    except (install.SettingsError, OSError) as exc:
        typer.echo(f"runbell: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"Runbell hooks merged into {path}")


@install_app.command("codex", short_help="Print the config.toml and hooks.json lines for Codex.")
def install_codex() -> None:
    """Print the config.toml notify line and the hooks.json for Codex."""
    from runbell.hooks import install, report

    typer.echo(install.codex_text(install.runbell_command(), report.hook_timeout(os.environ)))
