"""``runbell deliveries``: the outbox from a terminal — list what was sent and what
failed (a table, tab-separated lines when piped, or JSON), and replay dead letters."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from runbell.cli import common
from runbell.cli.common import err, out
from runbell.domain.errors import RunbellError

deliveries_app = typer.Typer(help="The outbox: dead letters and replay.", no_args_is_help=True)


def _check_statuses(statuses: list[str] | None) -> None:
    from runbell.flows.deliveries import STATUSES

    wrong = sorted(set(statuses or []) - set(STATUSES))
    if wrong:
        err.print(
            f"[red]error:[/red] unknown status {', '.join(wrong)}; one of {', '.join(STATUSES)}"
        )
        raise typer.Exit(2)


DELIVERY_COLUMNS = (
    "id",
    "channel",
    "status",
    "attempt_count",
    "event_type",
    "notification_id",
    "last_error",
)


def _cell(value: Any) -> str:
    """A whole value on one line with no tabs; ``-`` for none (awk skips empty fields)."""
    return "-" if value is None or value == "" else " ".join(str(value).split())


@deliveries_app.command("list")
def deliveries_list(
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    status: Annotated[list[str] | None, typer.Option(help="e.g. dead, delivery_unknown")] = None,
    channel: Annotated[str | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: Annotated[
        bool, typer.Option("--json", help="a JSON array, each item as GET /v1/deliveries")
    ] = False,
) -> None:
    """Deliveries newest first: a table on a terminal. Piped, one tab-separated line per
    delivery with every value whole (a header line first, ``-`` for none); --json for
    every field."""
    _check_statuses(status)
    from rich.table import Table

    from runbell.flows import accounts, deliveries

    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        rows = deliveries.list_deliveries(
            core, tenant_id, statuses=status, channel=channel, limit=limit
        )["deliveries"]
    except RunbellError as exc:
        common.fail(exc)
    finally:
        core.db.dispose()
    if as_json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    if not out.is_terminal:
        # For grep, cut and awk: nothing cut to a width, one line per delivery.
        sys.stdout.write("\t".join(DELIVERY_COLUMNS) + "\n")
        for d in rows:
            sys.stdout.write("\t".join(_cell(d[c]) for c in DELIVERY_COLUMNS) + "\n")
        return
    table = Table()
    # Whole ids, never cut: an operator copies them into `deliveries replay`.
    table.add_column("id", no_wrap=True, min_width=30)
    for title in ("channel", "status", "attempts"):
        table.add_column(title, no_wrap=True)
    for title in ("event / notification", "last error"):
        table.add_column(title, overflow="fold")  # a narrow terminal folds, never cuts
    for d in rows:
        table.add_row(
            d["id"],
            d["channel"],
            d["status"],
            str(d["attempt_count"]),
            d["event_type"] or d["notification_id"] or "",
            (d["last_error"] or "")[:60],
        )
    out.print(table)


@deliveries_app.command("replay")
def deliveries_replay(
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    ids: Annotated[list[str] | None, typer.Argument(help="delivery ids")] = None,
    status: Annotated[
        list[str] | None, typer.Option(help="replay every delivery in these statuses, e.g. dead")
    ] = None,
    channel: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Queue deliveries again under the same identity, with a progress bar."""
    _check_statuses(status)
    from rich.progress import Progress

    from runbell.flows import accounts, deliveries

    if not ids and not status:
        err.print("[red]error:[/red] name delivery ids or --status")
        raise typer.Exit(2)
    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        todo = list(ids or [])
        if status:
            found = deliveries.list_deliveries(
                core, tenant_id, statuses=status, channel=channel, limit=100_000
            )
            todo += [d["id"] for d in found["deliveries"]]
    except RunbellError as exc:
        common.fail(exc)
    done, refused = 0, 0
    with Progress(console=err) as progress:
        task = progress.add_task("replaying", total=len(todo))
        for delivery_id in todo:
            try:
                deliveries.replay(core, tenant_id, delivery_id)
                done += 1
            except RunbellError as exc:
                refused += 1
                err.print(f"{delivery_id}: {exc.detail}")
            progress.advance(task)
    out.print(f"queued {done} again, {refused} refused")
    if refused and not done:
        raise typer.Exit(2)
