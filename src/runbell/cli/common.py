"""What every ``runbell`` command shares: one error style and its exit codes (and the
exceptions that end a command with them), the consoles, the prompt, the settings (an
invalid one exits 2 with one line), the data directory, and the process's dependencies.
The command line itself (what a command declares, how argv is read, the help) is
:mod:`~runbell.cli.specs`, :mod:`~runbell.cli.parsing` and :mod:`~runbell.cli.helptext`.

This module is imported before any command runs, so it stays light: no settings, rich,
database or HTTP client at import time (``tests/acceptance/test_cli_start.py``). Every
command imports its implementation inside its function.

Exit codes (README "Command line"):

== ============================================================================
0  done
1  the answer was no: ``ask`` rejected, ``wait`` failed or cancelled, ``report``
   rejected
2  a usage error, or refused: a bad option, an unknown tenant or member, a change the
   rules do not allow; nothing was changed. For ``ask`` and ``wait``: no answer in
   time (their usage errors exit 3)
3  an error talking to the server or the database: unreachable, a wrong key, a
   request the server refused (``login``, ``report``, ``progress``, ``ask``, ``wait``
   talk to a server: every error of theirs is 3)
== ============================================================================

An error is ``runbell: <what>`` on stderr, then ``hint: <what to do>`` when there is
something to do; never a traceback.
"""

from __future__ import annotations

import sys

# Not typing's TYPE_CHECKING: typing (with collections, re, enum…) would be a fifth of a
# start's CPU, and every annotation here is a string (runbell.cli).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn, TypeVar

    from rich.console import Console

    from runbell.config import Settings
    from runbell.domain.errors import RunbellError

EXIT_OK = 0
EXIT_NO = 1
EXIT_REFUSED = 2
EXIT_UNREACHABLE = 3


class _LazyConsole:
    """A rich Console made on first use (rich costs ~80 ms to import; ``--help`` and
    most errors never need it)."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            # soft_wrap: a line is never folded at the terminal's (or a pipe's 80-column)
            # width, so printed links, commands and ids stay whole when copied or piped.
            self._console = Console(stderr=self._stderr, soft_wrap=True)
        return getattr(self._console, name)

    # Dunder methods are looked up on the class, never through __getattr__: rich's
    # Progress and Live use the console as a context manager (``with console:``).
    def __enter__(self) -> Any:
        return self.__getattr__("__enter__")()

    def __exit__(self, *exc: Any) -> Any:
        return self.__getattr__("__exit__")(*exc)


out: Console = _LazyConsole(stderr=False)  # type: ignore[assignment]
err: Console = _LazyConsole(stderr=True)  # type: ignore[assignment]


# --- one error style ---------------------------------------------------------------


class Exit(Exception):
    """End the command now with exit code ``code`` (what it printed is its answer)."""

    def __init__(self, code: int = EXIT_OK) -> None:
        super().__init__(code)
        self.code = code


class UsageError(Exception):
    """A command line the command cannot take: ``runbell: <message>``, then ``hint:
    runbell … --help`` naming the command (``path``), and its usage exit code (2; 3 for the
    commands scripts call, see :mod:`runbell.cli.agent`)."""

    def __init__(self, message: str, path: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.message, self.path, self.code = message, path, code


class BadParameter(ValueError):
    """A value a parameter refuses, raised by its converter or its check (see
    :mod:`runbell.cli.specs`): reported as ``invalid value for '--limit': <message>``."""


def _line(text: object) -> str:
    return " ".join(str(text).split())


def say(what: object, hint: str | None = None) -> None:
    """``runbell: <what>`` on stderr, and ``hint: …`` when there is something to do."""
    sys.stderr.write(f"runbell: {_line(what)}\n")
    if hint:
        sys.stderr.write(f"hint: {_line(hint)}\n")
    sys.stderr.flush()


def fail(what: RunbellError | str, hint: str | None = None, code: int = EXIT_REFUSED) -> NoReturn:
    """End the command: ``runbell: <what>`` (a refusal's detail), the hint, exit 2 unless
    told otherwise."""
    detail = what if isinstance(what, str) else what.detail
    say(detail, hint if hint is not None else _hint_for(detail))
    raise Exit(code)


def _hint_for(detail: str) -> str | None:
    """The next step for refusals that many commands share."""
    if detail.startswith("no single tenant named or numbered"):
        return "name the tenant by its id (ten_…) or name; create one: runbell tenant create NAME"
    return None


def unreachable_database(exc: BaseException) -> NoReturn:
    """The database did not answer: one line, a hint, exit 3 (never a traceback)."""
    orig = getattr(exc, "orig", None) or exc
    first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    fail(
        f"cannot reach the database: {first}",
        "is it running? RUNBELL_DATABASE_URL (or RUNBELL_DATA_DIR for SQLite) names it",
        EXIT_UNREACHABLE,
    )


def is_unavailable(exc: BaseException) -> bool:
    """A database that refused or lost the connection (asked only once SQLAlchemy, and so
    the flows, are loaded: an error before that is no database's)."""
    if "sqlalchemy" not in sys.modules:
        return False
    from runbell.flows.health import unavailable

    return unavailable(exc) == "unreachable"


def prompt(text: str, default: str | None = None, hide: bool = False) -> str:
    """Ask on the terminal, as ``runbell login`` does for what its options did not say:
    ``Runbell URL [http://127.0.0.1:8080]:``; an empty answer is the default, or asked
    again when there is none. Ctrl-C or the end of input ends the command (``runbell:
    aborted``, exit 2)."""
    shown = f"{text} [{default}]:" if default is not None else f"{text}:"
    while True:
        sys.stdout.write(shown)
        sys.stdout.flush()
        try:
            if hide:
                import getpass

                value = getpass.getpass(" ")
            else:
                value = input(" ")
        except (KeyboardInterrupt, EOFError):
            if hide:
                sys.stdout.write("\n")
            fail("aborted")
        if value:
            return value
        if default is not None:
            return default


# --- the process's dependencies ------------------------------------------------------


def settings() -> Settings:
    """Settings from the environment. An invalid one exits 2 with one line naming its
    variable (``runbell: RUNBELL_SMTP_PORT: …``), never a traceback."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from runbell.config import Settings, setting_problems

    try:
        return Settings()
    except ValidationError as exc:
        for line in setting_problems(exc):
            say(line)
    except SettingsError as exc:
        say(exc)
    raise Exit(EXIT_REFUSED)


def data_dir(settings: Settings) -> None:
    """Create the SQLite data directory, or exit 2 saying why it cannot be."""
    from runbell.app import prepare_data_dir

    try:
        prepare_data_dir(settings)
    except OSError as exc:
        fail(
            f"RUNBELL_DATA_DIR: cannot create {settings.data_dir}: {exc.strerror or exc}",
            "set RUNBELL_DATA_DIR to a directory this user can write",
        )


def core(given: Settings | None = None, migrate: bool = True) -> Any:
    """The process's :class:`~runbell.flows.context.Core` (the database migrated
    unless told otherwise)."""
    from runbell.app import build

    given = given or settings()
    data_dir(given)
    return build(given, migrate=migrate)


if TYPE_CHECKING:
    T = TypeVar("T")


def when_reachable(settings: Settings, start: Callable[[], T]) -> T:
    """A process's start-up (``start``: open and migrate the database, first writes),
    waiting while the database is unreachable: tried again with backoff, one
    ``database.waiting`` log line per attempt, for RUNBELL_DB_START_TIMEOUT_S seconds.
    Then, or when the database refuses us for good (a wrong password, no such database),
    exit 3 (the database could not be used) with one line naming the cause, never a
    traceback."""
    import sqlalchemy as sa

    from runbell.app import StillUnavailable
    from runbell.app import when_reachable as waiting

    try:
        return waiting(settings, start)
    except StillUnavailable as exc:
        fail(
            f"the database is unavailable ({exc.reason}: {exc.detail}); gave up after "
            f"{exc.attempts} attempt(s) in {exc.waited_s:.0f} s "
            f"(RUNBELL_DB_START_TIMEOUT_S={settings.db_start_timeout_s:g})",
            "is it running? RUNBELL_DB_START_TIMEOUT_S sets how long a start waits for it",
            EXIT_UNREACHABLE,
        )
    except sa.exc.OperationalError as exc:
        text = str(exc.orig).strip().splitlines() or [type(exc.orig).__name__]
        fail(
            f"cannot use the database: {text[0][:300]}",
            "check RUNBELL_DATABASE_URL (the database, role and password it names)",
            EXIT_UNREACHABLE,
        )
    except KeyboardInterrupt:  # Ctrl-C while waiting: stopped, not crashed
        say("stopped before the database answered")
        raise Exit(130) from None
