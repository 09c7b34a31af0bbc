"""``runbell hook …``: the Claude Code and Codex hooks, and their installation.

The hook commands print nothing but the runtime's documented JSON (a permission decision)
and always exit 0: a hook that fails must leave the agent exactly as if no hook ran.
Problems go to ``RUNBELL_HOOK_LOG`` when it is set. The work is in :mod:`runbell.hooks`.
"""

from __future__ import annotations

import os
import sys

from runbell.cli import common
from runbell.cli.specs import Argument, Flag, Group, Option, choice

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from collections.abc import Callable

group = Group("hook", "Claude Code and Codex hooks: report runs, answer approvals.")
install_group = Group("install", "Write or print a runtime's hook settings.")


def _finish(run: Callable[[], str]) -> None:
    # A hook call is one short sync client: it needs neither anyio (httpcore imports it
    # for its async locks) nor zstandard (httpx imports it to offer zstd, which Runbell
    # never sends). Marked absent they cost nothing: ~25 ms of the 150 ms budget.
    for optional in ("anyio", "zstandard"):
        sys.modules.setdefault(optional, None)  # type: ignore[arg-type]
    from runbell.hooks import report

    environ = os.environ
    try:
        output = run()
    except BaseException as exc:  # a hook never fails loudly; see the module docstring
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise common.Exit(0) from None
        line = f"hook failed: {type(exc).__name__}: {exc}"
        missing = getattr(exc, "missing_capability", None)  # a scoped key's 403
        if missing:
            line += (
                f" (RUNBELL_KEY lacks {missing}; the hooks need runs.report, "
                "input_requests.create and runs.read: runbell key create --capability …)"
            )
        report.log(environ, line)
        raise common.Exit(0) from None
    if output:
        sys.stdout.write(output + "\n")
        sys.stdout.flush()
    raise common.Exit(0)


GATE = Option(
    "--gate",
    "ask in Runbell before a tool runs where no dialog can (claude -p): a tool, "
    "'Write(/etc/**)', 'Bash(git push*)' (repeatable)",
    metavar="RULE",
    repeat=True,
)


@group.command(GATE)
def claude_code(gate: list[str] | None = None) -> None:
    """Report one Claude Code hook event (its JSON on stdin).

    Configured by RUNBELL_URL, RUNBELL_KEY and RUNBELL_OWNER, or the `runbell login`
    file; RUNBELL_HOOK_TIMEOUT is how long a permission prompt waits for an answer
    (seconds, default 120). With --gate, a PreToolUse event of a matching call in a
    headless session is put to the person and answered allow, deny or ask."""
    from runbell.hooks import claude_code as hook

    _finish(lambda: hook.handle(sys.stdin.read(), os.environ, tuple(gate or ())))


@group.command(Argument("payload", "the legacy notify JSON (Codex appends it)", metavar="JSON"))
def codex(payload: str | None = None) -> None:
    """Report a Codex notify call or hook event.

    A notify call's JSON is the last argument; a hook event's comes on stdin."""
    from runbell.hooks import codex as hook

    def run() -> str:
        stdin = None if payload is not None else sys.stdin.read()
        return hook.handle(payload, stdin, os.environ)

    _finish(run)


@install_group.command(
    Flag("--user/--project", "~/.claude/settings.json, or this project's"),
    Flag("--print", "print the snippet instead of writing it", dest="print_only"),
    GATE,
    Flag("--http", "HTTP hooks posting to RUNBELL_URL (no process per event)"),
    Option(
        "--mcp",
        "register Runbell's MCP server for every directory instead (claude mcp add "
        "--scope user): stdio (runbell mcp) or http (the server's /mcp)",
        metavar="TRANSPORT",
        type=choice("stdio", "http"),
    ),
    name="claude-code",
)
def install_claude_code(
    user: bool = False,
    print_only: bool = False,
    gate: list[str] | None = None,
    http: bool = False,
    mcp: str | None = None,
) -> None:
    """Merge the Runbell hooks into Claude Code's settings.

    .claude/settings.json (--user: ~/.claude/settings.json), with the hooks already there
    kept: nothing of anyone else's is removed, and installing twice changes nothing.
    --gate adds PreToolUse hooks that ask in Runbell before the chosen tools run in
    headless sessions (claude -p); --http writes HTTP hooks that send $RUNBELL_KEY, which
    Claude Code's environment must then export. With --mcp, registers Runbell's MCP
    server with Claude Code at user scope instead (again: updated)."""
    import json
    from pathlib import Path

    from runbell.client.config import load_config
    from runbell.client.errors import ConfigError
    from runbell.hooks import handlers, install, report

    if mcp is not None:
        _register_mcp(mcp, print_only)
        return

    server = owner = None
    if http:
        try:
            config = load_config()
        except ConfigError as exc:
            common.fail(f"--http needs the server's URL: {exc}")
        server, owner = config.url, config.owner
    try:
        snippet = handlers.claude_settings(
            install.runbell_command(), report.hook_timeout(os.environ), gate or (), server, owner
        )
    except ValueError as exc:
        common.fail(str(exc))
    if print_only:
        print(json.dumps(snippet, indent=2))
        return
    path = install.claude_settings_path("user" if user else "project", Path.cwd(), Path.home())
    try:
        install.install_claude(path, snippet)
    except (install.SettingsError, OSError) as exc:
        common.fail(str(exc))
    print(f"Runbell hooks merged into {path}")


def _register_mcp(transport: str, print_only: bool) -> None:
    """`claude mcp add --scope user …` with this machine's URL, key and owner: run, or
    printed (--print). An earlier registration at user scope is replaced."""
    import shlex
    import shutil
    import subprocess

    from runbell.client.config import load_config
    from runbell.client.errors import ConfigError
    from runbell.hooks import install, mcp_register

    try:
        config = load_config()
    except ConfigError as exc:
        common.fail(exc.detail)
    runbell = shlex.split(install.runbell_command())[0]
    add = mcp_register.add_command("http" if transport == "http" else "stdio", config, runbell)
    if print_only:
        print(mcp_register.shell_text(add))
        return
    if shutil.which("claude") is None:
        common.fail(
            "claude (Claude Code) is not on PATH",
            "install Claude Code, or print the command to run it yourself: "
            f"runbell hook install claude-code --mcp {transport} --print",
        )
    # claude, found on PATH, with arguments we built (no shell)
    subprocess.run(mcp_register.remove_command(), capture_output=True, check=False)  # noqa: S603
    done = subprocess.run(add, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        common.fail(f"claude mcp add failed: {(done.stderr or done.stdout).strip()}")
    print(f"Runbell's MCP server ({transport}) registered with Claude Code for every directory")


@install_group.command(name="codex")
def install_codex() -> None:
    """Print the config.toml notify line and the hooks.json for Codex."""
    from runbell.hooks import install, report

    print(install.codex_text(install.runbell_command(), report.hook_timeout(os.environ)))


group.add(install_group)  # listed after the hook commands
