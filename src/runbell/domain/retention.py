"""How long each history table keeps its rows: the tables, their floors, and a tenant's
override checked and merged with the process defaults. Pure: no I/O, ``now`` passed in.

A period is a whole number of days. Some tables have a floor a tenant cannot go under:
inbound event ids and Idempotency-Key records stay at least :data:`DEDUPE_FLOOR_DAYS`
(three days, the longest provider retry window the documentation names), so a retried
signal or request within it is still answered as the duplicate it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from runbell.domain.errors import ValidationFailed

#: Every table retention prunes, in the order a sweep prunes them: children before the
#: rows they point at (attempts before their delivery, deliveries before their
#: notification), so a parent is only removed once nothing refers to it.
TABLES: tuple[str, ...] = (
    "feed_events",
    "inbound_events",
    "idempotency_keys",
    "receipts",
    "delivery_attempts",
    "deliveries",
    "notifications",
    "transitions",
    "mismatches",
    "schedule_firings",
    "operator_events",
)

DEDUPE_FLOOR_DAYS = 3
MAX_DAYS = 36_500  # a hundred years: "keep it", without overflowing a datetime

FLOORS: Mapping[str, int] = {
    "inbound_events": DEDUPE_FLOOR_DAYS,
    "idempotency_keys": DEDUPE_FLOOR_DAYS,
}

#: Tables whose rows belong to no tenant in particular: only the process default applies.
GLOBAL_ONLY = frozenset({"operator_events"})


def floor_days(table: str) -> int:
    return FLOORS.get(table, 1)


def parse_override(raw: Mapping[str, object]) -> dict[str, int]:
    """A tenant's override, checked: ``{table: days}`` with every table known, every
    value a whole number of days between the table's floor and :data:`MAX_DAYS`.

    A ``None`` value removes that table's override (the default applies again).

    >>> parse_override({"notifications": 90, "feed_events": None})
    {'notifications': 90}
    """
    out: dict[str, int] = {}
    for table, value in raw.items():
        if table not in TABLES or table in GLOBAL_ONLY:
            known = ", ".join(t for t in TABLES if t not in GLOBAL_ONLY)
            raise ValidationFailed(
                f"{table!r} is not a table a tenant can set retention for; one of: {known}",
                field=table,
            )
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationFailed(f"{table}: days must be a whole number", field=table)
        low = floor_days(table)
        if not low <= value <= MAX_DAYS:
            why = " (the dedupe window for retries)" if table in FLOORS else ""
            raise ValidationFailed(
                f"{table}: days must be between {low}{why} and {MAX_DAYS}, not {value}",
                field=table,
            )
        out[table] = value
    return out


def merge(current: Mapping[str, int] | None, change: Mapping[str, object]) -> dict[str, int]:
    """``current`` with ``change`` applied (``None`` values clear one table)."""
    checked = parse_override(change)
    merged = {k: v for k, v in (current or {}).items() if k in TABLES}
    for table in change:
        merged.pop(table, None)
    merged.update(checked)
    return dict(sorted(merged.items()))


def effective(
    defaults: Mapping[str, timedelta], override: Mapping[str, int] | None
) -> dict[str, timedelta]:
    """Each table's period for one tenant: its override where it has one, else the default
    (a stored override below a floor, from an older version, is raised to the floor)."""
    out = dict(defaults)
    for table, days in (override or {}).items():
        if table in out and table not in GLOBAL_ONLY:
            out[table] = timedelta(days=max(int(days), floor_days(table)))
    return out


def cutoffs(periods: Mapping[str, timedelta], now: datetime) -> dict[str, datetime]:
    """Rows older than these instants may go (subject to each table's guards)."""
    return {table: now - period for table, period in periods.items()}
