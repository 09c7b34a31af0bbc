"""The runs overview's pure parts: what a row's counts say, the query lists, the finished
group's cursor, and who may answer a run's request."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain import overview as rules
from runbell.domain.errors import ValidationFailed


@pytest.mark.parametrize(
    ("counts", "text"),
    [
        (
            {"confirmed": 9, "conflicts": 2, "being_checked": 1},
            "9 confirmed, 2 conflicts, 1 being checked",
        ),
        ({"done": 2, "total": 5, "unit": "test files"}, "2 done, 5 total (test files)"),
        ({"done": 2, "total": 5}, "2 done, 5 total"),
        ({"pages": 3.0}, "3 pages"),
        ({"ratio": 0.5}, "0.5 ratio"),
        ({"ok": True, "note": "x", "unit": "files"}, ""),
        ({}, ""),
        (None, ""),
        ("9 of 15", ""),
    ],
)
def test_counts_say_what_they_count(counts: object, text: str) -> None:
    assert rules.counts_text(counts) == text


@given(st.dictionaries(st.text(min_size=1, max_size=10), st.integers(0, 10**6), max_size=6))
def test_counts_are_never_n_of_m(counts: dict[str, int]) -> None:
    text = rules.counts_text(counts)
    assert text.count(",") >= len(counts) - 1 if counts else text == ""
    for name, value in counts.items():
        assert f"{value} {name.replace('_', ' ').strip()}" in text


def test_lists_are_repeatable_and_comma_separated() -> None:
    assert rules.parse_list(
        ["needs_you,stalled", "finished", "stalled"], rules.GROUPS, "group"
    ) == [
        "needs_you",
        "stalled",
        "finished",
    ]
    assert rules.parse_list(None, rules.GROUPS, "group") == []
    assert rules.parse_list([" , "], rules.STATES, "state") == []
    with pytest.raises(ValidationFailed) as err:
        rules.parse_list(["working,bogus"], rules.STATES, "state")
    assert err.value.extra.get("field", "state") == "state"
    assert "bogus" in err.value.detail


def test_the_cursor_round_trips_and_refuses_anything_else() -> None:
    at = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
    cursor = rules.encode_cursor(at, "run:with/odd chars")
    assert rules.decode_cursor(cursor) == (at, "run:with/odd chars")
    assert "=" not in cursor and "/" not in cursor and "+" not in cursor
    for bad in ("nonsense", "", "W10", rules.encode_cursor(at, "x")[:-3] + "!!!"):
        with pytest.raises(ValidationFailed):
            rules.decode_cursor(bad)


def test_who_may_answer() -> None:
    authority = {"users": [], "roles": ["admin"]}
    assert rules.may_answer("usr_o", "member", "usr_o", authority, named=False)
    assert rules.may_answer("usr_n", "member", "usr_o", authority, named=True)
    assert rules.may_answer("usr_a", "admin", "usr_o", authority, named=False)
    assert not rules.may_answer("usr_x", "owner", "usr_o", authority, named=False)
    assert not rules.may_answer(None, "admin", "usr_o", authority, named=True)
    assert not rules.may_answer("usr_x", "admin", "usr_o", None, named=False)
