"""Whether machines may answer a tenant's input requests (issue 19 item 4):
``runbell tenant machines show|on|off --tenant TENANT``. Machines are callback
URLs and runtime keys whose scope names ``input_requests.answer``; on by default."""

from __future__ import annotations

from runbell.cli import common
from runbell.cli.common import out
from runbell.cli.specs import Group, Option
from runbell.domain.errors import RunbellError

group = Group(
    "machines",
    "Whether machines may answer the tenant's requests.",
)

TENANT = Option("--tenant", "the tenant's id or name", metavar="TENANT")


def _set(tenant: str, allowed: bool | None) -> None:
    from runbell.flows import accounts, machine_answers

    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        if allowed is not None:
            machine_answers.set_allowed(core, tenant_id, allowed)
        now = machine_answers.allowed(core, tenant_id)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"machine answers: {'on' if now else 'off'}", highlight=False)


@group.command(TENANT)
def show(tenant: str) -> None:
    """Print whether machines may answer the tenant's requests."""
    _set(tenant, None)


@group.command(TENANT)
def on(tenant: str) -> None:
    """Let machines answer (the default).

    Machines are callback URLs and keys whose scope names input_requests.answer."""
    _set(tenant, True)


@group.command(TENANT)
def off(tenant: str) -> None:
    """Refuse every machine answer.

    Callback URLs are refused (and not minted), and so are keys with input_requests.answer."""
    _set(tenant, False)
