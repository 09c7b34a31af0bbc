"""What every ``runbell`` command shares: the consoles, the settings (an invalid one exits
2 with one line), the data directory, the process's dependencies, and how a refused
request ends a command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console

from runbell.config import Settings, setting_problems
from runbell.domain.errors import RunbellError

# soft_wrap: a line is never folded at the terminal's (or a pipe's 80-column) width, so
# printed links, commands and ids stay whole when copied or piped.
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def settings() -> Settings:
    """Settings from the environment. An invalid one exits 2 with one line naming its
    variable (``runbell: RUNBELL_SMTP_PORT: …``), never a traceback."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        return Settings()
    except ValidationError as exc:
        for line in setting_problems(exc):
            err.print(f"runbell: {line}", markup=False, highlight=False)
    except SettingsError as exc:
        err.print(f"runbell: {exc}", markup=False, highlight=False)
    raise typer.Exit(2)


def data_dir(settings: Settings) -> None:
    """Create the SQLite data directory, or exit 2 saying why it cannot be."""
    from runbell.app import prepare_data_dir

    try:
        prepare_data_dir(settings)
    except OSError as exc:
        err.print(
            f"runbell: RUNBELL_DATA_DIR: cannot create {settings.data_dir}: {exc.strerror or exc}",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2) from None


def core(given: Settings | None = None, migrate: bool = True) -> Any:
    """The process's :class:`~runbell.flows.context.Runbell` (the database migrated
    unless told otherwise)."""
    from runbell.app import build

    given = given or settings()
    data_dir(given)
    return build(given, migrate=migrate)


T = TypeVar("T")


def when_reachable(settings: Settings, start: Callable[[], T]) -> T:
    """A process's start-up (``start``: open and migrate the database, first writes),
    waiting while the database is unreachable: tried again with backoff, one
    ``database.waiting`` log line per attempt, for RUNBELL_DB_START_TIMEOUT_S seconds.
    Then, or when the database refuses us for good (a wrong password, no such database),
    exit 1 with one line naming the cause, never a traceback."""
    import sqlalchemy as sa

    from runbell.app import StillUnavailable
    from runbell.app import when_reachable as waiting

    try:
        return waiting(settings, start)
    except StillUnavailable as exc:
        line = (
            f"runbell: the database is unavailable ({exc.reason}: {exc.detail}); gave up "
            f"after {exc.attempts} attempt(s) in {exc.waited_s:.0f} s "
            f"(RUNBELL_DB_START_TIMEOUT_S={settings.db_start_timeout_s:g})."
        )
    except sa.exc.OperationalError as exc:
        text = str(exc.orig).strip().splitlines() or [type(exc.orig).__name__]
        line = f"runbell: cannot use the database: {text[0][:300]}"
    except KeyboardInterrupt:  # Ctrl-C while waiting: stopped, not crashed
        err.print("runbell: stopped before the database answered", markup=False)
        raise typer.Exit(130) from None
    err.print(line, markup=False, highlight=False)
    raise typer.Exit(1) from None


def fail(exc: RunbellError) -> NoReturn:
    """End the command with the refusal's detail: exit 2."""
    err.print(f"[red]error:[/red] {exc.detail}")
    raise typer.Exit(2)
