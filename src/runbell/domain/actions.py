"""What an input request will do if approved: a typed ``action``, and the risky patterns a
person should notice before answering. Pure: no I/O, no clock.

An action is one of (``kind``):

==============  ===========================================================================
``shell``       ``command`` (run by a shell), ``cwd`` (where it runs; optional)
``file_write``  ``path``, ``content`` (optional: what is written), ``cwd`` (optional)
``file_edit``   ``path`` and either ``diff`` (unified) or ``old``/``new`` strings; ``cwd``
``web_fetch``   ``url``, ``method`` (optional, default ``GET``)
``mcp_tool``    ``server`` (optional), ``tool``, ``arguments`` (an object)
``generic``     ``tool``, ``arguments`` (an object)
==============  ===========================================================================

:func:`parse_action` checks one (sizes bounded, unknown keys refused) and raises
:class:`ActionInvalid` naming the field; :func:`risks` flags what deserves a second look
(recursive delete, force push, ``curl | sh``, writes outside the project, ``chmod -R 777``,
``sudo``, raw disk writes, …).

The classifier is advice for the person, never a decision: nothing approves, answers or
skips a question because no risk was found. It is deliberately simple (it reads the
command as a shell would split it, without running or expanding anything), so it errs
both ways: an obfuscated command can hide from it, and a quoted ``$(…)`` inside single
quotes is flagged although a shell would not run it. Text that is only an argument
(``echo "rm -rf /"``, ``grep 'git push -f'``) is not a command and is not flagged.

Example::

    >>> a = parse_action({"kind": "shell", "command": "rm -rf ./build", "cwd": "/src/app"})
    >>> [r.code for r in risks(a, project_dir="/src/app")]
    ['recursive_delete']
"""

# size: an action's shape, its checks and what is risky in it are read together (a new kind
# needs all three); the shell reader under the classifier is its own module (shell_words).

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from runbell.domain import shell_words

__all__ = [
    "ACTION_KINDS",
    "RISK_CODES",
    "Action",
    "ActionInvalid",
    "FileEdit",
    "FileWrite",
    "Generic",
    "McpTool",
    "Risk",
    "Shell",
    "WebFetch",
    "action_json",
    "parse_action",
    "risks",
]

ActionKind = Literal["shell", "file_write", "file_edit", "web_fetch", "mcp_tool", "generic"]
ACTION_KINDS: tuple[ActionKind, ...] = (
    "shell",
    "file_write",
    "file_edit",
    "web_fetch",
    "mcp_tool",
    "generic",
)

# --- limits (characters; the whole action must also fit the API's body cap) ------------
MAX_COMMAND = 20_000
MAX_PATH = 4_096
MAX_CONTENT = 100_000  # a file write's content, an edit's diff
MAX_EDIT_STRING = 50_000  # each of an edit's old and new strings
MAX_URL = 2_000
MAX_TOOL = 200
MAX_ARGUMENTS = 50_000  # the arguments object, as compact JSON
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class ActionInvalid(ValueError):
    """An action that does not fit its kind; ``field`` is its dotted path (``action.url``)."""

    def __init__(self, message: str, field: str = "action") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Shell:
    command: str
    cwd: str | None = None
    kind: Literal["shell"] = "shell"


@dataclass(frozen=True, slots=True)
class FileWrite:
    path: str
    content: str | None = None
    cwd: str | None = None
    kind: Literal["file_write"] = "file_write"


@dataclass(frozen=True, slots=True)
class FileEdit:
    path: str
    diff: str | None = None  # unified
    old: str | None = None
    new: str | None = None
    cwd: str | None = None
    kind: Literal["file_edit"] = "file_edit"


@dataclass(frozen=True, slots=True)
class WebFetch:
    url: str
    method: str = "GET"
    kind: Literal["web_fetch"] = "web_fetch"


@dataclass(frozen=True, slots=True)
class McpTool:
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    server: str | None = None
    kind: Literal["mcp_tool"] = "mcp_tool"


@dataclass(frozen=True, slots=True)
class Generic:
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    kind: Literal["generic"] = "generic"


Action = Shell | FileWrite | FileEdit | WebFetch | McpTool | Generic

_FIELDS: dict[str, dict[str, tuple[bool, int]]] = {
    # kind -> {field: (required, max characters)}; "arguments" is an object
    "shell": {"command": (True, MAX_COMMAND), "cwd": (False, MAX_PATH)},
    "file_write": {
        "path": (True, MAX_PATH),
        "content": (False, MAX_CONTENT),
        "cwd": (False, MAX_PATH),
    },
    "file_edit": {
        "path": (True, MAX_PATH),
        "diff": (False, MAX_CONTENT),
        "old": (False, MAX_EDIT_STRING),
        "new": (False, MAX_EDIT_STRING),
        "cwd": (False, MAX_PATH),
    },
    "web_fetch": {"url": (True, MAX_URL), "method": (False, 10)},
    "mcp_tool": {"server": (False, MAX_TOOL), "tool": (True, MAX_TOOL), "arguments": (False, 0)},
    "generic": {"tool": (True, MAX_TOOL), "arguments": (False, 0)},
}
# Fields that must hold something other than whitespace when given.
_NOT_BLANK = frozenset({"command", "path", "url", "tool", "server", "cwd"})


def parse_action(data: Any) -> Action:
    """Check ``data`` (the JSON of an action) and return it typed.

    Raises :class:`ActionInvalid` with the offending field (``action.command``…) for an
    unknown kind, a missing or blank required field, a value of the wrong type, an unknown
    key, a value over its size limit, an edit with neither ``diff`` nor ``old``/``new`` (or
    with both), a URL that is not ``http``/``https`` or a method outside :data:`METHODS`.
    """
    if not isinstance(data, Mapping):
        raise ActionInvalid("action must be an object")
    kind = data.get("kind")
    if kind not in _FIELDS:
        raise ActionInvalid(f"action.kind must be one of {', '.join(ACTION_KINDS)}", "action.kind")
    spec = _FIELDS[kind]
    for key in data:
        if key != "kind" and key not in spec:
            raise ActionInvalid(
                f"{key!r} is not a field of a {kind} action (its fields: {', '.join(spec)})",
                f"action.{key}",
            )
    values: dict[str, Any] = {}
    for name, (required, limit) in spec.items():
        value = data.get(name)
        where = f"action.{name}"
        if value is None:
            if required:
                raise ActionInvalid(f"a {kind} action needs {name}", where)
            continue
        if name == "arguments":
            values[name] = _arguments(value, where)
            continue
        if not isinstance(value, str):
            raise ActionInvalid(f"{where} must be a string", where)
        if name in _NOT_BLANK and not value.strip():
            raise ActionInvalid(f"{where} must not be blank", where)
        if len(value) > limit:
            raise ActionInvalid(f"{where} is at most {limit} characters", where)
        values[name] = value
    if kind == "shell":
        return Shell(**values)
    if kind == "file_write":
        return FileWrite(**values)
    if kind == "file_edit":
        has_diff = "diff" in values
        has_strings = "old" in values or "new" in values
        if has_diff == has_strings:
            raise ActionInvalid(
                "a file_edit action carries either diff (unified) or old and new strings",
                "action.diff",
            )
        if has_strings and ("old" not in values or "new" not in values):
            raise ActionInvalid("a file_edit action with old needs new, and back", "action.new")
        return FileEdit(**values)
    if kind == "web_fetch":
        url = values["url"]
        try:
            parts = urlsplit(url)
        except ValueError:  # e.g. an unclosed IPv6 bracket
            parts = urlsplit("")
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            raise ActionInvalid("action.url must be an http or https URL", "action.url")
        method = values.get("method", "GET").upper()
        if method not in METHODS:
            raise ActionInvalid(
                f"action.method must be one of {', '.join(METHODS)}", "action.method"
            )
        return WebFetch(url=url, method=method)
    if kind == "mcp_tool":
        return McpTool(**values)
    return Generic(**values)


def _arguments(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ActionInvalid(f"{where} must be an object", where)
    try:
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    except (TypeError, ValueError) as exc:
        raise ActionInvalid(f"{where} must be plain JSON", where) from exc
    if size > MAX_ARGUMENTS:
        raise ActionInvalid(f"{where} is at most {MAX_ARGUMENTS} characters as JSON", where)
    return dict(value)


def action_json(action: Action) -> dict[str, Any]:
    """The action as stored and shown: ``kind`` first, fields left out when None."""
    out: dict[str, Any] = {"kind": action.kind}
    for name in _FIELDS[action.kind]:
        value = getattr(action, name)
        if value is not None:
            out[name] = value
    return out


# --- risks -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Risk:
    """One pattern worth a second look: a stable ``code``, a short ``label`` a person
    reads, and the ``evidence`` (the part of the action it was found in, cut short)."""

    code: str
    label: str
    evidence: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "label": self.label, "evidence": self.evidence}


#: Every risk code, in the order risks are listed, with its label.
RISK_CODES: dict[str, str] = {
    "recursive_delete": "Deletes recursively",
    "force_push": "Force-pushes (rewrites remote history)",
    "pipe_to_shell": "Runs a script downloaded from the network",
    "outside_project": "Writes outside the project directory",
    "world_writable": "Makes files writable by everyone",
    "privileged": "Runs with elevated privileges",
    "disk_write": "Writes to a raw disk or formats it",
    "discard_changes": "Discards uncommitted changes",
    "remote_write": "Sends a request that may change something remotely",
}
MAX_EVIDENCE = 200

_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "busybox"})
_INTERPRETERS = _SHELLS | {"python", "python3", "perl", "ruby", "node", "php"}
_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "iwr", "invoke-webrequest"})
_SAFE_TARGETS = re.compile(r"^/dev/(null|stdout|stderr|tty|fd/\d+)$|^/(var/)?tmp(/|$)")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)|`([^`]*)`|<\(([^()]*)\)")
# Commands whose non-option arguments are all paths written (or removed).
_WRITES_ALL = frozenset(
    {"rm", "rmdir", "touch", "mkdir", "truncate", "chmod", "chown", "chgrp", "tee", "shred"}
)
# Commands whose last non-option argument is the path written.
_WRITES_LAST = frozenset({"cp", "mv", "install", "ln", "rsync"})
_DISK = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|rdisk|md|dm-|mapper/)")


def risks(action: Action, project_dir: str | None = None) -> list[Risk]:
    """The risky patterns in ``action``, one per code, in :data:`RISK_CODES` order.

    ``project_dir`` is the directory the agent works in (absolute); a write whose path
    resolves outside it is ``outside_project``. Without it, the action's own ``cwd``
    stands in; with neither, nothing is judged outside. Relative paths resolve against
    the action's ``cwd`` (or the project). Never used to approve anything.
    """
    project = _absolute(project_dir) or _absolute(getattr(action, "cwd", None))
    found: list[Risk] = []
    if isinstance(action, Shell):
        found = list(_shell_risks(action.command, _absolute(action.cwd) or project, project))
    elif isinstance(action, FileWrite | FileEdit):
        base = _absolute(action.cwd) or project
        if _outside(action.path, base, project, ignore_temp=False):
            found.append(_risk("outside_project", action.path))
    elif isinstance(action, WebFetch):
        if action.method not in ("GET", "HEAD", "OPTIONS"):
            found.append(_risk("remote_write", f"{action.method} {action.url}"))
    else:  # a tool whose arguments carry a command is read as one
        for key in ("command", "cmd", "script"):
            value = action.arguments.get(key)
            if isinstance(value, str):
                found.extend(_shell_risks(value, project, project))
    return _ordered(found)


def _risk(code: str, evidence: str) -> Risk:
    text = " ".join(evidence.split())
    if len(text) > MAX_EVIDENCE:
        text = text[: MAX_EVIDENCE - 1] + "…"
    return Risk(code, RISK_CODES[code], text)


def _ordered(found: Sequence[Risk]) -> list[Risk]:
    first: dict[str, Risk] = {}
    for r in found:
        first.setdefault(r.code, r)
    return [first[code] for code in RISK_CODES if code in first]


def _absolute(path: str | None) -> str | None:
    if not path or not path.startswith("/"):
        return None
    return posixpath.normpath(path)


def _outside(path: str, base: str | None, project: str | None, *, ignore_temp: bool) -> bool:
    """Whether writing ``path`` (relative to ``base``) lands outside ``project``."""
    if project is None:
        return False
    if path.startswith(("~", "$HOME", "${HOME}")):
        return True  # a home directory is never the project's inside (as far as we know)
    if path.startswith("$") or not path:
        return False  # another variable: unknown, not guessed
    if path.startswith("/"):
        resolved = posixpath.normpath(path)
    elif base is None:
        return False
    else:
        resolved = posixpath.normpath(posixpath.join(base, path))
    if ignore_temp and _SAFE_TARGETS.match(resolved):
        return False
    return not (resolved == project or resolved.startswith(project.rstrip("/") + "/"))


def _shell_risks(
    command: str, cwd: str | None, project: str | None, depth: int = 0
) -> Iterator[Risk]:
    if depth > 3:
        return
    for match in _SUBSTITUTION.finditer(command):
        inner = next(g for g in match.groups() if g is not None)
        yield from _shell_risks(inner, cwd, project, depth + 1)
    if re.search(
        r"\b(ba|z|da|k)?sh\s+(-\w+\s+)*[\"']?(<\(|\$\(|`)\s*(curl|wget)\b", command, re.IGNORECASE
    ):
        yield _risk("pipe_to_shell", command)
    here = cwd
    for seg in shell_words.segments(shell_words.tokens(command)):
        for target in seg.redirects:
            if _outside(target, here, project, ignore_temp=True):
                yield _risk("outside_project", f"> {target}")
            if _DISK.match(target):
                yield _risk("disk_write", f"> {target}")
        words, privileged = shell_words.strip_wrappers(seg.words)
        if privileged:
            yield _risk("privileged", " ".join(seg.words))
        if not words:
            continue
        name = shell_words.base_name(words[0])
        args = words[1:]
        evidence = " ".join(words)
        if name == "cd":
            to = next((a for a in args if not a.startswith("-")), None)
            if to and to.startswith("/"):
                here = posixpath.normpath(to)
            elif to and here and not to.startswith(("~", "$")):
                here = posixpath.normpath(posixpath.join(here, to))
            else:
                here = None  # cd home, or somewhere unknown: paths after it are unknown
            continue
        yield from _command_risks(name, args, evidence, seg, here, project, depth)


def _command_risks(
    name: str,
    args: list[str],
    evidence: str,
    seg: shell_words.Segment,
    here: str | None,
    project: str | None,
    depth: int,
) -> Iterator[Risk]:
    flags = shell_words.short_flags(args)
    longs = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    if name in ("rm", "rimraf") and (
        name == "rimraf" or "r" in flags or "R" in flags or "--recursive" in longs
    ):
        yield _risk("recursive_delete", evidence)
    if name == "find" and ("-delete" in args or _find_execs_rm(args)):
        yield _risk("recursive_delete", evidence)
    if name in _SHELLS and "-c" in args:
        inner = args[args.index("-c") + 1 :]
        if inner:
            yield from _shell_risks(inner[0], here, project, depth + 1)
    if name in _INTERPRETERS:
        feeder = seg.piped_from
        while feeder is not None:  # curl … | tee x | sh: any download up the pipeline
            source, _ = shell_words.strip_wrappers(feeder.words)
            if source and shell_words.base_name(source[0]) in _DOWNLOADERS:
                yield _risk("pipe_to_shell", " ".join(source) + " | " + evidence)
                break
            feeder = feeder.piped_from
    if name == "git":
        yield from _git_risks(args, evidence)
    if name == "chmod" and _world_writable(args):
        yield _risk("world_writable", evidence)
    if name == "dd":
        for a in args:
            if a.startswith("of=") and _DISK.match(a[3:]):
                yield _risk("disk_write", evidence)
            if a.startswith("of=") and _outside(a[3:], here, project, ignore_temp=True):
                yield _risk("outside_project", evidence)
    if name.startswith("mkfs") or name in ("fdisk", "parted", "wipefs", "sgdisk"):
        yield _risk("disk_write", evidence)
    if name in _WRITES_ALL or name in _WRITES_LAST:
        operands = shell_words.operands(args)
        if name in ("chmod", "chown", "chgrp") and operands:
            operands = operands[1:]  # the mode or the owner
        if name in _WRITES_LAST:
            operands = operands[-1:] if len(operands) >= 2 else []
        for path in operands:
            if _outside(path, here, project, ignore_temp=name not in ("rm", "rmdir", "shred")):
                yield _risk("outside_project", evidence)
                break
            if name == "shred" and _DISK.match(path):
                yield _risk("disk_write", evidence)


def _find_execs_rm(args: Sequence[str]) -> bool:
    for i, a in enumerate(args):
        runs = a in ("-exec", "-execdir", "-ok", "-okdir") and i + 1 < len(args)
        if runs and shell_words.base_name(args[i + 1]) in ("rm", "rmdir", "shred"):
            return True
    return False


_GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})


def _git_risks(args: list[str], evidence: str) -> Iterator[Risk]:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GIT_VALUE_OPTIONS else 1
    if i >= len(args):
        return
    sub, rest = args[i], args[i + 1 :]
    flags = shell_words.short_flags(rest)
    longs = {a.split("=", 1)[0] for a in rest if a.startswith("--")}
    if sub == "push" and (
        "f" in flags
        or longs & {"--force", "--force-with-lease", "--force-if-includes", "--mirror"}
        or any(a.startswith("+") for a in shell_words.operands(rest))
    ):
        yield _risk("force_push", evidence)
    if sub == "clean" and "f" in flags and ("d" in flags or "x" in flags):
        yield _risk("recursive_delete", evidence)
    if sub == "reset" and "--hard" in longs:
        yield _risk("discard_changes", evidence)
    if sub == "checkout" and (("--" in rest and "." in rest) or "f" in flags or "--force" in longs):
        yield _risk("discard_changes", evidence)
    if (
        sub == "restore"
        and not ({"--staged"} & longs or "S" in flags)
        and shell_words.operands(rest)
    ):
        yield _risk("discard_changes", evidence)


def _world_writable(args: Sequence[str]) -> bool:
    operands = shell_words.operands(args)
    if not operands:
        return False
    mode = operands[0]
    if re.fullmatch(r"[0-7]{3,4}", mode):
        return int(mode[-1]) & 2 == 2
    # symbolic: a+w, o+w, +w (all), ugo+rwx
    for clause in mode.split(","):
        m = re.fullmatch(r"([ugoa]*)([+=])([rwxXst]*)", clause)
        if m and "w" in m.group(3) and (not m.group(1) or set(m.group(1)) & {"o", "a"}):
            return True
    return False
