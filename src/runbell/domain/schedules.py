"""Scheduled work, decided purely: the cadence (cron syntax, read by ``croniter``), which
occurrence is due, what a state change may do, and whether the authority a run started
under still stands.

Times are parameters (no clock of its own) and always UTC: a cadence is read in UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from croniter import CroniterError, croniter

from runbell.domain.errors import Conflict, ValidationFailed

MODES = ("record_only", "webhook")
STATES = ("active", "paused", "revoked")
CADENCE_MAX = 200

#: state change → (the states it may start from, the state it leads to)
MOVES: dict[str, tuple[tuple[str, ...], str]] = {
    "pause": (("active",), "paused"),
    "resume": (("paused",), "active"),
    "revoke": (("active", "paused"), "revoked"),
}


def check_cadence(cadence: object, field: str = "cadence") -> str:
    """A cron expression (five fields, or ``@hourly``-style nicknames), stripped; a 422
    naming ``field`` otherwise."""
    if not isinstance(cadence, str) or not cadence.strip():
        raise ValidationFailed(
            f"{field} must be a cron expression, e.g. '0 9 * * 1-5'", field=field
        )
    text = " ".join(cadence.split())
    if len(text) > CADENCE_MAX:
        raise ValidationFailed(f"{field} is longer than {CADENCE_MAX} characters", field=field)
    # Five fields (minute hour day month weekday) or a nickname: croniter also takes six or
    # seven (seconds, years), which a schedule of runs has no use for.
    if not (text.startswith("@") or len(text.split()) == 5) or not croniter.is_valid(text):
        raise ValidationFailed(
            f"{field}: {text!r} is not a cron expression of five fields "
            "(minute hour day-of-month month day-of-week), e.g. '0 9 * * 1-5'",
            field=field,
        )
    try:
        next_after(text, _REFERENCE)
    except CroniterError as exc:  # e.g. '0 0 31 2 *': valid fields, no such day
        raise ValidationFailed(f"{field}: {text!r} never occurs", field=field) from exc
    return text


_REFERENCE = datetime(2000, 1, 1, tzinfo=UTC)


def authority_users(authority: Mapping[str, object] | None) -> list[str]:
    """The people an authority (a run's shape: ``{users, roles}``) names."""
    users = (authority or {}).get("users") or []
    return [str(u) for u in users] if isinstance(users, list) else []


def next_after(cadence: str, at: datetime) -> datetime:
    """The first occurrence strictly after ``at`` (UTC)."""
    found: datetime = croniter(cadence, at.astimezone(UTC)).get_next(datetime)
    return found.astimezone(UTC)


def latest_due(cadence: str, now: datetime) -> datetime:
    """The latest occurrence at or before ``now``: occurrences missed while nothing swept
    (an outage) are one firing, the latest, not a burst."""
    found: datetime = croniter(cadence, now.astimezone(UTC) + timedelta(seconds=1)).get_prev(
        datetime
    )
    return found.astimezone(UTC)


def move(state: str, action: str, schedule_id: str) -> str:
    """The state after ``action`` (pause | resume | revoke); 409 when it cannot apply."""
    allowed, to = MOVES[action]
    if state not in allowed:
        raise Conflict(f"schedule {schedule_id!r} is {state}; it cannot {action}", state=state)
    return to


def may_start(state: str, schedule_id: str) -> None:
    """A run may start under an active schedule only (409 otherwise)."""
    if state != "active":
        raise Conflict(
            f"schedule {schedule_id!r} is {state}: no new runs start under it", state=state
        )


@dataclass(frozen=True)
class AuthorityStanding:
    """Whether the authority a run started under still stands, and if not why."""

    revoked: bool
    reason: str | None


def standing(
    started_version: int | None, schedule_state: str, authority_version: int
) -> AuthorityStanding:
    """A run started under authority version ``started_version`` of a schedule now in
    ``schedule_state`` at ``authority_version``: revoked when the schedule was revoked or
    its authority changed since."""
    if schedule_state == "revoked":
        return AuthorityStanding(True, "the schedule that started this run was revoked")
    if started_version is not None and authority_version != started_version:
        return AuthorityStanding(
            True, "the schedule's authority changed after this run started under it"
        )
    return AuthorityStanding(False, None)
