"""What a ``runbell`` command is, declared as values: its name, its help (its function's
docstring, whose first sentence is its summary in a group's list), its arguments and its
options. :mod:`~runbell.cli.parsing` reads a command line against these declarations,
:mod:`~runbell.cli.helptext` renders ``--help`` from them and
:mod:`~runbell.cli.completion` the shell completion scripts, so the three never disagree.

A command is a plain function, called with one keyword argument per parameter. The
function's defaults are the parameters' defaults, and a parameter without one is
required::

    tenant = Group("tenant", "Tenants and their policy.")

    @tenant.command(
        Argument("file", "a .toml or .yaml file", type=readable_file),
        Option("--tenant", "the tenant's id or name", metavar="TENANT"),
    )
    def policy(file: Path, tenant: str) -> None:
        \"\"\"Set a tenant's attention rules from a TOML or YAML file.\"\"\"

``runbell`` imports this module on every start, before any command runs: it imports
nothing but :mod:`runbell.cli.common` (``pathlib`` only when a path is converted).
"""

from __future__ import annotations

import os
import stat

from runbell.cli.common import EXIT_REFUSED, BadParameter

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path
    from typing import Any, TypeVar

    #: Turns the word given into the value: ``str``, ``int``, ``float``, :func:`path`, …
    #: A ``ValueError`` is reported as ``'x' is not a whole number`` (``int``) or ``… a
    #: number`` (``float``); a :class:`~runbell.cli.common.BadParameter` with its own
    #: message.
    Convert = Callable[[str], Any]
    #: Checks a converted value (the list of them for a repeated parameter); raises
    #: :class:`~runbell.cli.common.BadParameter` when it is refused.
    Check = Callable[[Any], None]
    F = TypeVar("F", bound=Callable[..., None])


class Param:
    """What arguments and options share: ``dest``, the function parameter the value goes
    to; its help (one line in ``--help``; every parameter has one); ``metavar``, its
    ``UPPER`` placeholder; ``type``; ``repeat``: every value given is kept, in a list;
    ``check``."""

    __slots__ = ("check", "dest", "help", "metavar", "repeat", "type")

    def __init__(
        self,
        dest: str,
        help: str,
        metavar: str | None,
        type: Convert,
        repeat: bool,
        check: Check | None,
    ) -> None:
        self.dest, self.help, self.metavar = dest, help, metavar
        self.type, self.repeat, self.check = type, repeat, check


class Argument(Param):
    """A positional value, shown ``RUN_ID``; ``[EMAIL]`` when it has a default;
    ``TABLE=DAYS...`` or ``[ID]...`` when it repeats."""

    __slots__ = ()

    def __init__(
        self,
        dest: str,
        help: str,
        *,
        metavar: str | None = None,
        type: Convert = str,
        repeat: bool = False,
        check: Check | None = None,
    ) -> None:
        super().__init__(dest, help, metavar or dest.upper(), type, repeat, check)


class Option(Param):
    """``--name VALUE`` or ``--name=VALUE``. Given again, the last value wins, unless it
    repeats (every value kept). When it is not given, ``envvar`` is read (if named and not
    empty), then the default."""

    __slots__ = ("envvar", "name")

    def __init__(
        self,
        name: str,
        help: str,
        *,
        metavar: str | None = None,
        type: Convert = str,
        repeat: bool = False,
        envvar: str | None = None,
        check: Check | None = None,
        dest: str | None = None,
    ) -> None:
        dest = dest or name.lstrip("-").replace("-", "_")
        super().__init__(dest, help, metavar or dest.upper(), type, repeat, check)
        self.name, self.envvar = name, envvar


class Flag(Param):
    """An option without a value: ``--json`` (True when given), or a pair
    ``--notify/--no-notify`` (True or False, the last given winning; the default, None
    included, when neither is)."""

    __slots__ = ("off", "on")

    def __init__(self, names: str, help: str, *, dest: str | None = None) -> None:
        on, _, off = names.partition("/")
        super().__init__(dest or on.lstrip("-").replace("-", "_"), help, None, bool, False, None)
        self.on, self.off = on, off or None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.on, self.off) if self.off else (self.on,)


class Command:
    """A command: its function, its name (the function's, ``_`` written ``-``, unless
    given), its parameters, and the exit code of a usage error (2; 3 for the commands
    scripts call, where 2 means "no answer in time")."""

    def __init__(
        self,
        fn: Callable[..., None],
        params: Sequence[Param],
        *,
        name: str | None = None,
        usage_exit: int = EXIT_REFUSED,
    ) -> None:
        self.fn, self.params, self.usage_exit = fn, tuple(params), usage_exit
        self.name = name or fn.__name__.replace("_", "-")
        self.help = fn.__doc__ or ""
        code = fn.__code__
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        given = fn.__defaults__ or ()  # for the last positional parameters
        with_default = names[code.co_argcount - len(given) : code.co_argcount]
        self.defaults: dict[str, Any] = dict(zip(with_default, given, strict=True))
        self.defaults.update(fn.__kwdefaults__ or {})
        declared = [p.dest for p in self.params]
        if sorted(declared) != sorted(names) or len(set(declared)) != len(declared):
            # A declaration that does not match its function is a bug: fail on import.
            raise TypeError(f"command {self.name}: {fn.__qualname__}{names} declares {declared}")

    @property
    def arguments(self) -> list[Argument]:
        return [p for p in self.params if isinstance(p, Argument)]

    @property
    def options(self) -> list[Option | Flag]:
        return [p for p in self.params if isinstance(p, Option | Flag)]

    @property
    def summary(self) -> str:
        return summary(self.help)

    def required(self, param: Param) -> bool:
        """A parameter whose function parameter has no default."""
        return param.dest not in self.defaults

    def default(self, param: Param) -> Any:
        return self.defaults.get(param.dest)


class Commands:
    """Commands declared together, in the order they are declared: a module's top-level
    commands (added to ``runbell`` with :meth:`Group.add`), or a group's."""

    def __init__(self, *, usage_exit: int = EXIT_REFUSED) -> None:
        self.members: list[Command | Group] = []
        self.usage_exit = usage_exit

    def command(self, *params: Param, name: str | None = None) -> Callable[[F], F]:
        """Declare the decorated function a command with these parameters; the function
        itself is unchanged."""

        def declare(fn: F) -> F:
            self.members.append(Command(fn, params, name=name, usage_exit=self.usage_exit))
            return fn

        return declare

    def __iter__(self) -> Iterator[Command | Group]:
        return iter(self.members)


class Group(Commands):
    """Commands under one name (``runbell tenant …``), with a one-line help; ``runbell``
    itself is the root group."""

    def __init__(self, name: str, help: str, *, usage_exit: int = EXIT_REFUSED) -> None:
        super().__init__(usage_exit=usage_exit)
        self.name, self.help = name, help

    def add(self, *members: Command | Group) -> None:
        """Add commands or groups, listed after those already there."""
        self.members.extend(members)

    def find(self, name: str) -> Command | Group | None:
        return next((m for m in self.members if m.name == name), None)

    @property
    def summary(self) -> str:
        return summary(self.help)


def walk(
    node: Command | Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Command | Group]]:
    """Every group and command under ``node`` (itself first) with the names leading to it."""
    yield path, node
    if isinstance(node, Group):
        for member in node.members:
            yield from walk(member, (*path, member.name))


def summary(help: str) -> str:
    """The first sentence of the first paragraph of ``help``, whole, on one line (the
    whole paragraph when no word in it ends a sentence)."""
    words = cleandoc(help).split("\n\n", 1)[0].split()
    for index, word in enumerate(words):
        if word.endswith("."):
            return " ".join(words[: index + 1])
    return " ".join(words)


def cleandoc(doc: str) -> str:
    """A docstring without its indentation and blank edge lines (``inspect.cleandoc``;
    importing ``inspect`` would cost more than this whole layer)."""
    lines = doc.expandtabs().split("\n")
    margin = min((len(ln) - len(ln.lstrip()) for ln in lines[1:] if ln.strip()), default=0)
    lines = [lines[0].strip(), *(line[margin:].rstrip() for line in lines[1:])]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


# --- converters ------------------------------------------------------------------


def path(text: str) -> Path:
    """A path as given (pathlib is imported only when a command takes one)."""
    from pathlib import Path

    return Path(text)


def readable_file(text: str) -> Path:
    """An existing file (not a directory) this user can read."""
    found = path(text)
    try:
        mode = os.stat(found).st_mode
    except OSError:
        raise BadParameter(f"file {text!r} does not exist") from None
    if stat.S_ISDIR(mode):
        raise BadParameter(f"file {text!r} is a directory")
    if not os.access(found, os.R_OK):
        raise BadParameter(f"file {text!r} is not readable")
    return found


def choice(*words: str) -> Convert:
    """One of ``words``, as given."""

    def one_of(text: str) -> str:
        if text not in words:
            raise BadParameter(f"{text!r} is not one of {', '.join(words)}")
        return text

    return one_of
