"""Scheduled digests: a digest sent at a wall-clock time in the recipient's timezone.

A ``digest`` rule (or a throttle that folds into a digest) may say ``digest_at = "09:00"``
and optionally ``digest_days = [0, 1, 2, 3, 4]`` (0 = Monday … 6 = Sunday, as quiet hours
count them) instead of ``digest_window_s``: its items wait until the next such time in
the recipient's IANA timezone. The window an item falls in runs from the previous
scheduled time to the next, both as UTC instants; its start is the digest's identity
(``flows.digests``), so every process computes the same window for the same moment.

Local times are turned into instants with :mod:`zoneinfo`, date by date, so 09:00 stays
09:00 on both sides of a DST change (08:00 UTC the day before the Europe/Berlin spring
change, 07:00 UTC the day of it). A time a DST change skips (02:30 on the spring night)
is read with the offset before the change, i.e. the hour after; a time it repeats, the
first time. Pure: ``now`` is passed in.

Example::

    s = DigestSchedule.parse("09:00", None, "r")
    start, end = s.window(datetime(2026, 3, 29, 12, 0, tzinfo=UTC), "Europe/Berlin")
    assert (start.hour, end.hour) == (7, 7)  # 09:00 CEST, today and tomorrow
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

from runbell.domain.errors import ValidationFailed
from runbell.domain.quiet_hours import zone

#: ``H:MM`` or ``HH:MM``, 0:00 to 23:59 (as quiet hours write them).
_HHMM = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])")
PATTERN = r"^([01]?[0-9]|2[0-3]):([0-5][0-9])$"


def _day(value: Any) -> int | None:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 6:
        return None
    return value


@dataclass(frozen=True)
class DigestSchedule:
    at: time
    days: frozenset[int] | None = None  # None: every day

    @classmethod
    def parse(cls, at: Any, days: Any, rule_id: str) -> DigestSchedule:
        found = _HHMM.fullmatch(at) if isinstance(at, str) else None
        if found is None:
            raise ValidationFailed(
                f"rule {rule_id!r}: digest_at must be a local time HH:MM, got {at!r}",
                field="digest_at",
            )
        if days is None:
            return cls(time(int(found[1]), int(found[2])))
        parsed = [_day(d) for d in days] if isinstance(days, list) else [None]
        if not parsed or None in parsed:
            raise ValidationFailed(
                f"rule {rule_id!r}: digest_days lists days 0 (Monday) to 6 (Sunday)",
                field="digest_days",
            )
        return cls(
            time(int(found[1]), int(found[2])), frozenset(d for d in parsed if d is not None)
        )

    def occurrences(self, around: datetime, tz: str) -> list[datetime]:
        """The scheduled instants (UTC) of the local dates from a day before ``around``
        to eight days after, in order: enough to hold the previous and the next."""
        local = around.astimezone(zone(tz))
        out = []
        for back in range(-1, 9):
            day = local.date() + timedelta(days=back)
            if self.days is not None and day.weekday() not in self.days:
                continue
            at = datetime.combine(day, self.at, tzinfo=local.tzinfo)
            out.append(at.astimezone(UTC))
        return sorted(out)

    def window(self, now: datetime, tz: str) -> tuple[datetime, datetime]:
        """``[start, end)``: the scheduled time at or before ``now`` and the next after it."""
        times = self.occurrences(now, tz)
        end = min(t for t in times if t > now)
        before = [t for t in times if t <= now]
        if before:
            start = max(before)
        else:  # the previous is more than a day back (a weekly schedule): look a week back
            start = max(t for t in self.occurrences(now - timedelta(days=7), tz) if t <= now)
        return start, end

    def as_text(self) -> str:
        return self.at.strftime("%H:%M")
