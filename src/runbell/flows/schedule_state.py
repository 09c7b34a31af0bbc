"""Pause, resume or revoke a schedule (issue 18 item 6).

Invariants kept here:

- A paused or revoked schedule starts nothing: runs naming it are refused (409,
  ``flows.schedule_start``) and it fires nothing (its ``next_fire_at`` is cleared, and the
  sweep re-checks the state under the row lock). Resuming fires from the next occurrence
  after now: occurrences missed while paused are not fired late.
- Revoking is final, and flags every run started under the schedule (its authority no
  longer stands: ``flows.schedule_views.run_schedule``).
- Asking for the state a schedule is already in changes nothing (a retry is harmless);
  a move that cannot apply (resuming a revoked schedule) is a 409.
"""

from __future__ import annotations

from runbell.domain import schedules as rules
from runbell.domain.principal import Principal
from runbell.domain.text import public_text
from runbell.flows import schedule_views as views
from runbell.flows.context import Core
from runbell.flows.schedule_views import ScheduleView
from runbell.store import schedules as store


def change_state(
    core: Core, who: Principal, schedule_id: str, action: str, reason: str | None = None
) -> ScheduleView:
    """``action``: pause | resume | revoke."""
    with core.db.transaction() as tx:
        s = views.visible(tx.conn, who, schedule_id, for_update=True)
        views.check_manager(who, s.owner_user_id)
        target = rules.MOVES[action][1]
        if s.state != target:
            state = rules.move(s.state, action, s.id)
            fires = state == "active" and s.mode == "webhook"
            store.update(
                tx.conn,
                who.tenant_id,
                s.id,
                state=state,
                state_reason=public_text(reason, 200) if reason else None,
                next_fire_at=rules.next_after(s.cadence, tx.now) if fires else None,
                revoked_at=tx.now if state == "revoked" else None,
                updated_at=tx.now,
            )
        return views.schedule_view(tx.conn, store.require(tx.conn, who.tenant_id, s.id), full=True)
