"""Quiet hours: is ``now`` inside one of a person's windows, and when does it end?

Windows are local wall-clock times in the person's IANA timezone, e.g.
``{"start": "22:00", "end": "07:00"}`` (crossing midnight) with optional ``days``
(0 = Monday … 6 = Sunday, the day the window *starts*). Pure: ``now`` is passed in.

Example::

    w = [QuietWindow.parse({"start": "22:00", "end": "07:00"})]
    end = quiet_until(datetime(2026, 1, 5, 23, 0, tzinfo=UTC), w, "UTC")
    assert end == datetime(2026, 1, 6, 7, 0, tzinfo=UTC)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runbell.domain.errors import ValidationFailed


def _hhmm(value: Any, name: str) -> time:
    if not isinstance(value, str):
        raise ValidationFailed(f"quiet hours {name} must be HH:MM", field=f"quiet_hours.{name}")
    try:
        hour, minute = value.split(":")
        return time(int(hour), int(minute))
    except ValueError as exc:
        raise ValidationFailed(
            f"quiet hours {name} must be HH:MM, got {value!r}", field=f"quiet_hours.{name}"
        ) from exc


@dataclass(frozen=True)
class QuietWindow:
    start: time
    end: time
    days: frozenset[int] | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> QuietWindow:
        start, end = _hhmm(raw.get("start"), "start"), _hhmm(raw.get("end"), "end")
        if start == end:
            raise ValidationFailed(
                "a quiet window needs different start and end", field="quiet_hours.end"
            )
        days = raw.get("days")
        if days is not None:
            if not isinstance(days, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 6 for d in days
            ):
                raise ValidationFailed(
                    "days are 0 (Monday) to 6 (Sunday)", field="quiet_hours.days"
                )
            return cls(start, end, frozenset(days))
        return cls(start, end)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
        }
        if self.days is not None:
            out["days"] = sorted(self.days)
        return out


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationFailed(f"unknown IANA timezone {name!r}", field="timezone") from exc


def quiet_until(now: datetime, windows: Sequence[QuietWindow], tz: str) -> datetime | None:
    """The UTC end of the quiet window ``now`` falls in, or None when not quiet."""
    local = now.astimezone(zone(tz))
    ends: list[datetime] = []
    for w in windows:
        # A window that started today or yesterday (crossing midnight) may cover now.
        for back in (0, 1):
            day = local.date() - timedelta(days=back)
            if w.days is not None and day.weekday() not in w.days:
                continue
            start = datetime.combine(day, w.start, tzinfo=local.tzinfo)
            end_day = day if w.end > w.start else day + timedelta(days=1)
            end = datetime.combine(end_day, w.end, tzinfo=local.tzinfo)
            if start <= local < end:
                ends.append(end)
    if not ends:
        return None
    return max(ends).astimezone(UTC)
