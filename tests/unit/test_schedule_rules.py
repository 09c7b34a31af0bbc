"""The pure rules of scheduled work (runbell.domain.schedules): cadences, occurrences,
state moves and whether a run's authority still stands."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runbell.domain import schedules as rules
from runbell.domain.errors import Conflict, ValidationFailed

AT = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    "cadence", ["61 * * * *", "0 9 * * * *", "* * *", "", "   ", "0 0 31 2 *", "@reboot", 9]
)
def test_a_cadence_that_is_not_five_field_cron_or_never_occurs_is_refused(cadence: object) -> None:
    with pytest.raises(ValidationFailed) as refused:
        rules.check_cadence(cadence)
    assert refused.value.extra["field"] == "cadence"


def test_a_cadence_is_kept_with_its_blanks_collapsed() -> None:
    assert rules.check_cadence("  0  9 * *   1-5 ") == "0 9 * * 1-5"
    assert rules.check_cadence("@daily") == "@daily"


def test_occurrences() -> None:
    assert rules.next_after("0 9 * * 1-5", AT) == datetime(2026, 6, 2, 9, tzinfo=UTC)
    assert rules.latest_due("0 9 * * 1-5", AT) == AT  # on the occurrence itself
    friday = datetime(2026, 6, 5, 9, tzinfo=UTC)
    # Saturday evening: the latest due occurrence is Friday's, once.
    assert rules.latest_due("0 9 * * 1-5", datetime(2026, 6, 6, 18, tzinfo=UTC)) == friday


def test_moves() -> None:
    assert rules.move("active", "pause", "s") == "paused"
    assert rules.move("paused", "resume", "s") == "active"
    assert rules.move("paused", "revoke", "s") == "revoked"
    with pytest.raises(Conflict):
        rules.move("revoked", "resume", "s")
    rules.may_start("active", "s")
    for state in ("paused", "revoked"):
        with pytest.raises(Conflict):
            rules.may_start(state, "s")


def test_standing() -> None:
    assert rules.standing(1, "active", 1) == rules.AuthorityStanding(False, None)
    assert rules.standing(1, "paused", 1).revoked is False  # paused stops new runs only
    assert rules.standing(1, "active", 2).revoked is True
    assert rules.standing(1, "revoked", 1).revoked is True
