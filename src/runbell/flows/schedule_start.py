"""Start a run under a schedule (``PUT /v1/runs/{id}`` with ``schedule: {id}``): the run
records the schedule, the instruction version and the authority in force when it started
(issue 18 item 6). Called by ``flows.runs`` inside its transaction.

Invariants kept here:

- A run starts only under an active schedule: paused or revoked is a 409, and the
  schedule row is locked while the run is created, so a revoke that commits first is seen.
- What the run records never changes afterwards: a later instruction version or a new
  authority flags the run (``flows.schedule_views.run_schedule``), it does not rewrite it.
- Another tenant's schedule, or one the caller may not see, is a 422 naming
  ``schedule.id`` (the run is the resource here; the schedule's existence does not leak).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runbell.domain import schedules as rules
from runbell.domain.errors import ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import RunChanges
from runbell.flows import schedule_views as views
from runbell.flows.inputs import RunFields, ScheduleRef
from runbell.store import schedules as store
from runbell.store.db import Tx


@dataclass(frozen=True)
class StartedUnder:
    """The schedule a new run starts under, and what the run records of it."""

    schedule_id: str
    owner_user_id: str
    authority: dict[str, Any] | None
    authority_version: int
    instruction_version: int

    def columns(self) -> RunChanges:
        return {
            "schedule_id": self.schedule_id,
            "schedule_instruction_version": self.instruction_version,
            "schedule_authority": {
                "version": self.authority_version,
                "authority": self.authority,
            },
        }


def started_under(tx: Tx, who: Principal, ref: ScheduleRef | None) -> StartedUnder | None:
    """The active schedule ``ref`` names (locked), or None when the body names none."""
    if ref is None:
        return None
    schedule_id = ref.get("id") if isinstance(ref, dict) else None
    if not isinstance(schedule_id, str) or not schedule_id:
        raise ValidationFailed("schedule must be {id: <schedule id>}", field="schedule.id")
    s = store.get(tx.conn, who.tenant_id, schedule_id, for_update=True)
    if s is None or not views.may_see(who, s):
        raise ValidationFailed(f"schedule.id: no schedule {schedule_id!r}", field="schedule.id")
    rules.may_start(s.state, s.id)
    return StartedUnder(
        schedule_id=s.id,
        owner_user_id=s.owner_user_id,
        authority=s.authority,
        authority_version=s.authority_version,
        instruction_version=s.instruction_version,
    )


def with_defaults(body: RunFields, under: StartedUnder) -> RunFields:
    """The run's body with the schedule's owner and authority where it names none: the
    authority that justified starting is the schedule's."""
    out = RunFields(**body)
    if not out.get("owner"):
        out["owner"] = under.owner_user_id
    if out.get("authority") is None and under.authority is not None:
        out["authority"] = under.authority
    return out


def check_unchanged(body: RunFields, schedule_id: str | None) -> None:
    """An existing run's schedule is what it started under: naming another is a 422."""
    ref = body.get("schedule")
    if ref is not None and ref.get("id") != schedule_id:
        raise ValidationFailed(
            "schedule is set when a run is created; it cannot change", field="schedule.id"
        )
