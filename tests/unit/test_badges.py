"""A run's badge comes from its verified state and its ledger (issue 18 item 7)."""

from __future__ import annotations

import pytest

from runbell.domain.badges import Badge, badge


@pytest.mark.parametrize(
    ("state", "outcome", "counts", "key", "label"),
    [
        ("working", None, {}, "state-working", "Working"),
        ("input_required", None, {}, "state-input_required", "Waiting for input"),
        ("failed", None, {"confirmed": 2}, "state-failed", "Failed"),
        ("cancelled", None, {"not_started": 3}, "state-cancelled", "Cancelled"),
        ("completed", None, {}, "state-completed", "Completed"),
        ("completed", "verified", {"confirmed": 12}, "state-completed", "Completed"),
        (
            "completed",
            "needs_review",
            {"confirmed": 9, "conflict": 2},
            "completed-conflicts",
            "Completed with conflicts",
        ),
        (
            "completed",
            "needs_review",
            {"confirmed": 9, "failed": 1},
            "completed-conflicts",
            "Completed with conflicts",
        ),
        (
            "completed",
            "needs_review",
            {"confirmed": 9, "uncertain": 1},
            "outcome-unknown",
            "Outcome unknown",
        ),
        ("completed", "unknown", {"confirmed": 1, "sent": 1}, "outcome-unknown", "Outcome unknown"),
        (
            "completed",
            "needs_review",
            {"confirmed": 9, "conflict": 2, "uncertain": 1},
            "needs-review",
            "Needs review",
        ),
        ("completed", "needs_review", {}, "needs-review", "Needs review"),
        ("completed", "needs_review", {"confirmed": 3}, "needs-review", "Needs review"),
    ],
)
def test_the_badge_never_says_more_than_the_ledger_knows(
    state: str, outcome: str | None, counts: dict[str, int], key: str, label: str
) -> None:
    shown = badge(state, outcome, counts)
    assert (shown.key, shown.label) == (key, label)
    assert shown.settled is key.startswith("state-")


def test_the_badge_says_why_in_the_ledgers_own_words() -> None:
    seed = badge("completed", "needs_review", {"confirmed": 9, "conflict": 2, "uncertain": 1})
    assert seed == Badge("needs-review", "Needs review", "9 confirmed, 2 conflicts, 1 uncertain")
    doubted = badge("completed", "needs_review", {})
    assert doubted.because == "the agent reported that its effects are not verified"
    clean_but_doubted = badge("completed", "needs_review", {"confirmed": 3})
    assert clean_but_doubted.because == (
        "3 confirmed; the agent reported that its effects are not verified"
    )
    assert badge("completed", "verified", {"confirmed": 3}).because is None
