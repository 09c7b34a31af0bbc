"""``runbell deliveries``: the outbox from a terminal — list what was sent and what
failed (a table, tab-separated lines when piped, or JSON), and replay dead letters."""

from __future__ import annotations

import sys

from runbell.cli import common
from runbell.cli.common import err, out
from runbell.cli.specs import Argument, Flag, Group, Option
from runbell.domain.errors import RunbellError

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

group = Group("deliveries", "The outbox: dead letters and replay.")

TENANT = Option("--tenant", "the tenant's id or name", metavar="TENANT")
CHANNEL = Option("--channel", "only this channel, e.g. webhook", metavar="CHANNEL")


def _check_statuses(statuses: list[str] | None) -> None:
    from runbell.flows.deliveries import STATUSES

    wrong = sorted(set(statuses or []) - set(STATUSES))
    if wrong:
        common.fail(f"unknown status {', '.join(wrong)}", f"one of {', '.join(STATUSES)}")


def _limit(value: int) -> None:
    if not 1 <= value <= 1000:
        raise common.BadParameter("must be 1 to 1000")


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


@group.command(
    TENANT,
    Option("--status", "only these, e.g. dead (repeatable)", metavar="STATUS", repeat=True),
    CHANNEL,
    Option("--limit", "at most N, 1 to 1000", metavar="N", type=int, check=_limit),
    Flag("--json", "a JSON array, each item as GET /v1/deliveries", dest="as_json"),
    name="list",
)
def deliveries_list(
    tenant: str,
    status: list[str] | None = None,
    channel: str | None = None,
    limit: int = 50,
    as_json: bool = False,
) -> None:
    """List deliveries, newest first.

    On a terminal, a table that fits its width. Piped, one tab-separated line per
    delivery with every value whole (a header line first, - for none). --json: every
    field."""
    _check_statuses(status)
    import json

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
            shown: Mapping[str, Any] = d
            sys.stdout.write("\t".join(_cell(shown[c]) for c in DELIVERY_COLUMNS) + "\n")
        return
    out.print(_table(rows, out.width), markup=False, highlight=False)


def _table(rows: Sequence[Mapping[str, Any]], width: int) -> str:
    """The columns an operator acts on, in ``width`` columns: whole ids (they are copied
    into ``deliveries replay``), channel, status, attempts, and the last error cut to what
    is left; the event or notification too when the terminal is wide enough."""
    titles = ["id", "channel", "status", "tries"]
    wide = width >= 120
    if wide:
        titles.append("event / notification")
    table = []
    for d in rows:
        cells = [d["id"], d["channel"], d["status"], str(d["attempt_count"])]
        if wide:
            cells.append(d["event_type"] or d["notification_id"] or "-")
        table.append(cells)
    widths = [max([len(t)] + [len(r[i]) for r in table]) for i, t in enumerate(titles)]
    room = max(width - sum(widths) - 2 * len(widths) - 1, 12)

    def line(cells: list[str], last: str) -> str:
        padded = [
            c.rjust(w) if t == "tries" else c.ljust(w)
            for c, w, t in zip(cells, widths, titles, strict=True)
        ]
        last = " ".join(last.split())
        return "  ".join([*padded, last if len(last) <= room else last[: room - 1] + "…"]).rstrip()

    lines = [line(titles, "last error"), line(["─" * w for w in widths], "─" * 10)]
    lines += [line(cells, d["last_error"] or "") for cells, d in zip(table, rows, strict=True)]
    return "\n".join(lines)


@group.command(
    TENANT,
    Argument("ids", "delivery ids (dlv_…)", metavar="ID", repeat=True),
    Option("--status", "every delivery in this status, e.g. dead", metavar="STATUS", repeat=True),
    CHANNEL,
    name="replay",
)
def deliveries_replay(
    tenant: str,
    ids: list[str] | None = None,
    status: list[str] | None = None,
    channel: str | None = None,
) -> None:
    """Queue deliveries again under the same identity.

    The same webhook-id, the same Message-ID; a progress bar on stderr."""
    _check_statuses(status)
    from rich.progress import Progress

    from runbell.flows import accounts, deliveries

    if not ids and not status:
        common.fail("name delivery ids or --status", "runbell deliveries replay --help")
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
                common.say(f"{delivery_id}: {exc.detail}")
            progress.advance(task)
    out.print(f"queued {done} again, {refused} refused")
    if refused and not done:
        raise common.Exit(common.EXIT_REFUSED)
