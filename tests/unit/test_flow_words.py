"""web.flow_words: the flows' English sentences worded again for the reader (issue 19
item 6). English stays exactly the flows' words; German comes from the catalogue."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from runbell import i18n
from runbell.domain import cancellation, jobs, schedules
from runbell.domain.errors import Conflict
from runbell.web import flow_words
from runbell.web.flow_words import conflict_text


def refusal(call: object, *args: object) -> str:
    with pytest.raises(Conflict) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.detail


def test_english_is_left_as_the_flow_worded_it() -> None:
    for text in (
        "The run is no longer waiting for input (it is now completed).",
        refusal(schedules.move, "revoked", "pause", "sch_1"),
        jobs.dependency_text("replaced", "req-2"),
        "a text no template knows",
    ):
        assert flow_words.worded(text) == text


def test_german_words_the_values_too() -> None:
    with i18n.using("de"):
        assert (
            flow_words.worded("The run is no longer waiting for input (it is now completed).")
            == "Der Lauf wartet nicht mehr auf eine Eingabe (er ist jetzt abgeschlossen)."
        )
        assert (
            flow_words.worded(refusal(schedules.move, "revoked", "pause", "sch_1"))
            == "Der Zeitplan sch_1 ist widerrufen; er kann nicht pausiert werden"
        )
        assert flow_words.worded(jobs.dependency_text("replaced", "req-2")) == (
            "Hängt von einem Vorschlag ab, der durch eine neuere Version ersetzt wurde (req-2)"
        )
        # A time the flow wrote in UTC is shown in the reader's timezone, German style.
        assert conflict_text(
            "This request expired at 2026-12-01 12:00 UTC.", ZoneInfo("Europe/Berlin")
        ) == ("Diese Anfrage ist am 1. Dez. 2026, 13:00 MEZ abgelaufen.")
        assert flow_words.worded("a text no template knows") == "a text no template knows"


@pytest.mark.parametrize(
    "summary",
    [
        cancellation.outcome(None),
        cancellation.outcome("4 of 5 files pushed"),
        cancellation.outcome(
            None,
            tracked=True,
            counts={"confirmed": 9, "uncertain": 1},
            counts_text="9 confirmed, 1 uncertain",
            uncertain="op-7",
        ),
        cancellation.outcome(
            "done", tracked=True, counts={"confirmed": 2}, counts_text="2 confirmed"
        ),
    ],
)
def test_a_cancel_outcome_reads_as_stored_in_english_and_german_in_german(
    summary: cancellation.CancelSummary,
) -> None:
    assert flow_words.cancel_outcome(summary) == summary["text"]
    with i18n.using("de"):
        german = flow_words.cancel_outcome(summary)
    assert german is not None and german.startswith("Der Lauf hat vor dem Abschluss angehalten.")
    assert "Work the run" not in german
