"""Run states and the transition rule — pure, no I/O.

A run moves through ``queued → working ⇄ input_required → … → completed | failed |
cancelled`` (DESIGN §3). Terminal states absorb everything (invariant 2). The single
entry point is :func:`judge`, which says what to do with a reported state given the run
as it is now; the store applies the verdict inside the one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class RunState(StrEnum):
    QUEUED = "queued"
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    STOPPING = "stopping"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL: frozenset[RunState] = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED})
NON_TERMINAL: frozenset[RunState] = frozenset(set(RunState) - TERMINAL)
STATE_NAMES: tuple[str, ...] = tuple(s.value for s in RunState)
MAX_SEQUENCE = 2**63 - 1  # runtime sequences are stored as BIGINT

_ALLOWED: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.WORKING, RunState.STOPPING} | TERMINAL),
    RunState.WORKING: frozenset({RunState.INPUT_REQUIRED, RunState.STOPPING} | TERMINAL),
    RunState.INPUT_REQUIRED: frozenset({RunState.WORKING, RunState.STOPPING} | TERMINAL),
    RunState.STOPPING: TERMINAL,
    RunState.COMPLETED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.CANCELLED: frozenset(),
}

# MCP task status for each run state (DESIGN §3).
MCP_STATUS: dict[RunState, str] = {
    RunState.QUEUED: "working",
    RunState.WORKING: "working",
    RunState.STOPPING: "working",
    RunState.INPUT_REQUIRED: "input_required",
    RunState.COMPLETED: "completed",
    RunState.FAILED: "failed",
    RunState.CANCELLED: "cancelled",
}


# The states' names (a RunState is its name: StrEnum), for the checks a signal makes
# several times; anything else still goes through RunState(), which refuses it.
_TERMINAL_NAMES: frozenset[str] = frozenset(s.value for s in TERMINAL)
_NON_TERMINAL_NAMES: frozenset[str] = frozenset(s.value for s in NON_TERMINAL)


def is_terminal(state: RunState | str) -> bool:
    if state in _TERMINAL_NAMES:
        return True
    if state in _NON_TERMINAL_NAMES:
        return False
    return RunState(state) in TERMINAL  # an unknown name raises ValueError, as it did


def can_transition(current: RunState | str, target: RunState | str) -> bool:
    return RunState(target) in _ALLOWED[RunState(current)]


Verdict = Literal["apply", "stale", "rejected"]


@dataclass(frozen=True)
class Judgement:
    """What to do with a reported state: apply it, or record it as stale / rejected."""

    verdict: Verdict
    reason: str

    @property
    def applies(self) -> bool:
        return self.verdict == "apply"


def judge(
    current: RunState | str,
    current_sequence: int | None,
    target: RunState | str,
    sequence: int | None,
) -> Judgement:
    """Decide whether a reported ``target`` state may be applied to a run in ``current``.

    ``stale`` means late or out of order (terminal run, old sequence, already there, a
    report arriving while the run stops); ``rejected`` means a transition the state machine
    never allows between live states (a runtime bug, not lateness). Neither is applied.
    """
    cur, tgt = RunState(current), RunState(target)
    if cur in TERMINAL:
        return Judgement("stale", f"run is {cur.value}; terminal states accept nothing")
    if sequence is not None and current_sequence is not None and sequence <= current_sequence:
        return Judgement(
            "stale", f"sequence {sequence} is not newer than applied {current_sequence}"
        )
    if cur == tgt:
        return Judgement("stale", f"run is already {cur.value}")
    if tgt in _ALLOWED[cur]:
        return Judgement("apply", f"{cur.value} -> {tgt.value}")
    if cur == RunState.STOPPING:
        return Judgement("stale", f"run is stopping; {tgt.value} arrived late")
    return Judgement("rejected", f"{cur.value} -> {tgt.value} is not an allowed transition")


def judge_reported_wait(has_asked: bool, request_open: bool) -> Judgement | None:
    """A reported ``input_required`` (a signal, not an input request) that :func:`judge`
    would apply, on a run that has ``has_asked`` through input requests: stale unless one
    is ``request_open``. None: no objection.

    A run that asks through input requests waits through them: opening one moves it to
    ``input_required``, settling it (answered, expired, superseded, cancelled) moves it on.
    A bare report of a wait after that is late news of the wait just settled — Claude
    Code sends ``Notification`` ``permission_prompt`` about 6 s after its dialog, and its
    hook's report reached Runbell after the person had answered there (issue 20 row 2) —
    and applying it would raise a second "needs your input" for a question nobody is
    asking any more. A new wait comes with a new request. A run that never asked may
    still report a bare wait (a question asked in the agent's own terminal).
    """
    if has_asked and not request_open:
        return Judgement(
            "stale",
            "no input request is open: the wait this reports was settled in Runbell",
        )
    return None


class AttentionType(StrEnum):
    INPUT_REQUIRED = "input_required"
    FAILED = "failed"
    COMPLETED = "completed"
    NEEDS_REVIEW = "needs_review"
    STALLED = "stalled"
    CANCELLED = "cancelled"
    MISMATCH = "mismatch"
    DIGEST = "digest"
    PROGRESS = "progress"


def attention_for(target: RunState | str, effects_verified: bool | None) -> AttentionType | None:
    """The attention type a transition into ``target`` raises, or None for none.

    A completion whose effects are reported unverified, partial or conflicting
    (``effects_verified is False``) is ``needs_review``, never a success alert.
    """
    tgt = RunState(target)
    if tgt == RunState.INPUT_REQUIRED:
        return AttentionType.INPUT_REQUIRED
    if tgt == RunState.FAILED:
        return AttentionType.FAILED
    if tgt == RunState.CANCELLED:
        return AttentionType.CANCELLED
    if tgt == RunState.COMPLETED:
        return AttentionType.NEEDS_REVIEW if effects_verified is False else AttentionType.COMPLETED
    return None
