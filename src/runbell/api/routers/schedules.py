"""Scheduled work: a standing instruction on a cron cadence, its owner and authority
(issue 18 item 6). Create, read, list, edit (a new instruction version), pause, resume,
revoke."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Path, Query, Response
from pydantic import ConfigDict, Field

from runbell.api.deps import CoreDep, Who
from runbell.api.idempotent import IdemKey
from runbell.api.jsonschema import not_null
from runbell.api.openapi import SSRF_RULE, problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import Authority, Storable
from runbell.domain import limits as L
from runbell.domain.schedules import CADENCE_MAX
from runbell.flows import schedule_create, schedule_edit, schedule_state, schedule_views
from runbell.flows.inputs import ScheduleBody, ScheduleEdit

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])
ScheduleId = Annotated[str, Path(max_length=L.ID, description="the schedule's id (sch_…)")]

CADENCE = (
    "cron, five fields (minute hour day-of-month month day-of-week) or a nickname such as "
    "@hourly, read in UTC; e.g. '0 9 * * 1-5'"
)
INSTRUCTION_MAX = 20_000
CADENCE_RULE = rule(
    "cadence", "a valid cron expression of five fields, or @hourly/@daily/…, that occurs"
)
INSTRUCTION_RULE = rule("instruction", "not only blanks")
AUTHORITY_RULE = rule("authority.users", "each a user id or the email of a current member")
CREATE_RULES = rules(
    CADENCE_RULE,
    INSTRUCTION_RULE,
    rule("url", "required when mode is webhook; refused when mode is record_only"),
    rule("url", SSRF_RULE, "unsafe-destination"),
    rule(
        "owner",
        "a user id (usr_…) or the email of a current member; a member creating a "
        "schedule may name only themselves",
    ),
    AUTHORITY_RULE,
)
PATCH_RULES = rules(CADENCE_RULE, INSTRUCTION_RULE, AUTHORITY_RULE)


class ScheduleIn(Storable):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, max_length=L.TITLE)
    owner: str | None = Field(
        default=None,
        max_length=L.EMAIL,
        description="user id or email of a member (default: the person creating it)",
    )
    instruction: str = Field(
        min_length=1, max_length=INSTRUCTION_MAX, description="the standing instruction"
    )
    authority: Authority | None = Field(
        default=None, description="the authority the runs it starts act under (a run's shape)"
    )
    cadence: str = Field(min_length=1, max_length=CADENCE_MAX, description=CADENCE)
    mode: Literal["record_only", "webhook"] = Field(
        default="record_only",
        description="record_only: the runtime starts runs itself and names the schedule; "
        "webhook: Runbell fires a signed request at url when an occurrence is due",
    )
    url: str | None = Field(default=None, min_length=8, max_length=L.URL)


class SchedulePatch(Storable):
    model_config = ConfigDict(extra="forbid", json_schema_extra=not_null("instruction", "cadence"))
    name: str | None = Field(default=None, max_length=L.TITLE)
    instruction: str | None = Field(
        default=None,
        min_length=1,
        max_length=INSTRUCTION_MAX,
        description="a new version of the standing instruction (older versions are kept)",
    )
    authority: Authority | None = Field(
        default=None,
        description="a new authority: runs started under the previous one are flagged",
    )
    cadence: str | None = Field(default=None, min_length=1, max_length=CADENCE_MAX)


class StateIn(Storable):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=L.REASON)


@router.post(
    "",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 413, 422, 503),
    openapi_extra=CREATE_RULES,
)
def create(body: ScheduleIn, who: Who, core: CoreDep, key: IdemKey) -> Response:
    """Create a schedule; a webhook schedule's answer carries its signing secret, once."""
    fields = cast(ScheduleBody, body.model_dump(exclude_unset=True, mode="json"))  # ScheduleIn's
    return answered(schedule_create.create_schedule(core, who, fields, key))


@router.get("", responses=problems(401, 422, 503))
def list_schedules(
    who: Who,
    core: CoreDep,
    after: Annotated[str | None, Query(max_length=L.ID, description="next_cursor")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Mapping[str, Any]:
    """API keys and admins see every schedule of the tenant; a member their own."""
    return schedule_views.list_schedules(core, who, after=after, limit=limit)


@router.get("/{schedule_id}", responses=problems(401, 404, 422, 503))
def get_schedule(schedule_id: ScheduleId, who: Who, core: CoreDep) -> Mapping[str, Any]:
    """The schedule with every instruction version and its latest firings."""
    return schedule_views.get_schedule(core, who, schedule_id)


@router.patch(
    "/{schedule_id}",
    responses=problems(401, 403, 404, 409, 413, 422, 503),
    openapi_extra=PATCH_RULES,
)
def patch(
    schedule_id: ScheduleId, body: SchedulePatch, who: Who, core: CoreDep
) -> Mapping[str, Any]:
    """A new instruction (a new version), authority, cadence or name."""
    changes = cast(ScheduleEdit, body.model_dump(exclude_unset=True, mode="json"))
    return schedule_edit.edit_schedule(core, who, schedule_id, changes)


def _state_route(action: str, doc: str) -> None:
    def change(
        schedule_id: ScheduleId, who: Who, core: CoreDep, body: StateIn | None = None
    ) -> Mapping[str, Any]:
        reason = body.reason if body else None
        return schedule_state.change_state(core, who, schedule_id, action, reason)

    change.__doc__ = doc
    router.post(
        f"/{{schedule_id}}/{action}",
        name=f"{action}_schedule",
        responses=problems(401, 403, 404, 409, 413, 422, 503),
    )(change)


_state_route("pause", "Stop new runs and firing until resumed.")
_state_route("resume", "Start again from the next occurrence after now.")
_state_route("revoke", "Stop for good; runs started under it are flagged.")
