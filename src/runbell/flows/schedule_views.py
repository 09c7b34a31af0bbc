"""Schedules as callers see them: read one, list them, who may see or change one, and the
schedule a run started under as its run view shows it (issue 18 item 6).

Invariants kept here: tenant isolation — another tenant's schedule, or one a plain member
does not own, answers 404; a schedule's signing secret is never shown after creation
(``flows.schedule_create`` returns it once). The authority a run started under is flagged
when it was later revoked or changed (``domain.schedules.standing``).
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from sqlalchemy.engine import Connection

from runbell.domain import schedules as rules
from runbell.domain.errors import Forbidden, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import Run
from runbell.flows.context import Core
from runbell.flows.trail import members
from runbell.flows.views import iso
from runbell.store import accounts, runs
from runbell.store import schedules as store
from runbell.store.db import Tx
from runbell.store.schedules import Schedule


class InstructionView(TypedDict):
    version: int
    text: str
    created_by: dict[str, str] | None
    created_at: str | None


class FiringView(TypedDict):
    due_at: str | None
    webhook_id: str
    instruction_version: int
    authority_version: int
    status: str
    status_code: int | None
    error: str | None
    settled_at: str | None


class ScheduleView(TypedDict):
    id: str
    name: str | None
    owner: str
    state: str
    state_reason: str | None
    mode: str
    cadence: str
    url: str | None
    authority: dict[str, Any] | None
    authority_version: int
    instruction: InstructionView
    next_fire_at: str | None
    created_at: str | None
    updated_at: str | None
    revoked_at: str | None
    versions: NotRequired[list[InstructionView]]  # one schedule's read: every version
    firings: NotRequired[list[FiringView]]  # one schedule's read: the latest firings
    secret: NotRequired[str]  # shown once: when made


class ScheduleList(TypedDict):
    schedules: list[ScheduleView]
    next_cursor: str | None


class StartedRun(TypedDict):
    """A run a schedule started, as the schedule's page lists it."""

    run_id: str
    title: str | None
    state: str
    instruction_version: int | None
    created_at: str | None


class SchedulesPage(TypedDict):
    """The schedules page: the list, each one's latest runs, and who the ids are."""

    schedules: list[ScheduleView]
    next_cursor: str | None
    runs: dict[str, list[StartedRun]]  # schedule id -> its latest runs the viewer may see
    people: dict[str, str]  # user id -> email (members only)


class SchedulePage(TypedDict):
    """One schedule's page: every instruction version, its firings, the runs it started."""

    schedule: ScheduleView
    runs: list[StartedRun]
    people: dict[str, str]


class RunSchedule(TypedDict):
    """The schedule a run started under, as its run view shows it."""

    id: str
    name: str | None
    state: str
    instruction_version: int | None
    authority: dict[str, Any] | None  # the authority in force when the run started
    authority_version: int | None
    authority_revoked: bool
    authority_notice: str | None


def instruction_view(i: store.Instruction) -> InstructionView:
    return {
        "version": i.version,
        "text": i.text,
        "created_by": i.created_by,
        "created_at": iso(i.created_at),
    }


def schedule_view(conn: Connection, s: Schedule, *, full: bool = False) -> ScheduleView:
    current = store.instruction(conn, s.tenant_id, s.id, s.instruction_version)
    out: ScheduleView = {
        "id": s.id,
        "name": s.name,
        "owner": s.owner_user_id,
        "state": s.state,
        "state_reason": s.state_reason,
        "mode": s.mode,
        "cadence": s.cadence,
        "url": s.url,
        "authority": s.authority,
        "authority_version": s.authority_version,
        "instruction": instruction_view(current),
        "next_fire_at": iso(s.next_fire_at),
        "created_at": iso(s.created_at),
        "updated_at": iso(s.updated_at),
        "revoked_at": iso(s.revoked_at),
    }
    if full:
        out["versions"] = [instruction_view(i) for i in store.instructions(conn, s.tenant_id, s.id)]
        out["firings"] = [
            {
                "due_at": iso(f.due_at),
                "webhook_id": f.webhook_id,
                "instruction_version": f.instruction_version,
                "authority_version": f.authority_version,
                "status": f.status,
                "status_code": f.status_code,
                "error": f.error,
                "settled_at": iso(f.settled_at),
            }
            for f in store.firings(conn, s.tenant_id, s.id)
        ]
    return out


def may_see(who: Principal, s: Schedule) -> bool:
    """API keys and tenant admins see every schedule of the tenant; a member their own."""
    return who.sees_all_runs or (who.is_user and who.user_id == s.owner_user_id)


def visible(conn: Connection, who: Principal, schedule_id: str, *, for_update: bool) -> Schedule:
    """The schedule if the caller may see it; 404 otherwise (existence does not leak)."""
    found = store.get(conn, who.tenant_id, schedule_id, for_update=for_update)
    if found is None or not may_see(who, found):
        raise NotFound(f"no schedule {schedule_id!r}")
    return found


def check_manager(who: Principal, owner_user_id: str) -> None:
    """Admins (an admin key, an owner or admin member) manage any schedule; a member only
    their own; a runtime key none (it starts runs under schedules, it does not grant
    authority)."""
    if who.is_admin or (who.is_user and who.user_id == owner_user_id):
        return
    raise Forbidden("a schedule is changed by an admin or by its owner, not by a runtime key")


def member(tx: Tx, tenant_id: str, ref: object, field: str) -> str:
    """A current member's user id from an id or an email; 422 naming ``field``."""
    if not isinstance(ref, str) or not ref.strip():
        raise ValidationFailed(f"{field} must be a member's user id or email", field=field)
    try:
        return accounts.find_user(tx.conn, tenant_id, ref)
    except NotFound as exc:
        raise ValidationFailed(
            f"{field}: {ref!r} is not a member of this tenant", field=field
        ) from exc


def check_authority(tx: Tx, tenant_id: str, users: list[str]) -> None:
    """Every user an authority names is a current member (as ``PUT /v1/runs``)."""
    for ref in users:
        member(tx, tenant_id, ref, "authority.users")


def check_instruction(text: object) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValidationFailed("instruction must be non-empty text", field="instruction")
    return text


def get_schedule(core: Core, who: Principal, schedule_id: str) -> ScheduleView:
    with core.db.read() as conn:
        return schedule_view(conn, visible(conn, who, schedule_id, for_update=False), full=True)


def _listed(conn: Connection, who: Principal, after: str | None, limit: int) -> ScheduleList:
    mine = None if who.sees_all_runs else (who.user_id or "")
    rows = store.list_for(conn, who.tenant_id, mine, after, limit + 1)
    page = rows[:limit]
    return {
        "schedules": [schedule_view(conn, s) for s in page],
        "next_cursor": page[-1].id if len(rows) > limit else None,
    }


def list_schedules(core: Core, who: Principal, *, after: str | None, limit: int) -> ScheduleList:
    with core.db.read() as conn:
        return _listed(conn, who, after, limit)


def started_runs(
    conn: Connection, who: Principal, schedule_id: str, limit: int
) -> list[StartedRun]:
    """The latest runs started under the schedule that ``who`` may see (a member sees the
    runs of their schedule only where they may see the run itself)."""
    return [
        {
            "run_id": run_id,
            "title": title,
            "state": state,
            "instruction_version": version,
            "created_at": iso(created_at),
        }
        for run_id, title, state, version, created_at in runs.started_under(
            conn, who, schedule_id, limit
        )
    ]


def _named(view: ScheduleView) -> set[str]:
    """The user ids a schedule view names: its owner, the people its authority names, the
    authors of its versions (``members`` keeps only this tenant's members)."""
    ids = {view["owner"]}
    for named in (view["authority"] or {}).values():
        if isinstance(named, list):
            ids.update(str(n) for n in named)
    for version in [view["instruction"], *view.get("versions", [])]:
        by = version["created_by"] or {}
        if by.get("user_id"):
            ids.add(by["user_id"])
    return ids


def schedules_page(
    core: Core, who: Principal, *, after: str | None, limit: int, runs_each: int = 3
) -> SchedulesPage:
    """What ``GET /schedules`` shows: :func:`list_schedules` with each schedule's latest
    runs and the emails of the people named, in one read."""
    with core.db.read() as conn:
        listed = _listed(conn, who, after, limit)
        named: set[str] = set()
        for view in listed["schedules"]:
            named |= _named(view)
        return {
            **listed,
            "runs": {
                v["id"]: started_runs(conn, who, v["id"], runs_each) for v in listed["schedules"]
            },
            "people": members(conn, who.tenant_id, named),
        }


def schedule_page(
    core: Core, who: Principal, schedule_id: str, runs_limit: int = 20
) -> SchedulePage:
    """What ``GET /schedules/{id}`` shows: :func:`get_schedule` (404 as the API) with the
    runs it started and the emails of the people named, in one read."""
    with core.db.read() as conn:
        view = schedule_view(conn, visible(conn, who, schedule_id, for_update=False), full=True)
        return {
            "schedule": view,
            "runs": started_runs(conn, who, view["id"], runs_limit),
            "people": members(conn, who.tenant_id, _named(view)),
        }


def run_schedule(conn: Connection, run: Run) -> RunSchedule | None:
    """The schedule ``run`` started under, with whether that authority still stands."""
    if run.schedule_id is None:
        return None
    s = store.get(conn, run.tenant_id, run.schedule_id)
    started = run.schedule_authority or {}
    version = started.get("version")
    started_version = version if isinstance(version, int) else None
    if s is None:  # purged: nothing left to stand on
        standing = rules.AuthorityStanding(True, "the schedule that started this run is gone")
        state, name = "revoked", None
    else:
        standing = rules.standing(started_version, s.state, s.authority_version)
        state, name = s.state, s.name
    authority = started.get("authority")
    return {
        "id": run.schedule_id,
        "name": name,
        "state": state,
        "instruction_version": run.schedule_instruction_version,
        "authority": authority if isinstance(authority, dict) else None,
        "authority_version": started_version,
        "authority_revoked": standing.revoked,
        "authority_notice": standing.reason,
    }
