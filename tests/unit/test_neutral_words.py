"""What a person reads about a notification is worded in their language when shown or
sent (flows.neutral_words): the stored English summary, a digest's count, the push's
title, body and buttons. Nothing of the run is added in any language (invariant 11)."""

from __future__ import annotations

from typing import Any, cast

from runbell import i18n
from runbell.domain import digests
from runbell.domain.records import Notification
from runbell.flows import neutral_words as words


def note(attention: str, summary: str, inputs: dict[str, Any] | None = None) -> Notification:
    return cast(
        Notification,
        {"attention_type": attention, "summary": summary, "inputs": inputs or {}},
    )


def test_a_stored_summary_is_worded_for_its_reader() -> None:
    failed = note("failed", "A run failed")
    assert words.summary(failed) == "A run failed"
    with i18n.using("de"):
        assert words.summary(failed) == "Ein Lauf ist fehlgeschlagen"
        assert words.push_title(failed) == "Ein Lauf ist fehlgeschlagen"
        assert words.push_body(failed).startswith("Ein Lauf wurde mit einem Fehler beendet.")
        # A summary nobody marked (an older row, a runtime's words) is shown as stored.
        assert words.summary(note("failed", "Something else")) == "Something else"


def test_a_digest_counts_in_the_readers_language_with_plural_forms() -> None:
    kinds = ["completed", "completed", "completed"]
    three = note("digest", digests.summary(kinds), {"attention_types": {"completed": 3}})
    one = note("digest", digests.summary(["failed"]), {"attention_types": {"failed": 1}})
    assert words.summary(three) == digests.summary(kinds) == "3 runs finished"
    assert words.summary(one) == digests.summary(["failed"]) == "1 update on your runs"
    with i18n.using("de"):
        assert words.summary(three) == "3 Läufe sind fertig"
        assert words.summary(one) == "1 Neuigkeit zu Ihren Läufen"
        assert words.push_body(three) == "3 Läufe sind fertig. Öffnen Sie Runbell, um sie zu sehen."


def test_push_buttons_are_worded_and_stay_neutral() -> None:
    buttons = (("approve", "Approve"), ("snooze", "Snooze 1 h"), ("snooze", "Snooze 10 min"))
    assert words.button_titles(buttons) == buttons
    with i18n.using("de"):
        assert words.button_titles(buttons) == (
            ("approve", "Genehmigen"),
            ("snooze", "1 Std. schlummern"),
            ("snooze", "10 Min. schlummern"),
        )
        assert words.retracted() == ("Erledigt", "Das braucht Ihre Aufmerksamkeit nicht mehr.")


def test_dates_and_numbers_in_the_readers_way() -> None:
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    at = datetime(2026, 7, 1, 12, 5, 9, tzinfo=UTC)
    berlin = ZoneInfo("Europe/Berlin")
    assert i18n.format_time(at, "en", berlin) == "1 Jul 2026, 14:05 CEST"
    assert i18n.format_time(at, "de", berlin) == "1. Juli 2026, 14:05 MESZ"
    assert i18n.format_time(at, "de", berlin, seconds=True) == "1. Juli 2026, 14:05:09 MESZ"
    assert i18n.format_number(1234.5, "de") == "1.234,5"
    assert i18n.format_number(1234.5, "en") == "1,234.5"
    assert i18n.negotiate("de-AT,de;q=0.9") == "de"
    assert i18n.negotiate("*") == "en"
    assert i18n.negotiate("en;q=0, de;q=0.1") == "de"
    assert i18n.negotiate("de;q=oops") == "en"  # an unreadable quality counts as 0
    assert i18n.normalize("de_CH") == "de" and i18n.normalize("xx") == "en"


def test_operation_counts_in_english_are_the_domains_words() -> None:
    from runbell.domain.badges import badge
    from runbell.domain.operations import COUNT_ORDER, counts_text
    from runbell.web import run_page, wording

    assert wording.operation_counts({}) == counts_text({})
    for n in (1, 2):
        for state in COUNT_ORDER:
            assert wording.operation_counts({state: n}) == counts_text({state: n})
    counts = {"confirmed": 9, "conflict": 2, "uncertain": 1}
    assert wording.operation_counts(counts) == counts_text(counts)
    assert wording.operation_counts({"mystery": 1}) is None  # the stored text shows
    with i18n.using("de"):
        assert wording.operation_counts(counts) == "9 bestätigt, 2 Konflikte, 1 unsicher"
    doubted = badge("completed", "needs_review", {"confirmed": 1}).because
    assert doubted is not None and run_page.AGENT_DOUBTED in doubted
