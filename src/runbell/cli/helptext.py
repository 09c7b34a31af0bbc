"""``--help``: a command's or a group's help page, rendered from its declaration
(:mod:`~runbell.cli.specs`) in the style ``runbell`` has always had (click's)::

    Usage: runbell report [OPTIONS] RUN_ID STATE

      Report a run's state.

      The run is created for RUNBELL_OWNER if it does not exist.

    Arguments:
      RUN_ID  your run's id, e.g. ci-$GITHUB_RUN_ID  [required]
      …

    Options:
      --title TITLE           the run's title (creates it if new)
      --notify / --no-notify  push when it completes
      --help                  Show this message and exit.

``UPPER`` placeholders; ``[default: …]``, ``[env var: …]`` and ``[required]`` after a
parameter's help; a group lists its commands with the first sentence of each one's help,
whole. Wrapped to the terminal's width, at most 80 columns (``COLUMNS`` first, as
``shutil.get_terminal_size`` reads it; 80 when there is no terminal).

Imported only when a help page is shown: ``textwrap`` (and ``re``) cost a start that
shows none.
"""

from __future__ import annotations

import os
import sys
import textwrap

from runbell.cli.specs import Argument, Command, Flag, Group, Option, Param, cleandoc

HELP_ROW = ("--help", "Show this message and exit.")


def page(node: Command | Group, path: str) -> str:
    """The help of ``node``, which ``path`` (``runbell tenant retention``) names."""
    out = _Page(max(min(_columns(), 80) - 2, 50))
    if isinstance(node, Group):
        out.usage(path, "[OPTIONS] COMMAND [ARGS]...")
    else:
        out.usage(path, " ".join(["[OPTIONS]", *(_usage(node, a) for a in node.arguments)]))
    text = cleandoc(node.help)
    if text:
        out.write("\n")
        out.text(text, indent=2)
    if isinstance(node, Command):
        arguments = [(str(a.metavar), _help(node, a)) for a in node.arguments]
        if arguments:
            out.section("Arguments", arguments)
        out.section("Options", [*((_name(o), _help(node, o)) for o in node.options), HELP_ROW])
    else:
        out.section("Options", [HELP_ROW])
        if node.members:
            out.section("Commands", [(m.name, m.summary) for m in node.members])
    return "".join(out.parts).rstrip("\n")


def _columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # no terminal, or no stdout at all
            columns = 0
    return columns or 80


def _usage(command: Command, argument: Argument) -> str:
    shown = str(argument.metavar)
    shown = shown if command.required(argument) else f"[{shown}]"
    return shown + ("..." if argument.repeat else "")


def _name(option: Option | Flag) -> str:
    if isinstance(option, Flag):
        return " / ".join(option.names)
    return f"{option.name} {option.metavar}"


def _help(command: Command, param: Param) -> str:
    """The parameter's help, then what is worth knowing about its value in brackets."""
    extra = []
    if isinstance(param, Option) and param.envvar:
        extra.append(f"env var: {param.envvar}")
    default = command.default(param)
    if isinstance(param, Flag):
        if param.off and default is not None:  # the pair's word the default is
            extra.append(f"default: {(param.on if default else param.off).lstrip('-')}")
    elif default is not None and not command.required(param):
        extra.append(f"default: {default}")
    if command.required(param):
        extra.append("required")
    return f"{param.help}  [{'; '.join(extra)}]" if extra else param.help


class _Wrapper(textwrap.TextWrapper):
    """click's wrapper: a word longer than a line is cut where the line ends."""

    def _handle_long_word(
        self, reversed_chunks: list[str], cur_line: list[str], cur_len: int, width: int
    ) -> None:
        space_left = max(width - cur_len, 1)
        last = reversed_chunks[-1]
        cur_line.append(last[:space_left])
        reversed_chunks[-1] = last[space_left:]


def _wrap(text: str, width: int, first: str = "", rest: str = "") -> str:
    wrapper = _Wrapper(width, initial_indent=first, subsequent_indent=rest)
    wrapper.replace_whitespace = False  # as click: a paragraph's own line breaks are joined
    return wrapper.fill(text.expandtabs())


def _paragraphs(text: str, width: int, indent: str = "") -> str:
    """Each paragraph (blank-line separated) rewrapped, keeping its first line's indent."""
    shown = []
    for paragraph in text.split("\n\n"):
        lines = [line for line in paragraph.split("\n") if line]
        if not lines:
            continue
        extra = " " * (len(lines[0]) - len(lines[0].lstrip()))
        joined = " ".join([lines[0].lstrip(), *lines[1:]])
        shown.append(_wrap(joined, width, indent + extra, indent + extra))
    return "\n\n".join(shown)


class _Page:
    """click's HelpFormatter, for what ``runbell`` shows: a usage line, indented text and
    definition lists under headings, ``width`` columns."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def usage(self, prog: str, args: str) -> None:
        prefix = f"Usage: {prog} "
        if self.width >= len(prefix) + 20:  # the arguments fit to the right of it
            self.write(_wrap(args, self.width, prefix, " " * len(prefix)))
        else:
            self.write(prefix + "\n" + _wrap(args, self.width, " " * 11, " " * 11))
        self.write("\n")

    def text(self, text: str, indent: int) -> None:
        self.write(_paragraphs(text, self.width, " " * indent) + "\n")

    def section(self, heading: str, rows: list[tuple[str, str]]) -> None:
        """``Heading:`` then each row: the term, and its text in a column of its own
        (under the term when the term is longer than 30)."""
        self.write(f"\n{heading}:\n")
        first = min(max(len(term) for term, _ in rows), 30) + 2
        for term, text in rows:
            self.write(f"  {term}")
            if not text:
                self.write("\n")
                continue
            if len(term) <= first - 2:
                self.write(" " * (first - len(term)))
            else:
                self.write("\n" + " " * (first + 2))
            lines = _paragraphs(text, max(self.width - first - 2, 10)).splitlines()
            self.write(lines[0] + "\n")
            for line in lines[1:]:
                self.write(" " * (first + 2) + line + "\n")
