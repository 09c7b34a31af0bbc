"""The line a cancelled run shows (domain.cancellation.outcome): it always says the kept
work stays, never that anything was undone, and says what stays uncertain — or that
nothing records it — in every combination (DESIGN §2 invariant 16)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.cancellation import (
    KEPT_NOT_UNDONE,
    NOT_SAID,
    NOT_TRACKED,
    NOTHING_UNCERTAIN,
    TEXT_MAX,
    outcome,
)

# Claims a cancellation must never make about work that landed.
UNDO_CLAIMS = re.compile(r"\b(undone|reverted|rolled back|restored|nothing happened)\b", re.I)
words = st.text(alphabet=st.characters(categories=("L", "N", "Zs")), min_size=1, max_size=300)


def ours(text: str, *quoted: str | None) -> str:
    """The line without the runtime's own words (they may say anything)."""
    for q in quoted:
        if q:
            text = text.replace(q.rstrip(". "), "")
    return text


@given(
    kept=st.none() | words,
    uncertain=st.none() | words,
    counts_text=st.none() | words,
    tracked=st.booleans(),
)
def test_the_line_never_claims_an_undo_and_fits_a_notification(
    kept: str | None, uncertain: str | None, counts_text: str | None, tracked: bool
) -> None:
    said = outcome(kept, uncertain=uncertain, counts_text=counts_text, tracked=tracked)
    text = said["text"]
    assert len(text) <= TEXT_MAX
    assert text.startswith("The run stopped before finishing. " + KEPT_NOT_UNDONE)
    assert not UNDO_CLAIMS.search(ours(text, kept, uncertain, counts_text))
    assert (said["kept"], said["uncertain"], said["tracked"]) == (kept, uncertain, tracked)


@pytest.mark.parametrize(
    ("kept", "uncertain", "tracked", "says", "never"),
    [
        (None, None, False, [NOT_SAID, NOT_TRACKED], [NOTHING_UNCERTAIN]),
        (
            "4 of 5 files pushed",
            None,
            False,
            ["Kept: 4 of 5 files pushed.", NOT_TRACKED],
            [NOTHING_UNCERTAIN],
        ),
        (
            "4 of 5 files pushed.",
            None,
            True,
            ["Kept: 4 of 5 files pushed.", NOTHING_UNCERTAIN],
            [NOT_TRACKED],
        ),
        (
            None,
            "the fourth update",
            True,
            [NOT_SAID, "Still uncertain: the fourth update."],
            [NOTHING_UNCERTAIN, NOT_TRACKED],
        ),
        (
            "3 rows",
            "row 4",
            False,
            ["Kept: 3 rows.", "Still uncertain: row 4."],
            [NOTHING_UNCERTAIN],
        ),
    ],
    ids=["nothing-known", "kept-untracked", "kept-tracked-certain", "uncertain", "both"],
)
def test_what_it_says_for_each_case(
    kept: str | None, uncertain: str | None, tracked: bool, says: list[str], never: list[str]
) -> None:
    text = outcome(kept, uncertain=uncertain, tracked=tracked)["text"]
    for part in says:
        assert part in text
    for part in never:
        assert part not in text


def test_counts_come_first_as_a_sentence() -> None:
    text = outcome(
        "migrated 9 tables",
        tracked=True,
        counts={"confirmed": 9, "not_started": 3},
        counts_text="9 confirmed, 3 not started",
    )["text"]
    assert "does not undo it. 9 confirmed, 3 not started. Kept: migrated 9 tables." in text
    assert text.endswith(NOTHING_UNCERTAIN)


def test_a_long_account_is_cut_to_fit() -> None:
    text = outcome("x" * 900)["text"]
    assert len(text) == TEXT_MAX and text.endswith("…")
