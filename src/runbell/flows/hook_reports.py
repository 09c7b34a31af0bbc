"""HTTP hooks (issue 20 item 2): a Claude Code or Codex hook event, POSTed to
``/v1/hooks/{runtime}``, carried out on the server exactly as ``runbell hook …`` carries
it out through the SDK.

The pure part is the command hook's own (:mod:`runbell.hooks.mapping`,
:mod:`runbell.hooks.gate`): the payload becomes a :class:`HookPlan`, whose runs,
signals and progress go through the same flows as ``PUT /v1/runs/{id}``,
``POST …/signals`` and ``POST …/progress``, and whose approval opens the same input
request as ``POST …/input-requests`` (the same id, summary, details, action preview and
editable value). What differs is where Claude Code's turn number lives: a command hook
keeps it in a local file; here it is read from the runs themselves — a session's turns
are ``cc-<session>``, ``cc-<session>.2``, … created in order, so the last one that
exists is the current turn, finished once its run is terminal.

The face waits for the person's answer (:func:`ended`, re-read when the tenant's feed
moves) and turns it into the hook's answer with
:func:`runbell.hooks.gate.answer_output`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from runbell.domain import capabilities
from runbell.domain.errors import Conflict, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import ReportedError
from runbell.domain.runs import is_terminal
from runbell.domain.signals import Signal
from runbell.flows import input_requests, runs, signals
from runbell.flows.context import Core
from runbell.flows.inputs import RequestBody, RunFields
from runbell.flows.ownership import actor_of
from runbell.hooks.mapping import (
    Approval,
    EnsureRun,
    HookPlan,
    HookSignal,
    Progress,
    Turn,
    claude_turn_run,
    event_id,
)
from runbell.store import input_requests as request_store
from runbell.store import runs as run_store

#: A session with more turns than this is not probed further (2**20: never in practice).
MAX_TURN = 1 << 20


@dataclass(frozen=True)
class Ended:
    """How a hook's input request ended (its state is no longer ``pending``)."""

    state: str  # answered | expired | superseded | cancelled
    decision: str | None
    value: Any
    edited: bool


def claude_turn(core: Core, who: Principal, session_id: str) -> Turn:
    """The session's current turn, read from its runs: the highest ``n`` whose run
    exists (found in O(log n) look-ups), finished when that run is terminal."""
    who.require(capabilities.REPORT)
    with core.db.read() as conn:

        def state(n: int) -> str | None:
            run = run_store.get_run(conn, who.tenant_id, claude_turn_run(session_id, n))
            return None if run is None else run.state

        if state(1) is None:
            return Turn()
        low, high = 1, 2
        while high < MAX_TURN and state(high) is not None:
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            if state(middle) is None:
                high = middle
            else:
                low = middle
        last = state(low)
    return Turn(low, last is not None and is_terminal(last))


def _signal(core: Core, who: Principal, action: HookSignal) -> None:
    source = signals.remembered_source(core, who) or signals.api_source(core, who)
    signal = Signal(
        event_id=action.event_id,
        state=action.state,
        reason=action.reason,
        error=cast(ReportedError, action.error) if action.error else None,
        actor=actor_of(who),
    )
    signals.accept_signal(core, who.tenant_id, source, action.run_id, signal, who=who)


def _ensure(core: Core, who: Principal, action: EnsureRun, owner: str | None) -> None:
    fields: RunFields = {
        "title": action.title,
        "kind": action.kind,
        "metadata": action.metadata,
        "notify_on_complete": True,
    }
    if action.details is not None:
        fields["details"] = action.details
    try:
        created: RunFields = {**fields, "state": action.state}
        if owner:
            created["owner"] = owner
        run, _ = runs.put_run(core, who, action.run_id, created)
    except ValidationFailed as exc:
        if exc.extra.get("field") != "state":
            raise
        try:
            run, _ = runs.put_run(core, who, action.run_id, fields)  # exists in another state
        except Conflict:
            return  # finished: later signals are recorded as stale
    except Conflict:
        return
    if action.state == "working" and run.state == "queued":
        start = event_id(action.run_id, {}, "start")
        _signal(core, who, HookSignal(action.run_id, "working", start, "started"))


def carry_out(core: Core, who: Principal, plan: HookPlan, owner: str | None) -> None:
    """The plan's runs (created for ``owner``, an id or email), signals and progress, in
    order (``runbell.hooks.report``'s)."""
    for action in plan.actions:
        if isinstance(action, EnsureRun):
            _ensure(core, who, action, owner)
        elif isinstance(action, HookSignal):
            _signal(core, who, action)
        elif isinstance(action, Progress):
            runs.record_progress(core, who, action.run_id, action.message, None)


def ask(core: Core, who: Principal, approval: Approval, wait_s: float) -> None:
    """Open the approval's input request, expiring when the hook stops waiting. Asked
    before under the same id (Claude Code retried the hook): that request is waited on."""
    body: RequestBody = {
        "input_request_id": approval.request_id,
        "kind": "approval",
        "summary": approval.summary,
        "details": approval.details,
        "expires_at": core.db.clock() + timedelta(seconds=wait_s),
        "blocks_work": True,
        "action": approval.action,
        "editable": approval.editable,
    }
    try:
        input_requests.open_request(core, who, approval.run_id, body)
    except Conflict:
        if ended(core, who, approval) is None and not _exists(core, who, approval):
            raise


def _exists(core: Core, who: Principal, approval: Approval) -> bool:
    with core.db.read() as conn:
        req = request_store.get(conn, who.tenant_id, approval.request_id)
    return req is not None and req.run_id == approval.run_id


def ended(core: Core, who: Principal, approval: Approval) -> Ended | None:
    """How the approval's request ended, or None while it is pending (or missing)."""
    who.require(capabilities.ASK)
    with core.db.read() as conn:
        req = request_store.get(conn, who.tenant_id, approval.request_id)
    if req is None or req.run_id != approval.run_id or req.state == "pending":
        return None
    return Ended(req.state, req.decision, req.value, bool(req.edited))


def asked_in_terminal(core: Core, who: Principal, approval: Approval) -> None:
    """Nobody answered in time: the agent's own flow decides now, so the run is no longer
    waiting on Runbell (best effort, as in the command hook)."""
    marker = event_id(approval.run_id, {"request": approval.request_id}, "asked")
    _signal(
        core, who, HookSignal(approval.run_id, "working", marker, "asked in the terminal instead")
    )
