"""The run state machine of DESIGN §3: terminal states absorb, sequences only move forward."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.runs import (
    NON_TERMINAL,
    TERMINAL,
    AttentionType,
    RunState,
    attention_for,
    can_transition,
    is_terminal,
    judge,
)

ALLOWED = {
    ("queued", "working"),
    ("working", "input_required"),
    ("input_required", "working"),
    ("queued", "stopping"),
    ("working", "stopping"),
    ("input_required", "stopping"),
    *((s.value, t.value) for s in NON_TERMINAL for t in TERMINAL),
}


@pytest.mark.parametrize("current", [s.value for s in RunState])
@pytest.mark.parametrize("target", [s.value for s in RunState])
def test_transition_table_matches_the_design(current: str, target: str) -> None:
    """Exactly the transitions DESIGN §3 lists are allowed."""
    assert can_transition(current, target) == ((current, target) in ALLOWED)


@given(
    st.sampled_from(sorted(TERMINAL)),
    st.sampled_from(list(RunState)),
    st.none() | st.integers(0, 10**6),
)
def test_terminal_states_accept_nothing(
    current: RunState, target: RunState, seq: int | None
) -> None:
    """Invariant 2: a late or out-of-order signal never moves a finished run."""
    verdict = judge(current, 1, target, seq)
    assert verdict.verdict == "stale"
    assert not verdict.applies


@given(
    st.sampled_from(sorted(NON_TERMINAL)),
    st.sampled_from(list(RunState)),
    st.integers(0, 100),
    st.integers(0, 100),
)
def test_old_sequences_are_stale(
    current: RunState, target: RunState, applied: int, seq: int
) -> None:
    """A sequence that is not newer than the applied one is never applied."""
    verdict = judge(current, applied, target, seq)
    if seq <= applied:
        assert verdict.verdict == "stale"
    elif can_transition(current, target):
        assert verdict.applies


def test_stopping_runs_treat_live_reports_as_late() -> None:
    """A working report that arrives while a run stops is stale, not a runtime bug."""
    assert judge("stopping", None, "working", None).verdict == "stale"
    assert judge("queued", None, "input_required", None).verdict == "rejected"
    assert judge("working", None, "working", None).verdict == "stale"


def test_attention_types() -> None:
    """Unverified effects turn a completion into needs_review, never a success alert."""
    assert attention_for("completed", None) is AttentionType.COMPLETED
    assert attention_for("completed", True) is AttentionType.COMPLETED
    assert attention_for("completed", False) is AttentionType.NEEDS_REVIEW
    assert attention_for("failed", None) is AttentionType.FAILED
    assert attention_for("input_required", None) is AttentionType.INPUT_REQUIRED
    assert attention_for("cancelled", None) is AttentionType.CANCELLED
    assert attention_for("working", None) is None
    assert attention_for("stopping", None) is None


def test_a_run_that_asked_waits_again_only_through_an_open_request() -> None:
    # Issue 20 row 2: a bare `input_required` after the run's request was settled is late
    # news of that wait (Claude Code's permission_prompt Notification), never a new alert.
    from runbell.domain.runs import judge_reported_wait

    settled = judge_reported_wait(has_asked=True, request_open=False)
    assert settled is not None and settled.verdict == "stale" and not settled.applies
    assert "no input request is open" in settled.reason
    # A run that never asked may report a bare wait (a question in its own terminal)…
    assert judge_reported_wait(has_asked=False, request_open=False) is None
    # … and an open request is the wait itself.
    assert judge_reported_wait(has_asked=True, request_open=True) is None


@pytest.mark.parametrize("state", [*RunState, *(s.value for s in RunState)])
def test_is_terminal_for_a_state_and_its_name(state: RunState | str) -> None:
    assert is_terminal(state) is (RunState(state) in TERMINAL)


def test_is_terminal_refuses_what_is_not_a_state() -> None:
    with pytest.raises(ValueError):
        is_terminal("finished")
