"""What every ``runbell`` command shares: the consoles, the settings (an invalid one exits
2 with one line), the data directory, the process's dependencies, and how a refused
request ends a command."""

from __future__ import annotations

from typing import Any, NoReturn

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


def fail(exc: RunbellError) -> NoReturn:
    """End the command with the refusal's detail: exit 2."""
    err.print(f"[red]error:[/red] {exc.detail}")
    raise typer.Exit(2)
