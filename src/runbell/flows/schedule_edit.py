"""Change a schedule: a new standing instruction (a new version; every old one is kept),
a new authority (a new authority version), a new cadence or name (issue 18 item 6).

Invariants kept here:

- A run records the instruction version and the authority in force when it started; an
  edit never rewrites them. A changed authority flags the runs started under the old one
  (``flows.schedule_views.run_schedule``).
- A revoked schedule is not edited (409); a cadence that is not cron is a 422 naming
  ``cadence``; only an admin or the schedule's owner edits it (403); another tenant's
  schedule answers 404. Nothing partial is committed.
"""

from __future__ import annotations

from typing import Any

from runbell.domain import schedules as rules
from runbell.domain.errors import Conflict
from runbell.domain.principal import Principal
from runbell.flows import schedule_views as views
from runbell.flows.context import Core
from runbell.flows.inputs import ScheduleEdit
from runbell.flows.schedule_views import ScheduleView
from runbell.store import schedules as store


def edit_schedule(
    core: Core, who: Principal, schedule_id: str, changes: ScheduleEdit
) -> ScheduleView:
    cadence = rules.check_cadence(changes["cadence"]) if "cadence" in changes else None
    text = views.check_instruction(changes["instruction"]) if "instruction" in changes else None
    with core.db.transaction() as tx:
        s = views.visible(tx.conn, who, schedule_id, for_update=True)
        views.check_manager(who, s.owner_user_id)
        if s.state == "revoked":
            raise Conflict(f"schedule {schedule_id!r} is revoked; it is not edited", state=s.state)
        values: dict[str, Any] = {}
        if text is not None:
            version = s.instruction_version + 1
            store.add_instruction(tx.conn, who.tenant_id, s.id, version, text, who.actor(), tx.now)
            values["instruction_version"] = version
        if "authority" in changes and changes["authority"] != s.authority:
            views.check_authority(tx, who.tenant_id, rules.authority_users(changes["authority"]))
            values.update(authority=changes["authority"], authority_version=s.authority_version + 1)
        if cadence is not None and cadence != s.cadence:
            values["cadence"] = cadence
            if s.mode == "webhook" and s.state == "active":
                values["next_fire_at"] = rules.next_after(cadence, tx.now)
        if "name" in changes and changes["name"] != s.name:
            values["name"] = changes["name"]
        if values:
            store.update(tx.conn, who.tenant_id, s.id, updated_at=tx.now, **values)
        return views.schedule_view(tx.conn, store.require(tx.conn, who.tenant_id, s.id), full=True)
