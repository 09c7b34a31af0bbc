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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runbell.domain.errors import ValidationFailed
from runbell.domain.records import QuietHours

#: ``H:MM`` or ``HH:MM``, 0:00 to 23:59 (the API's schema states the same pattern).
_HHMM = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])")


def _hhmm(value: Any, name: str) -> time:
    if not isinstance(value, str):
        raise ValidationFailed(f"quiet hours {name} must be HH:MM", field=f"quiet_hours.{name}")
    found = _HHMM.fullmatch(value)
    if found is None:
        raise ValidationFailed(
            f"quiet hours {name} must be HH:MM, got {value!r}", field=f"quiet_hours.{name}"
        )
    return time(int(found[1]), int(found[2]))


def _day(value: Any) -> int | None:
    """A weekday number 0..6; a JSON ``3.0`` is ``3`` (JSON Schema's integer)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    day = int(value)
    return day if 0 <= day <= 6 else None


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
            parsed = [_day(d) for d in days] if isinstance(days, list) else [None]
            if None in parsed:
                raise ValidationFailed(
                    "days are 0 (Monday) to 6 (Sunday)", field="quiet_hours.days"
                )
            return cls(start, end, frozenset(d for d in parsed if d is not None))
        return cls(start, end)

    def as_dict(self) -> QuietHours:
        out: QuietHours = {
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
        }
        if self.days is not None:
            out["days"] = sorted(self.days)
        return out


def quiet_windows(raw: Sequence[Mapping[str, Any]] | None) -> list[QuietWindow] | None:
    """The windows a person sent (``{start, end, days?}`` each), checked; None: unchanged.
    ``ValidationFailed`` names the first that is wrong."""
    return None if raw is None else [QuietWindow.parse(w) for w in raw]


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
