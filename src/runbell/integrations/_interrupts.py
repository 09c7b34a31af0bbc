"""The pure part of the LangGraph integration: a thread's ids in Runbell, an interrupt's
value → the input request a person sees, and a Runbell answer → the value the graph
resumes with. No I/O and no LangGraph import, so it is tested alone.

An interrupt's value says what to ask (all keys optional)::

    interrupt("Delete 42 stale objects?")                 # an approval; generic action
    interrupt({"summary": "Deploy?", "command": "make deploy", "cwd": "/srv/app"})  # shell
    interrupt({"summary": "Call the API?", "tool": "refund", "arguments": {"id": 7}})
    interrupt({"summary": "Which region?", "options": ["eu", "us"]})      # a choice
    interrupt({"summary": "Commit message?", "kind": "text"})
    interrupt({"summary": "Run these?", "editable": {"schema": {...}, "value": [...]}})
    interrupt({"summary": "Write it?", "action": {"kind": "file_write", "path": "a.txt"}})

The whole value also goes to the request's sensitive ``details`` (cut short), which only
signed-in people see; the ``summary`` is the safe line shown everywhere.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runbell.client import Answer

__all__ = ["Question", "question", "request_id_for", "resume_value", "run_id_for"]

# The server's id rule (runbell.api.schemas.RUN_ID_PATTERN), repeated: the SDK side never
# imports the server. An id that breaks it is hashed instead.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@~-]{0,199}$")
REQUEST_KINDS = ("approval", "choice", "text")
ACTION_KINDS = ("shell", "file_write", "file_edit", "web_fetch", "mcp_tool", "generic")
MAX_SUMMARY = 300
MAX_TEXT = 4000
MAX_ITEMS = 50


def run_id_for(thread_id: str) -> str:
    """A thread's Runbell run id: the thread id itself when it is a valid run id, else a
    stable hash of it (the same thread always maps to the same run)."""
    if _ID.match(thread_id):
        return thread_id
    return "langgraph-" + hashlib.sha256(thread_id.encode()).hexdigest()[:40]


def request_id_for(run_id: str, interrupt_id: str) -> str:
    """One interrupt's input request id. LangGraph derives an interrupt's id from the
    checkpoint and the task, so the same interrupt, resumed again (a retry, or a replay
    from the same checkpoint, LangGraph issue #6663), maps to the same request and so to
    the one answer Runbell recorded for it."""
    rid = f"{run_id}.lg.{interrupt_id}"
    if _ID.match(rid):
        return rid
    return "lg-" + hashlib.sha256(f"{run_id}\0{interrupt_id}".encode()).hexdigest()[:48]


@dataclass(frozen=True)
class Question:
    """The input request an interrupt opens (the arguments of ``Client.ask``)."""

    summary: str
    kind: str = "approval"
    options: list[Any] | None = None
    action: dict[str, Any] | None = None
    editable: dict[str, Any] | None = None
    details: dict[str, Any] | None = None


def clip(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON the API takes: long strings cut, long lists and deep nesting
    bounded, anything else as its ``str``."""
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"
    if depth >= 6:
        return "…"
    if isinstance(value, Mapping):
        return {str(k): clip(v, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
    if isinstance(value, list | tuple):
        return [clip(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def _line(text: str) -> str:
    first = " ".join(text.split())
    return first if len(first) <= MAX_SUMMARY else first[: MAX_SUMMARY - 1] + "…"


def _text(data: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _action(data: Mapping[str, Any], node: str) -> dict[str, Any]:
    """What approving lets happen, as the value says: an explicit ``action``, the value
    itself when it is one, a ``command`` (shell), a ``tool`` call, else a generic action
    carrying the value."""
    if isinstance(data.get("action"), Mapping):
        return dict(clip(data["action"]))
    if data.get("kind") in ACTION_KINDS:
        return {k: clip(v) for k, v in data.items() if k not in ("summary", "question")}
    command = _text(data, "command")
    if command is not None:
        shell = {"kind": "shell", "command": command}
        cwd = _text(data, "cwd")
        return shell | {"cwd": cwd} if cwd else shell
    tool = _text(data, "tool")
    if tool is not None:
        arguments = data.get("arguments", data.get("args"))
        arguments = clip(arguments) if isinstance(arguments, Mapping) else {}
        return {"kind": "generic", "tool": tool, "arguments": arguments}
    rest = {k: v for k, v in data.items() if k not in ("summary", "question", "editable")}
    return {"kind": "generic", "tool": f"langgraph:{node}", "arguments": clip(rest)}


def question(value: Any, node: str, interrupt_id: str) -> Question:
    """The input request for one interrupt of node ``node`` (see the module for what a
    value may say)."""
    details = {"langgraph": {"node": node, "interrupt_id": interrupt_id}, "value": clip(value)}
    if isinstance(value, str) and value.strip():
        generic = {"kind": "generic", "tool": f"langgraph:{node}", "arguments": {"value": value}}
        return Question(_line(value), action=clip(generic), details=details)
    if not isinstance(value, Mapping):
        generic = {"kind": "generic", "tool": f"langgraph:{node}", "arguments": {"value": value}}
        return Question(f"{node} needs your input", action=clip(generic), details=details)
    summary = _line(
        _text(value, "summary", "question", "description") or f"{node} needs your input"
    )
    options = value.get("options")
    options = list(options) if isinstance(options, list | tuple) and options else None
    kind = value.get("kind") if value.get("kind") in REQUEST_KINDS else None
    kind = kind or ("choice" if options else "approval")
    editable = value.get("editable")
    return Question(
        summary,
        kind=kind,
        options=options if kind == "choice" else None,
        # An action says what approving lets happen: only an approval has one.
        action=_action(value, node) if kind == "approval" else None,
        editable=dict(editable) if kind == "approval" and isinstance(editable, Mapping) else None,
        details=details,
    )


def resume_value(answer: Answer) -> dict[str, Any]:
    """What ``interrupt()`` returns in the graph: the recorded answer, as plain JSON (it is
    stored in the checkpoint). ``approved`` is True only for an approval; ``value`` is the
    option id, the text, or the (possibly edited) approved value; ``outcome`` is
    ``answered``, ``expired``, ``cancelled`` or ``superseded``."""
    return {
        "outcome": answer.outcome,
        "approved": answer.approved,
        "decision": answer.decision,
        "value": answer.value,
        "edited": answer.edited,
        "answered_by": answer.answered_by,
        "request_id": answer.request_id,
    }
