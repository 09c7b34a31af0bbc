"""The ``runbell`` command: serve, migrate, account administration, and the commands
scripts and CI jobs report with.

One module per concept: :mod:`~runbell.cli.serve` (``migrate``, ``serve``, ``api``,
``worker``), :mod:`~runbell.cli.admin` (``tenant``, ``key``, ``user``, ``source``,
``secret-key``), :mod:`~runbell.cli.deliveries` (``deliveries``),
:mod:`~runbell.cli.retention` (``tenant retention``, ``prune``),
:mod:`~runbell.cli.machine_answers` (``tenant machines``), :mod:`~runbell.cli.agent`
(``login``, ``report``, ``progress``, ``ask``, ``wait``: for scripts and CI, on
:mod:`runbell.client`), :mod:`~runbell.cli.ownership` (``history``, ``claim``,
``supersede``, ``finding``: who may finish a run and who did what, on the SDK too),
:mod:`~runbell.cli.hooks` (``hook``: Claude Code and Codex),
:mod:`~runbell.cli.mcp` (``mcp``, the MCP server over stdio),
:mod:`~runbell.cli.completion` (``completion``); :mod:`~runbell.cli.welcome` is the
first start's text and :mod:`~runbell.cli.common` what every command shares.

The command line itself is ours, small, and built for a light start (every command
starts in well under 150 ms of CPU): each command is declared as a value
(:mod:`~runbell.cli.specs`), argv is read against the declarations
(:mod:`~runbell.cli.parsing`), and ``--help`` is rendered from them
(:mod:`~runbell.cli.helptext`, imported only then). Typer (and the click it vendors) was
replaced: importing it alone cost about 120 ms of CPU on a 2-core machine, nearly the
whole budget (docs/architecture.md). These modules import nothing heavy at their top;
each command imports its implementation when it runs.

This module only puts the commands together as one tree, :data:`root`, and runs it:
:func:`app` is the ``runbell`` entry point, :func:`main` the same for a caller in this
process (a test) that wants the exit code.
"""

from __future__ import annotations

import os
import sys

from runbell.cli import (
    admin,
    agent,
    completion,
    deliveries,
    hooks,
    machine_answers,
    mcp,
    ownership,
    people,
    retention,
    schedules,
    serve,
)
from runbell.cli.parsing import run
from runbell.cli.specs import Group

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

root = Group("runbell", "Runbell: trustworthy attention for background AI-agent work.")
# Commands first, then groups (as `runbell --help` has always listed them).
root.add(
    *serve.commands,
    *retention.commands,
    *mcp.commands,
    *admin.commands,
    *agent.commands,
    *ownership.commands,
    *completion.commands,
    admin.tenants,
    admin.keys,
    admin.users,
    admin.sources,
    people.group,
    deliveries.group,
    schedules.group,
    hooks.group,
)
admin.tenants.add(retention.group, machine_answers.group)


def main(argv: Sequence[str] | None = None, prog: str = "runbell") -> int:
    """Run ``runbell`` with ``argv`` (default: this process's arguments); the exit code.
    ``prog`` is how help and hints name the command."""
    # httpx imports its own command line (httpx._main: click, rich, pygments) whenever
    # they are installed, as they are here: ~40 ms of CPU on every start of a command that
    # talks HTTP (a hook, `runbell mcp`, `report`), for a program this process never runs.
    # Marked absent, httpx falls back to a stub `httpx.main` (its `except ImportError`);
    # setdefault: a process that already imported it keeps it.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    return run(root, sys.argv[1:] if argv is None else argv, prog)


def app() -> NoReturn:
    """The ``runbell`` entry point: :func:`main` on ``sys.argv``, then exit."""
    exit_now(main(prog=os.path.basename(sys.argv[0]) or "runbell"))


def exit_now(code: int) -> NoReturn:
    """End the process with ``code``, without the interpreter's own last collections.

    A process that loaded the server holds some 165,000 objects; the garbage collections
    CPython runs while it tears its modules down cost ~0.4 s of CPU in a server process and
    ~0.2 s in an admin command (a quarter of one), for memory the operating system takes
    back anyway. One collection now finalizes what the command left behind as before (its
    database connections close, so SQLite merges its WAL: ``test_cli`` checks the file
    is left alone), and ``gc.freeze()`` then keeps every object that is still alive out of
    the collections at exit. atexit handlers and the flush of stdout and stderr still run."""
    import gc

    gc.collect()
    gc.freeze()
    sys.exit(code)


__all__ = ["app", "exit_now", "main", "root"]
