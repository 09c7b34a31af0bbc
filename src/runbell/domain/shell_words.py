"""A shell command read as words, the way a shell would split it, without running or
expanding anything: the reader under the risky-pattern classifier
(:mod:`runbell.domain.actions`). Pure.

:func:`segments` splits a command into simple commands (at ``;``, ``&&``, ``||``, ``|``,
``&``, newlines and parentheses), each with the files its output is redirected to and
the command piped into it; a here-document's body is skipped (it is text).
:func:`strip_wrappers` finds the command under ``sudo``, ``env X=1``, ``xargs``, ``nice``….
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

# Words that run the rest of the line as a command (their own options skipped).
_WRAPPERS = frozenset(
    {"command", "exec", "nice", "nohup", "time", "env", "xargs", "timeout", "stdbuf", "ionice"}
)
_PRIVILEGED = frozenset({"sudo", "doas", "pkexec", "run0"})
_SEPARATORS = frozenset(";&|()\n")
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<>"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def tokens(command: str) -> list[str]:
    """The command split as a shell would (quotes removed, operators apart); newlines are
    separators. Unbalanced quotes fall back to splitting on whitespace."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = ""  # "#" starts a comment only at a word's start; URLs carry it too
    try:
        return list(lex)
    except ValueError:
        return command.split()


@dataclass
class Segment:
    """One simple command: its words, where its output goes, what feeds it."""

    words: list[str] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    piped_from: Segment | None = None


def segments(tokens: list[str]) -> Iterator[Segment]:
    current = Segment()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        operator = bool(tok) and set(tok) <= set("<>&|") and ("<" in tok or ">" in tok)
        if operator and ">" in tok:  # output: the next word is the file written
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if target and not target.isdigit() and target != "-":
                current.redirects.append(target)
            i += 2
            continue
        if operator and tok.startswith("<<") and tok != "<<<":  # a here-document
            i = _after_heredoc(tokens, i + 1)
            continue
        if operator:  # input: the next word is only read
            i += 2
            continue
        if tok and set(tok) <= _SEPARATORS | {"<", ">"}:
            pipe = "|" in tok and "||" not in tok
            yield current
            current = Segment(piped_from=current if pipe else None)
            i += 1
            continue
        current.words.append(tok)
        i += 1
    yield current


def _after_heredoc(tokens: list[str], i: int) -> int:
    """The index after a here-document's body (its lines are text, not commands)."""
    if i >= len(tokens):
        return i
    delimiter = tokens[i].lstrip("-")
    j = i + 1
    while j < len(tokens) and "\n" not in tokens[j]:
        j += 1  # the rest of the command line
    while j < len(tokens):
        if "\n" in tokens[j] and j + 1 < len(tokens) and tokens[j + 1] == delimiter:
            return j + 2
        j += 1
    return j


def base_name(word: str) -> str:
    return posixpath.basename(word).lower()


def strip_wrappers(words: list[str]) -> tuple[list[str], bool]:
    """The command under ``sudo``, ``env X=1``, ``xargs -0``…; and whether it runs
    privileged."""
    privileged = False
    i = 0
    while i < len(words):
        name = base_name(words[i])
        if _ASSIGNMENT.match(words[i]):
            i += 1  # VAR=value before the command
            continue
        if name in _PRIVILEGED or name in _WRAPPERS:
            privileged = privileged or name in _PRIVILEGED
            i += 1
            while i < len(words) and (words[i].startswith("-") or "=" in words[i]):
                takes_value = words[i] in ("-u", "-g", "-n", "-s", "-I", "-d", "-P", "-L")
                i += 2 if takes_value else 1
            if name == "timeout" and i < len(words):
                i += 1  # its duration
            continue
        if name == "su" and "-c" in words[i:]:
            rest = words[words.index("-c", i) + 1 :]
            return ["sh", "-c", *rest[:1]], True  # su's -c string is a shell command
        break
    return words[i:], privileged


def short_flags(args: Sequence[str]) -> str:
    return "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))


def operands(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    ended = False
    for a in args:
        if not ended and a == "--":
            ended = True
        elif ended or not a.startswith("-"):
            out.append(a)
    return out
