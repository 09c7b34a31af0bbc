"""A ``runbell`` command line, from argv to an exit code.

:func:`parse` reads argv against the declarations (:mod:`~runbell.cli.specs`) by the
rules the command has always had (click's, which it was built on, and which scripts may
rely on):

- a group's words are its options (``--help``), then a command's name;
- a command's options and arguments come in any order; ``--`` ends the options; an
  option's value is ``--name=VALUE`` or the next word, whatever it is; a flag takes none
  (``--json=1`` is an error); a repeatable option keeps every value, any other the last;
- ``--help`` wins over everything but a word the parser cannot read;
- then the parameters are read (converted, checked, looked up in the environment,
  defaulted) in the order they were given, the arguments next, the options not given
  last: the first one missing or invalid is the error; words left over are one too.

:func:`run` calls the command, and is the one place errors are reported: a usage error is
``runbell: <what>`` then ``hint: runbell … --help`` on stderr, exit 2 (3 for the commands
scripts call, see :mod:`runbell.cli.agent`); a database that does not answer exits 3 with
one line; Ctrl-C exits 130. Never a traceback for any of these.
"""

from __future__ import annotations

import os
import sys

from runbell.cli.common import (
    EXIT_OK,
    EXIT_REFUSED,
    BadParameter,
    Exit,
    UsageError,
    is_unavailable,
    say,
    unreachable_database,
)
from runbell.cli.specs import Argument, Command, Flag, Group, Option, Param

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from typing import Any

HELP = "--help"

#: How a value that ``int`` or ``float`` refused is described.
_KINDS: dict[Any, str] = {int: "a whole number", float: "a number"}


class Help(Exception):
    """Show ``node``'s help: ``--help`` was given (on stdout, exit 0), or a group was named
    without a command (on stderr, exit 2)."""

    def __init__(self, node: Command | Group, path: str, code: int = EXIT_OK) -> None:
        super().__init__(path)
        self.node, self.path, self.code = node, path, code


def parse(root: Group, argv: Sequence[str], prog: str) -> tuple[Command, dict[str, Any]]:
    """The command ``argv`` names and the keyword arguments to call it with. Raises
    :class:`Help` or :class:`~runbell.cli.common.UsageError`; runs nothing."""
    node: Command | Group = root
    path = prog
    words = list(argv)
    while isinstance(node, Group):
        if not words:
            raise Help(node, path, EXIT_REFUSED)
        wants_help = False
        while words and _is_option(words[0]):
            word = words.pop(0)
            if word == "--":
                break
            name = _option_name(word, {HELP}, path, node.usage_exit)
            if name != word:
                raise UsageError(f"option {name!r} does not take a value", path, node.usage_exit)
            wants_help = True
        if wants_help:
            raise Help(node, path)
        if not words:
            raise UsageError("missing command", path, node.usage_exit)
        name = words.pop(0)
        found = node.find(name)
        if found is None:
            raise UsageError(_no_such_command(name, node), path, node.usage_exit)
        node, path = found, f"{path} {name}"
    return node, _read(node, path, words)


def _is_option(word: str) -> bool:
    return word[:1] == "-" and len(word) > 1


def _option_name(word: str, known: Collection[str], path: str, code: int) -> str:
    """The option ``word`` names (``--limit`` of ``--limit=5``), or the usage error."""
    name = word.partition("=")[0]
    if name in known:
        return name
    if word[:2] != "--":  # -h, -x=1: read as short options, of which there are none
        raise UsageError(f"no such option: {_shown(word[:2])}", path, code)
    message = f"no such option: {_shown(name)}"
    from difflib import get_close_matches  # only for this error

    close = get_close_matches(name, list(known))
    if close:
        message += f" (Possible options: {', '.join(sorted(close))})"
    raise UsageError(message, path, code)


def _no_such_command(name: str, group: Group) -> str:
    from difflib import get_close_matches  # only for this error

    message = f"no such command {name!r}"
    close = get_close_matches(name, [m.name for m in group.members])
    if close:
        message += f". Did you mean {', '.join(repr(c) for c in close)}?"
    return message


def _shown(word: str) -> str:
    """A word from the command line as an error repeats it: control characters escaped."""
    return "".join(
        f"\\x{ord(c):02x}" if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F else c for c in word
    )


def _read(command: Command, path: str, words: list[str]) -> dict[str, Any]:
    """A command's keyword arguments from its words."""
    given, order, positional, wants_help = _scan(command, path, words)
    arguments = command.arguments
    for index, argument in enumerate(arguments):
        if argument.repeat:  # takes what the arguments after it leave
            take = max(len(positional) - (len(arguments) - index - 1), 0)
            given[argument.dest], positional = positional[:take], positional[take:]
        else:
            given[argument.dest] = positional.pop(0) if positional else None
    if wants_help:
        raise Help(command, path)
    # The order problems are found in: options given, arguments, options not given.
    order += arguments
    order += [p for p in command.params if p not in order]
    kwargs = {p.dest: _value(command, p, given.get(p.dest), path) for p in order}
    if positional:
        extra = " ".join(_shown(w) for w in positional)
        raise UsageError(f"got unexpected extra argument(s) ({extra})", path, command.usage_exit)
    return kwargs


def _scan(
    command: Command, path: str, words: list[str]
) -> tuple[dict[str, Any], list[Param], list[str], bool]:
    """The options' words by destination (a list for a repeatable one, True or False for
    a flag), the options in the order first given, the other words, and whether
    ``--help`` was given."""
    code = command.usage_exit
    by_name: dict[str, tuple[Param | None, bool]] = {HELP: (None, True)}
    for option in command.options:
        if isinstance(option, Flag):
            by_name[option.on] = (option, True)
            if option.off:
                by_name[option.off] = (option, False)
        else:
            by_name[option.name] = (option, True)
    given: dict[str, Any] = {}
    order: list[Param] = []
    positional: list[str] = []
    wants_help = False
    while words:
        word = words.pop(0)
        if word == "--":
            positional += words
            break
        if not _is_option(word):
            positional.append(word)
            continue
        name = _option_name(word, by_name, path, code)
        param, on = by_name[name]
        explicit = name != word
        if param is None or isinstance(param, Flag):
            if explicit:
                raise UsageError(f"option {name!r} does not take a value", path, code)
            if param is None:
                wants_help = True
                continue
            given[param.dest] = on
        else:
            if explicit:
                value = word[len(name) + 1 :]
            elif words:
                value = words.pop(0)
            else:
                raise UsageError(f"option {name!r} requires an argument", path, code)
            if param.repeat:
                given.setdefault(param.dest, []).append(value)
            else:
                given[param.dest] = value
        if param not in order:
            order.append(param)
    return given, order, positional, wants_help


def _value(command: Command, param: Param, raw: Any, path: str) -> Any:
    """One parameter's value: from the command line, the environment, or the default."""
    if raw in (None, []) and isinstance(param, Option) and param.envvar:
        raw = os.environ.get(param.envvar) or None
        if raw is not None and param.repeat:
            raw = [raw]
    if raw in (None, []):
        if command.required(param):
            kind = "argument" if isinstance(param, Argument) else "option"
            raise UsageError(f"missing {kind} {_hint(param)!r}", path, command.usage_exit)
        return command.default(param)
    if isinstance(param, Flag):
        return raw
    try:
        value = [_convert(param, w) for w in raw] if param.repeat else _convert(param, raw)
        if param.check is not None:
            param.check(value)
    except BadParameter as exc:
        message = f"invalid value for {_hint(param)!r}: {exc}"
        raise UsageError(message, path, command.usage_exit) from None
    return value


def _convert(param: Param, word: str) -> Any:
    try:
        return param.type(word)
    except BadParameter:
        raise
    except (TypeError, ValueError):
        raise BadParameter(f"{word!r} is not {_KINDS.get(param.type, 'valid')}") from None


def _hint(param: Param) -> str:
    """How an error names a parameter: an argument by its placeholder, an option by its
    name."""
    return param.name if isinstance(param, Option) else str(param.metavar)


def run(root: Group, argv: Sequence[str], prog: str) -> int:
    """Parse ``argv``, call the command, and report what went wrong; the exit code."""
    try:
        command, kwargs = parse(root, argv, prog)
        command.fn(**kwargs)
    except Help as wanted:
        from runbell.cli.helptext import page  # only when help is shown

        (sys.stderr if wanted.code else sys.stdout).write(page(wanted.node, wanted.path) + "\n")
        return wanted.code
    except UsageError as exc:
        say(exc.message, f"{exc.path} --help")
        return exc.code
    except Exit as exc:
        return exc.code
    except KeyboardInterrupt:
        return 130
    except EOFError:
        sys.stderr.write("\n")
        say("aborted")
        return EXIT_REFUSED
    except BrokenPipeError:
        # The reader went away (`runbell deliveries list | head`): stop quietly, and
        # keep Python from complaining when it flushes stdout on the way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        try:
            unreachable_database(exc)
        except Exit as exit_:
            return exit_.code
    return EXIT_OK
