"""Carry out a :class:`~runbell.hooks.mapping.HookPlan` through the SDK, and ask for an
approval: the I/O half of the hooks.

Everything here may fail (the server is down, the key is wrong): the callers in
:mod:`runbell.hooks.claude_code` and :mod:`runbell.hooks.codex` catch it, log it (to
``RUNBELL_HOOK_LOG`` if set, never the terminal) and exit 0 without printing, so the
agent carries on as if no hook ran — for a permission prompt, its own dialog appears.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runbell.client import Client, RetryPolicy
from runbell.client.errors import Conflict, ValidationFailed
from runbell.hooks.gate import answer_output
from runbell.hooks.mapping import (
    Approval,
    EnsureRun,
    HookPlan,
    HookSignal,
    Progress,
    event_id,
)

# The wait for a person's answer to a permission prompt (seconds). The agent shows its
# own dialog only after the hook returns, so this is how long the terminal waits: keep
# it well under the hook's own `timeout` (the installed snippet gives it 30 s more).
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 3000.0
# Reporting hooks run before the agent goes on: a short request timeout and two tries.
HTTP_TIMEOUT = 5.0
RETRY = RetryPolicy(attempts=2, base_delay=0.2, max_delay=1.0)


def hook_timeout(environ: Mapping[str, str]) -> float:
    """``RUNBELL_HOOK_TIMEOUT`` in seconds (default 120), bounded to 1 … 3000."""
    raw = environ.get("RUNBELL_HOOK_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        value = DEFAULT_TIMEOUT
    return min(max(value, 1.0), MAX_TIMEOUT)


def log(environ: Mapping[str, str], line: str) -> None:
    """One line to ``RUNBELL_HOOK_LOG`` (if set). Never to stdout or stderr: the agent
    reads stdout as the hook's answer."""
    path = environ.get("RUNBELL_HOOK_LOG")
    if not path:
        return
    try:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # Private like every file Runbell writes: a failure line may name a run or a host.
        fd = os.open(Path(path).expanduser(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {line}\n")
    except OSError:
        pass


def client(environ: Mapping[str, str]) -> Client:
    return Client.from_env(timeout=HTTP_TIMEOUT, retry=RETRY, environ=environ)


def ensure_run(rb: Client, action: EnsureRun) -> None:
    fields: dict[str, Any] = {
        "title": action.title,
        "kind": action.kind,
        "metadata": action.metadata,
        "notify_on_complete": True,
    }
    if action.details is not None:
        fields["details"] = action.details
    try:
        # Creates it in the wanted state, or (the usual case) finds it already so.
        run = rb.put_run(action.run_id, state=action.state, **fields)
    except ValidationFailed as exc:
        if exc.field != "state":
            raise
        try:
            run = rb.put_run(action.run_id, **fields)  # it exists in another state
        except Conflict:
            return  # finished: nothing to edit, later signals are recorded as stale
    except Conflict:
        return
    if action.state == "working" and run.state == "queued":
        rb.signal(
            action.run_id,
            "working",
            event_id=event_id(action.run_id, {}, "start"),
            reason="started",
        )


def carry_out(rb: Client, plan: HookPlan) -> None:
    for action in plan.actions:
        if isinstance(action, EnsureRun):
            ensure_run(rb, action)
        elif isinstance(action, HookSignal):
            rb.signal(
                action.run_id,
                action.state,
                event_id=action.event_id,
                reason=action.reason,
                error=action.error,
            )
        elif isinstance(action, Progress):
            rb.progress(action.run_id, action.message)


def decide(rb: Client, approval: Approval, timeout: float) -> dict[str, Any] | None:
    """Put the prompt to the person and wait up to ``timeout`` seconds: the documented
    output for the answer (:func:`runbell.hooks.gate.answer_output`: a PermissionRequest
    allow or deny, a gated PreToolUse allow, deny or ask), or None (a PermissionRequest
    with no answer in time, replaced by a newer prompt, the run moved on) so the agent
    shows its own dialog."""
    answer = rb.ask(
        approval.run_id,
        approval.summary,
        kind="approval",
        request_id=approval.request_id,
        details=approval.details,
        action=approval.action,
        expires_in=timeout,
        timeout=timeout,
        editable=approval.editable,
    )
    output = answer_output(
        approval, answer.outcome, answer.decision, answer.value, bool(answer.edited)
    )
    if answer.outcome == "answered":
        return output
    if answer.outcome in ("timeout", "expired"):
        # The person answers in the terminal now: the run is no longer waiting on Runbell.
        # Best effort: the hook stays silent either way.
        with contextlib.suppress(Exception):
            rb.signal(
                approval.run_id,
                "working",
                event_id=event_id(approval.run_id, {"request": approval.request_id}, "asked"),
                reason="asked in the terminal instead",
            )
    return output


def environment() -> Mapping[str, str]:
    return os.environ
