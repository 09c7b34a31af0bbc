"""What every ``runbell`` command shares: one help style, one error style and its exit
codes, the consoles, the settings (an invalid one exits 2 with one line), the data
directory, and the process's dependencies.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from typer._coercion import RuntimeParam  # private; tests/acceptance/test_cli_start.py
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
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


def _line(text: object) -> str:
    return " ".join(str(text).split())


def say(what: object, hint: str | None = None) -> None:
    """``runbell: <what>`` on stderr, and ``hint: …`` when there is something to do."""
    sys.stderr.write(f"runbell: {_line(what)}\n")
    if hint:
        sys.stderr.write(f"hint: {_line(hint)}\n")
    sys.stderr.flush()


def fail(
    what: RunbellError | str, hint: str | None = None, code: int = EXIT_REFUSED
) -> NoReturn:
    """End the command: ``runbell: <what>`` (a refusal's detail), the hint, exit 2 unless
    told otherwise."""
    detail = what if isinstance(what, str) else what.detail
    say(detail, hint if hint is not None else _hint_for(detail))
    raise typer.Exit(code)


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


def _usage_hint(exc: Any) -> str | None:
    ctx = getattr(exc, "ctx", None)
    return f"{ctx.command_path} --help" if ctx is not None else "runbell --help"


# --- one help style ----------------------------------------------------------------


@dataclass(frozen=True)
class _Plain(RuntimeParam):
    """A ``str``, ``int``, ``float`` or ``list[str]`` value converted as click always did.
    Typer 0.29 converts every value with a pydantic TypeAdapter, and importing pydantic
    costs more CPU than the whole rest of a start; these simple types do not need it."""

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, list | tuple):
            return [self._one(item, str, param, ctx) for item in value]
        return self._one(value, self.annotation, param, ctx)

    @staticmethod
    def _one(value: Any, kind: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, kind):
            return value
        if kind is bool:
            words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
            if str(value).lower() in words:
                return words[str(value).lower()]
            raise typer.BadParameter(f"{value!r} is not true or false", ctx=ctx, param=param)
        try:
            return kind(value)
        except (TypeError, ValueError):
            name = {int: "a whole number", float: "a number"}.get(kind, "text")
            raise typer.BadParameter(f"{value!r} is not {name}", ctx=ctx, param=param) from None


_PLAIN = {str, int, float, bool, list[str]}


def _lighten(params: Sequence[Any]) -> None:
    for param in params:
        described = getattr(param, "type_descriptor", None)
        if described is not None and described.annotation in _PLAIN:
            param._runtime_param = _Plain(
                parameter_info=described.parameter_info, annotation=described.annotation
            )


class _Light:
    """Every parameter of a command, the ``--help`` option and Typer's completion options
    included (both made after ``__init__``), converted by :class:`_Plain`."""

    params: list[Any]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        _lighten([option] if option is not None else [])
        return option

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _lighten(self.params)
        return super().parse_args(ctx, args)  # type: ignore[misc, no-any-return]


class Command(_Light, TyperCommand):
    """A command whose help shows ``UPPER`` placeholders: an argument's is its name
    (``RUN_ID``), an option's its ``metavar`` or its name (``--tenant TENANT``); the usage
    line reads ``runbell report [OPTIONS] RUN_ID STATE`` (``[ID]...`` when optional and
    repeatable), as the README writes it. Simple values are converted without pydantic
    (:class:`_Plain`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("rich_markup_mode", None)
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = (param.name or "value").upper()

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Arguments by their placeholder alone (Typer adds the Python type), then the
        options."""
        args, opts = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                args.append((str(param.metavar), record[1]))
            else:
                opts.append(record)
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                continue
            piece = str(param.metavar)
            piece = piece if param.required else f"[{piece}]"
            pieces.append(piece + ("..." if param.nargs != 1 else ""))
        return pieces


class Group(_Light, TyperGroup):
    """A command group in the same style, and the one place errors are reported: a usage
    error is ``runbell: <what>`` with ``hint: runbell … --help``; a database that does not
    answer exits 3 with one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("rich_markup_mode", None)
        super().__init__(*args, **kwargs)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        given = (args, prog_name, complete_var)
        if not standalone_mode:
            return super().main(*given, False, windows_expand_args, **extra)
        from typer import _click  # Typer vendors click; its exceptions live there

        try:
            code = super().main(*given, False, windows_expand_args, **extra)
        except _click.exceptions.NoArgsIsHelpError as exc:
            exc.show()  # `runbell`, `runbell user`: the help, on stderr, exit 2
            code = EXIT_REFUSED
        except _click.exceptions.ClickException as exc:
            # click's own codes are 1 and 2; a command may set another (AgentCommand: 3)
            code = EXIT_REFUSED if exc.exit_code == 1 else exc.exit_code
            message = exc.format_message().rstrip(".")
            say(message[:1].lower() + message[1:], _usage_hint(exc))
        except typer.Abort:
            say("aborted")
            code = EXIT_REFUSED
        except Exception as exc:
            if not _is_unavailable(exc):
                raise
            try:
                unreachable_database(exc)
            except typer.Exit as exit_:
                code = exit_.exit_code
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def _is_unavailable(exc: BaseException) -> bool:
    """A database that refused or lost the connection (asked only once SQLAlchemy, and so
    the flows, are loaded: an error before that is no database's)."""
    if "sqlalchemy" not in sys.modules:
        return False
    from runbell.flows.health import unavailable

    return unavailable(exc) == "unreachable"


def group(help: str, **kwargs: Any) -> typer.Typer:
    """A ``typer.Typer`` command group in the style above."""
    return typer.Typer(
        cls=Group, help=help, no_args_is_help=True, rich_markup_mode=None, **kwargs
    )


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
    raise typer.Exit(EXIT_REFUSED)


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
        raise typer.Exit(130) from None
