"""``runbell schedule``: scheduled work from the server's terminal, as the tenant's
operator (an admin): create a schedule (a webhook schedule's signing secret is printed
once), list and show them, give one a new instruction version, pause, resume or revoke
it. Each prints the schedule as ``GET /v1/schedules/{id}`` does (JSON)."""

from __future__ import annotations

import sys

from runbell.cli import common
from runbell.cli.specs import Argument, Group, Option
from runbell.domain.errors import RunbellError

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

group = Group("schedule", "Scheduled work: standing instructions on a cron cadence.")

TENANT = Option("--tenant", "the tenant's id or name", metavar="TENANT")
SCHEDULE = Argument("schedule_id", "the schedule's id (sch_…)")
REASON = Option("--reason", "why (shown with the schedule)", metavar="TEXT")


def _as_operator(call: Callable[[Any, Any], Any], tenant: str) -> None:
    """Run ``call(core, principal)`` as the tenant's operator; print its JSON answer."""
    import json

    from runbell.domain.principal import Principal
    from runbell.flows import accounts

    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        who = Principal(tenant_id=tenant_id, kind="key", role="admin")
        shown = call(core, who)
    except RunbellError as exc:
        common.fail(exc)
    finally:
        core.db.dispose()
    if isinstance(shown, bytes):
        shown = json.loads(shown)
    json.dump(shown, sys.stdout, indent=2)
    sys.stdout.write("\n")


@group.command(
    TENANT,
    Option("--owner", "the member who owns it (email or user id)", metavar="EMAIL"),
    Option("--instruction", "the standing instruction", metavar="TEXT"),
    Option("--cadence", "cron, five fields, UTC, e.g. '0 9 * * 1-5'", metavar="CRON"),
    Option("--mode", "record_only (default) or webhook", metavar="MODE"),
    Option("--url", "webhook mode: the runtime's URL to fire at", metavar="URL"),
    Option("--name", "a label", metavar="LABEL"),
    Option(
        "--authority-user",
        "a member the runs act for (repeatable)",
        metavar="EMAIL",
        repeat=True,
        dest="authority_users",
    ),
    name="create",
)
def schedule_create(
    tenant: str,
    owner: str,
    instruction: str,
    cadence: str,
    mode: str = "record_only",
    url: str | None = None,
    name: str | None = None,
    authority_users: list[str] | None = None,
) -> None:
    """Create a schedule.

    A webhook schedule's signing secret is printed once."""
    from runbell.flows import schedule_create as flow
    from runbell.flows.inputs import ScheduleBody

    body = ScheduleBody(
        owner=owner, instruction=instruction, cadence=cadence, mode=mode, url=url, name=name
    )
    if authority_users:
        body["authority"] = {"users": list(authority_users)}
    _as_operator(lambda core, who: flow.create_schedule(core, who, body).body, tenant)


@group.command(TENANT, name="list")
def schedule_list(tenant: str) -> None:
    """List the tenant's schedules (the first 200)."""
    from runbell.flows import schedule_views

    _as_operator(
        lambda core, who: schedule_views.list_schedules(core, who, after=None, limit=200), tenant
    )


@group.command(SCHEDULE, TENANT, name="show")
def schedule_show(schedule_id: str, tenant: str) -> None:
    """Show a schedule, its instruction versions and latest firings."""
    from runbell.flows import schedule_views

    _as_operator(lambda core, who: schedule_views.get_schedule(core, who, schedule_id), tenant)


@group.command(
    SCHEDULE,
    TENANT,
    Option("--instruction", "a new version of the standing instruction", metavar="TEXT"),
    Option("--cadence", "a new cadence (cron, five fields, UTC)", metavar="CRON"),
    name="edit",
)
def schedule_edit(
    schedule_id: str, tenant: str, instruction: str | None = None, cadence: str | None = None
) -> None:
    """Give a schedule a new instruction version or cadence.

    Older instruction versions are kept."""
    from runbell.flows import schedule_edit as flow
    from runbell.flows.inputs import ScheduleEdit

    changes = ScheduleEdit()
    if instruction is not None:
        changes["instruction"] = instruction
    if cadence is not None:
        changes["cadence"] = cadence
    _as_operator(lambda core, who: flow.edit_schedule(core, who, schedule_id, changes), tenant)


def _state(action: str, doc: str) -> None:
    def change(schedule_id: str, tenant: str, reason: str | None = None) -> None:
        from runbell.flows import schedule_state

        _as_operator(
            lambda core, who: schedule_state.change_state(core, who, schedule_id, action, reason),
            tenant,
        )

    change.__doc__ = doc
    change.__name__ = f"schedule_{action}"
    group.command(SCHEDULE, TENANT, REASON, name=action)(change)


_state("pause", "Pause a schedule: no new runs start under it, nothing fires.")
_state("resume", "Resume a paused schedule from its next occurrence.")
_state("revoke", "Revoke a schedule for good; runs started under it are flagged.")
