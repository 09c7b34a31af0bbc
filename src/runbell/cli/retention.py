"""Retention from the command line: a tenant's periods (``runbell tenant retention``) and
pruning now (``runbell prune``, ``--dry-run`` to count only)."""

from __future__ import annotations

from runbell.cli import common
from runbell.cli.common import out
from runbell.cli.specs import Argument, Commands, Flag, Group, Option
from runbell.domain.errors import RunbellError, ValidationFailed

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from typing import Any

commands = Commands()
group = Group("retention", "How long a tenant's history is kept (per table, in days).")

TENANT = Option("--tenant", "the tenant's id or name", metavar="TENANT")


def _changes(pairs: list[str]) -> dict[str, int | None]:
    """``["notifications=90", "feed_events=default"]`` → ``{"notifications": 90,
    "feed_events": None}``; anything else is a ValidationFailed naming the argument."""
    change: dict[str, int | None] = {}
    for pair in pairs:
        table, sep, value = pair.partition("=")
        value = value.strip()
        if not sep or not table.strip() or not value:
            raise ValidationFailed(f"{pair!r}: write TABLE=DAYS or TABLE=default")
        if value == "default":
            change[table.strip()] = None
        elif value.isdigit():
            change[table.strip()] = int(value)
        else:
            raise ValidationFailed(f"{table.strip()}: days must be a whole number or 'default'")
    return change


def _print_periods(core: Any, tenant_id: str) -> None:
    from runbell.flows import retention

    for table, (days, origin) in retention.periods(core, tenant_id).items():
        out.print(f"{table:<18} {days:>8} days  ({origin})", highlight=False)


@group.command(TENANT)
def show(tenant: str) -> None:
    """Print each table's retention for a tenant, and where it comes from."""
    from runbell.flows import accounts

    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
    except RunbellError as exc:
        common.fail(exc)
    _print_periods(core, tenant_id)


@group.command(
    Argument(
        "changes",
        "TABLE=DAYS, or TABLE=default to drop the override",
        metavar="TABLE=DAYS",
        repeat=True,
    ),
    TENANT,
    name="set",
)
def set_(changes: list[str], tenant: str) -> None:
    """Override retention for a tenant.

    For example: runbell tenant retention set --tenant acme notifications=180
    feed_events=default"""
    from runbell.flows import accounts, retention

    core = common.core()
    try:
        change = _changes(changes)
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        retention.set_override(core, tenant_id, change)
    except RunbellError as exc:
        common.fail(exc)
    _print_periods(core, tenant_id)


@commands.command(
    Flag("--dry-run", "count what is prunable now, delete nothing"),
    Option("--tenant", "only this tenant (id or name)", metavar="TENANT"),
)
def prune(dry_run: bool = False, tenant: str | None = None) -> None:
    """Prune history past its retention now.

    In batches; prints the rows per table."""
    from runbell.flows import accounts, retention

    core = common.core()
    try:
        tenant_id = None if tenant is None else accounts.resolve_tenant(core.db, tenant)
    except RunbellError as exc:
        common.fail(exc)
    report = retention.run(core, core.db.clock(), dry_run=dry_run, tenant_id=tenant_id)
    verb = "prunable" if dry_run else "pruned"
    for table, count in report.counts.items():
        out.print(f"{table:<18} {count:>10} {verb}", highlight=False)
    out.print(f"{'total':<18} {report.total:>10} {verb}", highlight=False)
