"""``runbell hook claude-code``: one Claude Code hook event, read from stdin, reported.

Claude Code runs the command with the hook's JSON on stdin and reads stdout as its
answer, so this prints nothing at all, except the documented ``PermissionRequest``
decision when the person answered in Runbell, and, with ``--gate``, the ``PreToolUse``
decision of a gated call in a headless session (:mod:`runbell.hooks.gate`). Any failure
(bad input, no configuration, the server down) exits 0 silently: Claude Code goes on as if
no hook ran (a gated call: ``ask``, so nothing runs that nobody allowed).

The session's turn number lives in a small state file, one per session, under
``RUNBELL_HOOK_STATE_DIR`` (default ``$XDG_STATE_HOME/runbell/hooks``, else
``~/.local/state/runbell/hooks``), read and written under a lock so that hooks running in
parallel agree on it (see :mod:`runbell.hooks.mapping` for why turns are runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from runbell.hooks.mapping import HookPlan, PayloadError, Turn, plan_claude_code, safe_id

# A session's state file is kept this long after its last use, then pruned when a new
# session starts (Claude Code has no event we could rely on at a session's very end).
KEEP_STATE_S = 30 * 24 * 3600


def state_dir(environ: Mapping[str, str]) -> Path:
    if environ.get("RUNBELL_HOOK_STATE_DIR"):
        return Path(environ["RUNBELL_HOOK_STATE_DIR"]).expanduser()
    base = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "runbell" / "hooks"


def prune(directory: Path, now: float, keep: float = KEEP_STATE_S) -> int:
    """Remove the state (and lock) files of sessions unused for ``keep`` seconds."""
    removed = 0
    for path in directory.glob("claude-code-*"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > keep:
                path.unlink()
                removed += 1
    return removed


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; parallel hooks are rare there
        yield
        return
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def plan_with_turn(
    payload: Mapping[str, Any],
    environ: Mapping[str, str],
    planner: Callable[[Mapping[str, Any], Turn], HookPlan] = plan_claude_code,
) -> HookPlan:
    """Plan the event against the session's turn state, and store the new state."""
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        raise PayloadError("session_id is missing")
    directory = state_dir(environ)
    path = directory / f"claude-code-{safe_id(session)}.json"
    if payload.get("hook_event_name") == "SessionStart" and directory.is_dir():
        prune(directory, time.time())
    with _locked(path):
        try:
            turn = Turn.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            turn = Turn()
        plan = planner(payload, turn)
        if plan.turn is not None and plan.turn != turn:
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(plan.turn.to_json()))
            tmp.replace(path)
    return plan


def handle(stdin_text: str, environ: Mapping[str, str], gates: Sequence[str] = ()) -> str:
    """Report one hook event; return what to print (usually nothing). ``gates``: the
    ``--gate`` patterns of a ``PreToolUse`` hook (:mod:`runbell.hooks.gate`)."""
    from runbell.hooks import gate, report

    payload = json.loads(stdin_text)
    if not isinstance(payload, dict):
        raise PayloadError("the hook input is not a JSON object")
    chosen = gate.parse_gates(gates)
    entrypoint = environ.get("CLAUDE_CODE_ENTRYPOINT")
    plan = plan_with_turn(
        payload, environ, lambda p, turn: gate.plan_gate(p, turn, chosen, entrypoint)
    )
    if not plan.actions and plan.approval is None:
        return ""
    try:
        with report.client(environ) as rb:
            report.carry_out(rb, plan)
            if plan.approval is None:
                return ""
            output = report.decide(rb, plan.approval, report.hook_timeout(environ))
    except Exception as exc:
        if plan.approval is None or plan.approval.event != "PreToolUse":
            raise
        # A gated call with Runbell out of reach: Claude Code's own flow decides (in
        # `claude -p`: the call does not run), never an allow nobody gave.
        report.log(environ, f"hook failed: {type(exc).__name__}: {exc}")
        return json.dumps(gate.no_answer("Runbell could not be reached"))
    return "" if output is None else json.dumps(output)
