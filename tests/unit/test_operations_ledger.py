"""The operations state machine, honest counts and what a completion means (pure)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.operations import (
    COUNT_ORDER,
    NO_OPERATIONS,
    OP_STATES,
    Outcome,
    allowed_next,
    can_move,
    counts_text,
    move_refusal,
    outcome,
)

WORDS = {
    "confirmed": ("confirmed", "confirmed"),
    "absent": ("confirmed absent", "confirmed absent"),
    "conflict": ("conflict", "conflicts"),
    "failed": ("failed", "failed"),
    "uncertain": ("uncertain", "uncertain"),
    "unresolved": ("unresolved after lookup", "unresolved after lookup"),
    "sent": ("sent without a reply yet", "sent without a reply yet"),
    "planned": ("planned", "planned"),
    "not_started": ("not started", "not started"),
}


def test_the_example_reads_as_the_issue_says() -> None:
    counts = {"confirmed": 9, "conflict": 2, "uncertain": 1, "not_started": 3}
    assert counts_text(counts) == "9 confirmed, 2 conflicts, 1 uncertain, 3 not started"
    assert counts_text({"uncertain": 1, "conflict": 2, "confirmed": 9}) == (
        "9 confirmed, 2 conflicts, 1 uncertain"
    )


def test_every_combination_in_fixed_order_zero_omitted_plural_right() -> None:
    """Every category absent, singular or plural, in every combination (3**9 of them)."""
    for present in itertools.product((0, 1, 2), repeat=len(COUNT_ORDER)):
        counts = dict(zip(COUNT_ORDER, present, strict=True))
        expected = [
            f"{n} {WORDS[state][0] if n == 1 else WORDS[state][1]}"
            for state, n in counts.items()
            if n
        ]
        assert counts_text(counts) == (", ".join(expected) or NO_OPERATIONS), counts


@given(st.dictionaries(st.sampled_from(COUNT_ORDER), st.integers(0, 10_000)))
def test_never_a_fraction_and_every_nonzero_category_named_once(counts: dict[str, int]) -> None:
    text = counts_text(counts)
    assert " of " not in text and "/" not in text
    parts = [] if text == NO_OPERATIONS else text.split(", ")
    assert len(parts) == sum(1 for n in counts.values() if n)
    assert sum(int(p.split(" ", 1)[0]) for p in parts) == sum(counts.values())
    named = [p.split(" ", 1)[1] for p in parts]
    order = [s for s in COUNT_ORDER if counts.get(s)]
    assert named == [WORDS[s][0] if counts[s] == 1 else WORDS[s][1] for s in order]


def test_unknown_or_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown"):
        counts_text({"confirmd": 1})
    with pytest.raises(ValueError, match="negative"):
        counts_text({"confirmed": -1})


def test_the_state_machine() -> None:
    assert allowed_next("planned") == ("sent", "not_started")
    assert allowed_next("sent") == ("confirmed", "conflict", "failed", "uncertain")
    assert allowed_next("uncertain") == ("confirmed", "absent", "unresolved")
    assert allowed_next("unresolved") == ("confirmed", "absent")
    for final in ("confirmed", "conflict", "failed", "absent", "not_started"):
        assert allowed_next(final) == ()
        assert "final" in (move_refusal(final, "sent") or "")
    assert not can_move("planned", "confirmed")  # a reply needs a send first
    assert not can_move("sent", "planned")  # history does not go backwards
    assert not can_move("uncertain", "sent")  # never retried as if nothing happened
    assert move_refusal("sent", "absent") == (
        "sent -> absent is not allowed; from sent an operation moves to "
        "confirmed or conflict or failed or uncertain"
    )
    for a, b in itertools.product(OP_STATES, OP_STATES):
        assert (move_refusal(a, b) is None) == can_move(a, b)


def test_what_a_completion_means() -> None:
    assert outcome({}).outcome is Outcome.VERIFIED
    assert outcome({"confirmed": 4, "absent": 1}).outcome is Outcome.VERIFIED
    review = outcome(
        {"confirmed": 9, "conflict": 2, "uncertain": 1},
        {"conflict": ["op-10", "op-11"], "uncertain": ["op-12"]},
    )
    assert review.outcome is Outcome.NEEDS_REVIEW
    assert review.text == (
        "9 confirmed, 2 conflicts, 1 uncertain; conflicts: op-10, op-11; uncertain: op-12"
    )
    unknown = outcome({"confirmed": 1, "sent": 2}, {"sent": ["a", "b"]})
    assert unknown.outcome is Outcome.UNKNOWN
    assert "outcome unknown" in unknown.text and "a, b" in unknown.text
    assert outcome({"confirmed": 1, "not_started": 1}).outcome is Outcome.NEEDS_REVIEW
    many = outcome({"conflict": 7}, {"conflict": [f"c{i}" for i in range(7)]})
    assert many.text.endswith("c0, c1, c2, c3, c4 and 2 more")
