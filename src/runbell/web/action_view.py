"""An input request's action shaped for the page (``_action.html.j2``): what approving
lets happen, first and whole enough to decide on. Pure: the stored action and risks in,
template context out.

- a shell command as it will run (monospace, nothing before it), its directory after;
- a file write as its path and content, a file edit as a unified diff (lines marked
  added, removed, hunk, header) or as old/new strings;
- a web fetch as its URL with the host emphasised, and its method;
- a tool call as its server and tool, and its arguments as indented JSON.

Long text keeps its first lines on screen and the rest behind a "Show all" disclosure
(``<details>``: works without JavaScript), so the decision buttons stay on the first
screen of a phone.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from runbell.i18n import N_, _

# What stays on screen before "Show all": a phone screen holds the command, the risk
# line and the buttons together.
HEAD_LINES = 6
HEAD_CHARS = 600
DIFF_HEAD_LINES = 10

KIND_LABEL = {
    "shell": N_("Runs a command"),
    "file_write": N_("Writes a file"),
    "file_edit": N_("Edits a file"),
    "web_fetch": N_("Fetches a URL"),
    "mcp_tool": N_("Calls a tool"),
    "generic": N_("Uses a tool"),
}

#: The risk labels domain.actions words (the domain is pure and marks nothing), for the
#: catalogue: shown as ``_(label)`` (tests/unit/test_catalogues.py checks they match).
RISK_WORDS = (
    N_("Deletes recursively"),
    N_("Force-pushes (rewrites remote history)"),
    N_("Runs a script downloaded from the network"),
    N_("Writes outside the project directory"),
    N_("Makes files writable by everyone"),
    N_("Runs with elevated privileges"),
    N_("Writes to a raw disk or formats it"),
    N_("Discards uncommitted changes"),
    N_("Sends a request that may change something remotely"),
)


def cut(text: str, lines: int = HEAD_LINES, chars: int = HEAD_CHARS) -> dict[str, Any]:
    """``text`` as a head to show and, when it is longer, the whole behind "Show all"."""
    all_lines = text.splitlines()
    head = "\n".join(all_lines[:lines])
    if len(head) > chars:
        head = head[:chars]
    long = head != text.rstrip("\n")
    return {
        "head": head,
        "full": text,
        "cut": long,
        "lines": len(all_lines),
        "chars": len(text),
    }


def diff_lines(diff: str) -> list[dict[str, str]]:
    """A unified diff's lines, each with its kind (``add``, ``del``, ``hunk``, ``file``,
    ``ctx``) for styling; a screen reader hears the +/- that starts each line."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append({"kind": kind, "text": line})
    return out


def url_parts(url: str) -> dict[str, str]:
    """The URL split so the host can stand out: ``before`` (scheme and ``//``, any user
    info), ``host`` (with its port) and ``after`` (path, query, fragment)."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = ""
    host_at = url.find(netloc) if netloc else -1
    if host_at < 0:
        return {"before": "", "host": url, "after": ""}
    userinfo, _, hostport = netloc.rpartition("@")
    start = host_at + (len(userinfo) + 1 if userinfo else 0)
    return {
        "before": url[:start],
        "host": hostport,
        "after": url[start + len(hostport) :],
    }


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def action_view(action: Any, risks: Any) -> dict[str, Any] | None:
    """The preview's context, or None when the request carries no action."""
    if not isinstance(action, dict) or action.get("kind") not in KIND_LABEL:
        return None
    kind = action["kind"]
    out: dict[str, Any] = {"kind": kind, "label": _(KIND_LABEL[kind])}
    if kind == "shell":
        out["command"] = cut(str(action.get("command") or ""))
        out["cwd"] = action.get("cwd")
    elif kind == "file_write":
        out["path"] = action.get("path")
        content = action.get("content")
        out["content"] = cut(content) if isinstance(content, str) else None
    elif kind == "file_edit":
        out["path"] = action.get("path")
        diff = action.get("diff")
        if isinstance(diff, str):
            lines = diff_lines(diff)
            out["diff"] = {
                "head": lines[:DIFF_HEAD_LINES],
                "rest": lines[DIFF_HEAD_LINES:],
                "lines": len(lines),
            }
        else:
            out["old"] = cut(str(action.get("old") or ""), lines=4, chars=300)
            out["new"] = cut(str(action.get("new") or ""), lines=4, chars=300)
    elif kind == "web_fetch":
        out["url"] = url_parts(str(action.get("url") or ""))
        out["method"] = action.get("method") or "GET"
    else:
        out["server"] = action.get("server")
        out["tool"] = action.get("tool")
        arguments = action.get("arguments")
        out["arguments"] = cut(_json(arguments)) if arguments else None
    out["risks"] = [
        {"code": str(r.get("code")), "label": _(str(r.get("label"))), "evidence": r.get("evidence")}
        for r in (risks or [])
        if isinstance(r, dict)
    ]
    return out
