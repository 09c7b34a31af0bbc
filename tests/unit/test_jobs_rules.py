"""The pure rules of jobs (``domain.jobs``, ``domain.operations.outcome`` with
``done_when``): where a dependency stands and how it is said, what a link and a done_when
may be, and what a completion means when done_when names operations."""

from __future__ import annotations

import pytest

from runbell.domain.errors import ValidationFailed
from runbell.domain.jobs import (
    check_done_when,
    check_links,
    dependency_state,
    dependency_text,
    parse_link,
    unmet,
)
from runbell.domain.operations import Outcome, outcome


@pytest.mark.parametrize(
    ("state", "decision", "version", "wanted", "expected"),
    [
        ("pending", None, 1, 1, "pending"),
        ("answered", "approve", 1, 1, "approved"),
        ("answered", "reject", 1, 1, "rejected"),
        ("answered", "answer", 1, 1, "answered"),
        ("superseded", None, 1, 1, "replaced"),
        ("pending", None, 2, 1, "replaced"),  # a newer version of the same request
        ("cancelled", None, 1, 1, "cancelled"),
        ("expired", None, 1, 1, "expired"),
    ],
)
def test_where_a_dependency_stands(
    state: str, decision: str | None, version: int, wanted: int, expected: str
) -> None:
    assert dependency_state(state, decision, version, wanted) == expected


def test_the_sentences_a_dependent_run_shows() -> None:
    assert dependency_text("pending") == "Depends on a proposal that is not approved yet"
    assert dependency_text("approved") == "Depends on a proposal that was approved"
    assert dependency_text("replaced", "p-2") == (
        "Depends on a proposal that was replaced by a newer version (p-2)"
    )


def test_links_are_bounded_words_ids_and_display_urls() -> None:
    assert check_links([{"kind": "conversation", "id": "c:1"}]) == [
        {"kind": "conversation", "id": "c:1", "url": None}
    ]
    assert check_links(None) == []
    for bad in (
        [{"kind": "conversation", "id": "c", "url": "ftp://x.test/"}],
        [{"kind": "conversation", "id": "c", "url": "https://a:b@x.test/"}],
        [{"kind": "con versation", "id": "c"}],
        [{"kind": "conversation", "id": "c", "extra": 1}],
        [{"kind": "conversation", "id": "c\x07"}],
        [{"kind": "m", "id": str(n)} for n in range(51)],
    ):
        with pytest.raises(ValidationFailed):
            check_links(bad)
    assert parse_link("conversation:abc:def") == ("conversation", "abc:def")
    for bad_query in ("conversation", "conversation:", ":abc", "Conv:abc"):
        with pytest.raises(ValidationFailed):
            parse_link(bad_query)


def test_done_when_is_words_and_unique_operation_ids() -> None:
    assert check_done_when("ready") == {"text": "ready", "operations": []}
    assert check_done_when({"text": " ready ", "operations": ["a"]}) == {
        "text": "ready",
        "operations": ["a"],
    }
    assert check_done_when(None) is None
    for bad in ({"text": ""}, {"text": "x", "operations": ["a", "a"]}, {"operations": []}, 7):
        with pytest.raises(ValidationFailed):
            check_done_when(bad)


def test_a_completion_needs_what_done_when_names_confirmed() -> None:
    counts = {"confirmed": 2}
    assert outcome(counts).outcome is Outcome.VERIFIED
    missing = unmet(["t1", "t9"], {"t1": "confirmed", "t2": "confirmed"})
    assert missing == {"t9": None}
    done = outcome(counts, {}, missing)
    assert done.outcome is Outcome.NEEDS_REVIEW
    assert done.text == "2 confirmed; not done as done_when says: t9 never declared"
    # Confirmed absent settles a ledger, but the job needed the effect.
    assert unmet(["t1"], {"t1": "absent"}) == {"t1": "absent"}
    assert outcome({"absent": 1}, {}, {"t1": "absent"}).outcome is Outcome.NEEDS_REVIEW
    # Still in flight: unknown, never success.
    assert outcome({"sent": 1}, {}, {"t1": "sent"}).outcome is Outcome.UNKNOWN
    # Nothing unmet: the counts alone decide, as before.
    assert outcome(counts, {}, {}).outcome is Outcome.VERIFIED
