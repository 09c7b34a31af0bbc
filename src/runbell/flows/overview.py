"""The runs overview: every run the viewer may see, in the group that says what it needs
(``GET /v1/runs?group=…`` and the ``/runs`` page).

Groups, in the order a run is placed (the first that applies, ``domain.overview``): needs
you, stalled, needs review, working, finished. One bounded query per group
(``store.overview``), no query per row; the finished group is paged.

Invariants kept here (DESIGN §2):

- 8 and tenant isolation: visibility is checked in the queries themselves, as for
  ``GET /v1/runs``: tenant owners and admins (and API keys) see the tenant's runs, anyone
  else only the runs they own or whose authority names them; another tenant's runs never
  appear.
- 9: "needs you" lists a request only for someone who may answer it (the owner, the users
  and roles the run's authority names); admins see such runs under "working" otherwise.
- 10: reading is not deciding: nothing here answers, acknowledges or marks seen.
- 15: a row's counts say what they count ("9 confirmed, 2 conflicts"), never "N of M".
- 17: the page's live-update cursor is read before the groups.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from runbell.domain import capabilities
from runbell.domain import overview as rules
from runbell.domain.errors import ValidationFailed
from runbell.domain.operations import counts_text as ledger_text
from runbell.domain.operations import normalized
from runbell.domain.principal import Principal
from runbell.flows import runs, views
from runbell.flows.context import Core
from runbell.flows.operation_views import OperationsSummary
from runbell.store import feed
from runbell.store import operations as ledger
from runbell.store import overview as q
from runbell.store.overview import OverviewRow

#: Rows per group when none is asked for (the page), and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 200


class PendingRequest(TypedDict):
    id: str
    summary: str | None
    expires_at: str | None


class OverviewRun(views.RunView):
    """A run as a group of the overview shows it."""

    group: str
    counts_text: str
    badge: views.BadgeView
    operations: NotRequired[OperationsSummary]  # when it has a ledger
    pending_input_request: NotRequired[PendingRequest]  # a "needs you" row


class OverviewGroup(TypedDict):
    runs: list[OverviewRun]
    more: bool


class Overview(TypedDict):
    head_cursor: int
    groups: dict[str, OverviewGroup]
    next_cursor: str | None


class GroupedRuns(TypedDict):
    """``GET /v1/runs?group=…``."""

    runs: list[OverviewRun]
    more: dict[str, bool]
    next_cursor: str | None


def _row(group: str, row: OverviewRow, ops: dict[str, int] | None) -> OverviewRun:
    run = views.run_view(row.run)
    summary = None
    if ops:  # the run's ledger, counted in the same statement for the whole page
        counted = normalized(ops)
        summary = OperationsSummary(counts=counted, text=ledger_text(counted))
    # (A RunView has neither optional key; mypy's extra check cannot know that.)
    badge = views.badge_view(run["state"], run["outcome"], ops)
    out: OverviewRun = {
        **run,  # type: ignore[typeddict-item]
        "group": group,
        "counts_text": counts_text(run, summary),
        "badge": badge,
    }
    if summary is not None:
        out["operations"] = summary
    if row.request_id is not None:
        out["pending_input_request"] = {
            "id": row.request_id,
            "summary": row.request_summary,
            "expires_at": views.iso(row.request_expires_at),
        }
    return out


def counts_text(run: views.RunView, operations: OperationsSummary | None) -> str:
    """What a row's counts count: the run's operations text when it has a ledger, else
    its last progress counts as "N label" pairs."""
    if operations is not None and operations["text"]:
        return operations["text"]
    progress = run["progress"]
    return rules.counts_text(progress.get("counts") if isinstance(progress, dict) else None)


def overview(
    core: Core,
    who: Principal,
    *,
    groups: list[str] | None = None,
    states: list[str] | None = None,
    after: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Overview:
    """The viewer's runs by group: ``{head_cursor, groups: {name: {runs, more}},
    next_cursor}``.

    ``groups``: the groups to read (all when empty); ``states``: keep only runs in these
    states; ``limit``: rows per group; ``after``: the finished group's cursor
    (``next_cursor`` of the previous page, None when there is no further page).
    A run is placed in the first group that applies even when that group was not asked
    for, so a run never shows in two groups."""
    wanted = list(groups or rules.GROUPS)
    cursor = rules.decode_cursor(after) if after else None
    limit = max(1, min(limit, MAX_LIMIT))
    placed: set[str] = set()
    found: dict[str, list[OverviewRow]] = {}
    more: dict[str, bool] = {}
    with core.db.read() as conn:
        head, _ = feed.bounds(conn, who.tenant_id)  # before the reads: no gap to the stream

        def take(name: str, rows: list[OverviewRow]) -> None:
            kept = [r for r in rows if r.run.run_id not in placed]
            placed.update(r.run.run_id for r in kept)
            if name in wanted:
                found[name] = kept[:limit]
                more[name] = len(kept) > limit

        # "needs you" is read for "working" too: its runs are active, and it takes them
        # out of "working", which reads that many more. ("working" leaves out stalled
        # runs, and "finished" runs in review, in their own queries.)
        spare = 0
        if "needs_you" in wanted or "working" in wanted:
            asked = [
                r
                for r in q.needs_you(conn, who, states=states, limit=limit + 1)
                if (
                    who.user_id in r.request_approvers  # the request names who answers
                    if r.request_approvers
                    else rules.may_answer(
                        who.user_id, who.role, r.run.owner_user_id, r.run.authority, r.answerable
                    )
                )
            ]
            take("needs_you", asked)
            spare = len(asked)
        if "stalled" in wanted:
            take("stalled", q.stalled(conn, who, states=states, limit=limit + 1))
        if "needs_review" in wanted:
            take("needs_review", q.needs_review(conn, who, states=states, limit=limit + 1))
        if "working" in wanted:
            take("working", q.working(conn, who, states=states, limit=limit + 1 + spare))
        if "finished" in wanted:
            # The query itself leaves out runs still in review.
            rows = q.finished(conn, who, states=states, after=cursor, limit=limit + 1)
            found["finished"] = rows[:limit]
            more["finished"] = len(rows) > limit
        shown = [r.run.run_id for rows in found.values() for r in rows]
        ops = ledger.counts_for_runs(conn, who.tenant_id, shown)
    next_cursor = None
    if more.get("finished") and found["finished"]:
        last = found["finished"][-1].run
        assert last.finished_at is not None  # the finished group: every run has finished
        next_cursor = rules.encode_cursor(last.finished_at, last.run_id)
    return {
        "head_cursor": head,
        "groups": {
            name: {
                "runs": [_row(name, r, ops.get(r.run.run_id)) for r in found[name]],
                "more": more[name],
            }
            for name in rules.GROUPS
            if name in wanted
        },
        "next_cursor": next_cursor,
    }


def list_grouped(
    core: Core,
    who: Principal,
    *,
    groups: list[str],
    states: list[str] | None,
    after: str | None,
    limit: int,
) -> GroupedRuns:
    """``GET /v1/runs?group=…``: the asked groups' runs as one list (group by group, in
    the order of :data:`runbell.domain.overview.GROUPS`), each run with its ``group``;
    ``more`` says which groups had more rows than ``limit``; ``next_cursor`` pages the
    finished group."""
    shown = overview(core, who, groups=groups, states=states, after=after, limit=limit)
    return {
        "runs": [run for group in shown["groups"].values() for run in group["runs"]],
        "more": {name: group["more"] for name, group in shown["groups"].items()},
        "next_cursor": shown["next_cursor"],
    }


def list_runs(
    core: Core,
    who: Principal,
    *,
    groups: list[str] | None,
    states: list[str] | None,
    after: str | None,
    limit: int,
    link: str | None = None,
) -> runs.RunsById | GroupedRuns:
    """``GET /v1/runs``: ``state`` and ``group`` as given (repeatable, comma lists; an
    unknown value is 422 naming the field). Without ``group``, the runs by id, paged by
    run id (``runs.list_runs``; ``link``: only those linked to ``kind:id``); with it,
    :func:`list_grouped`. A runtime credential needs ``runs.read``; a scoped one sees only
    the runs in its scope."""
    who.require(capabilities.READ)
    wanted_states = rules.parse_list(states, rules.STATES, "state") or None
    wanted_groups = rules.parse_list(groups, rules.GROUPS, "group")
    if link is not None and wanted_groups:
        raise ValidationFailed("link lists runs by id; it is not combined with group", field="link")
    if not wanted_groups:
        return runs.list_runs(core, who, states=wanted_states, after=after, limit=limit, link=link)
    return list_grouped(
        core, who, groups=wanted_groups, states=wanted_states, after=after, limit=limit
    )
