"""``flows.views.iso``: how every view writes a time, with its memo of the last one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from runbell.flows.views import iso


def test_iso_writes_utc_with_a_z_and_other_zones_as_they_are() -> None:
    assert iso(None) is None
    assert iso(datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)) == "2024-05-06T07:08:09.123456Z"
    assert iso(datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)) == "2024-05-06T07:08:09Z"
    plus2 = timezone(timedelta(hours=2))
    assert iso(datetime(2024, 5, 6, 9, 8, 9, tzinfo=plus2)) == "2024-05-06T09:08:09+02:00"


def test_iso_remembers_the_last_value_by_identity_only() -> None:
    """The same instant in another zone, or an equal but distinct value, is written as
    itself, whatever was written just before."""
    now = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    there = now.astimezone(timezone(timedelta(hours=-5)))
    assert now == there
    for value, text in [
        (now, "2024-05-06T07:08:09Z"),
        (now, "2024-05-06T07:08:09Z"),
        (there, "2024-05-06T02:08:09-05:00"),
        (now, "2024-05-06T07:08:09Z"),
        (now.replace(microsecond=1), "2024-05-06T07:08:09.000001Z"),
        (there, "2024-05-06T02:08:09-05:00"),
    ]:
        assert iso(value) == text
