"""The pure steps of a transition (``flows.transitions.apply``) and of raising attention
(``flows.attention.raise_attention``), one decision each. The steps that write are
tested one by one on both databases in tests/integration/test_transition_writes.py, and
through the flows by the rest of tests/integration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runbell.domain.policy import Decision
from runbell.domain.runs import AttentionType
from runbell.flows.attention import RequestLink, notification_row, policy_facts
from runbell.flows.completion import Judged
from runbell.flows.transitions import TransitionRequest, attention_of, error_facts, run_changes
from runbell.store.runs import new_run

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def move(state: str, **fields: Any) -> TransitionRequest:
    base: dict[str, Any] = {
        "sequence": None,
        "source_id": None,
        "event_id": None,
        "reason": None,
        "error": None,
        "effects_verified": None,
    }
    return TransitionRequest(state=state, **{**base, **fields})


def test_a_move_sets_state_version_and_time() -> None:
    changes = run_changes(new_run(started_at=NOW), move("input_required"), 4, NOW)
    assert changes == {"state": "input_required", "version": 4, "updated_at": NOW}


def test_the_first_working_move_starts_the_run_once() -> None:
    assert run_changes(new_run(started_at=None), move("working"), 2, NOW)["started_at"] == NOW
    earlier = NOW - timedelta(hours=1)
    assert "started_at" not in run_changes(new_run(started_at=earlier), move("working"), 3, NOW)


def test_a_terminal_move_records_how_it_stopped() -> None:
    error = {"code": "E1", "retryable": True}
    changes = run_changes({}, move("failed", reason="disk full", error=error), 5, NOW)
    assert changes["finished_at"] == NOW
    assert changes["stop_reason"] == "disk full"
    assert changes["error"] == error


def test_a_report_merges_into_the_one_before_and_a_sequence_is_kept() -> None:
    run = new_run(report={"files": 3, "tests": "ok"})
    changes = run_changes(run, move("working", report={"files": 4}, sequence=9), 2, NOW)
    assert changes["report"] == {"files": 4, "tests": "ok"}
    assert changes["sequence"] == 9


@pytest.mark.parametrize(
    ("state", "verified", "judged", "expected"),
    [
        ("completed", None, None, AttentionType.COMPLETED),
        ("completed", False, None, AttentionType.NEEDS_REVIEW),
        ("working", None, None, None),
        # The ledger's judgment wins over the state's (an uncertain operation).
        ("completed", None, Judged({}, "needs_review", attention="needs_review"), "needs_review"),
        ("completed", None, Judged({}, None, attention=None), AttentionType.COMPLETED),
    ],
)
def test_what_a_move_asks_of_people(
    state: str, verified: bool | None, judged: Judged | None, expected: Any
) -> None:
    assert attention_of(state, verified, judged) == expected


def test_error_facts_are_false_unless_the_error_says_so() -> None:
    assert error_facts(None) == {
        "error_retryable": False,
        "error_user_action": False,
        "data_inconsistent": False,
    }
    assert error_facts({"retryable": True})["error_retryable"] is True


def test_a_linked_request_adds_its_facts_and_nothing_else_changes() -> None:
    facts = {"effects_verified": None}
    assert policy_facts(facts, None) is facts
    linked = policy_facts(facts, RequestLink("req-1", NOW, blocks_work=False))
    assert linked == {"effects_verified": None, "blocks_work": False, "has_expiry": True}


RUN = new_run(
    tenant_id="ten_1",
    run_id="r-1",
    owner_user_id="usr_1",
    subject={"type": "pr", "id": "42", "version": "abc"},
)


def decision(**fields: Any) -> Decision:
    return Decision(**{"kind": "push", "urgency": "high", "rule_id": "r", "inputs": {}, **fields})


def test_a_notification_row_is_neutral_and_names_what_it_is_about() -> None:
    row = notification_row(
        RUN, "input_required", 3, decision(), "x" * 600, RequestLink("req-1", None), NOW
    )
    assert row["id"].startswith("ntf")
    assert row["summary"] == "A run needs your input"  # never the run's own words (inv. 11)
    assert row["subject_version"] == "pr:42:abc"
    assert row["input_request_id"] == "req-1"
    assert len(row["reason"]) == 500
    assert (row["recipient_user_id"], row["transition_version"], row["state"]) == (
        "usr_1",
        3,
        "open",
    )


def test_a_notification_expires_with_its_request_before_the_policy() -> None:
    later = NOW + timedelta(minutes=5)
    by_policy = notification_row(RUN, "failed", 2, decision(expires_after_s=60), None, None, NOW)
    assert by_policy["expires_at"] == NOW + timedelta(seconds=60)
    by_request = notification_row(
        RUN, "input_required", 2, decision(expires_after_s=60), None, RequestLink("q", later), NOW
    )
    assert by_request["expires_at"] == later
    assert (
        notification_row(RUN, "failed", 2, decision(urgency=None), "", None, NOW)["urgency"]
        == "low"
    )
