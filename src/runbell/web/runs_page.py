"""The runs overview page: every run the person may see, grouped by what it needs.

=========================================  ==========================================
``GET  /runs``                             the overview (``?after=`` pages finished runs)
=========================================  ==========================================

Groups, in order: needs you, stalled, needs review, working, finished
(:mod:`runbell.flows.overview`). Each row links to its run page and says its state, its
age and what its counts count ("9 confirmed, 2 conflicts"). The page follows the event
feed like the run page does: when a run moves on it fetches itself again and swaps in
the groups (app.js), never stealing focus; without JavaScript a reload shows the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from runbell.api.deps import CoreDep
from runbell.domain.errors import ValidationFailed
from runbell.flows import overview
from runbell.flows.overview import OverviewRun
from runbell.i18n import N_, _
from runbell.web import wording
from runbell.web.forms import Session
from runbell.web.templating import render
from runbell.web.viewer import Viewer, message, viewer

router = APIRouter(include_in_schema=False)

GROUP_TITLE = {
    "needs_you": N_("Needs you"),
    "stalled": N_("Stalled"),
    "needs_review": N_("Needs review"),
    "working": N_("Working"),
    "finished": N_("Finished"),
}
GROUP_EMPTY = {
    "needs_you": N_("Nothing is waiting for your answer."),
    "stalled": N_("No run has stopped making progress."),
    "needs_review": N_("No finished run needs a check."),
    "working": N_("No other run is in progress."),
    "finished": N_("No run has finished yet."),
}


def ago(at: datetime, now: datetime) -> str:
    """How long ago ``at`` was: ``just now`` under a minute (and for a clock a little
    ahead), else ``wording.relative``'s ``5 minutes ago``."""
    if (now - at).total_seconds() < 60:
        return _("just now")
    return wording.relative(at, now)


def _age(v: Viewer, run: OverviewRun) -> dict[str, str | None]:
    """When the row's run last changed in the way that matters: finished, else started."""
    if run["terminal"] and run.get("finished_at"):
        at_iso, verb = run["finished_at"], _("finished")
    else:
        at_iso, verb = run.get("started_at") or run.get("created_at"), _("started")
    at = datetime.fromisoformat(at_iso) if at_iso else None
    return {
        "verb": verb,
        "iso": at_iso,
        "time": v.time(at),
        "relative": ago(at, v.now) if at else None,
    }


def _row(v: Viewer, run: OverviewRun) -> dict[str, Any]:
    request = run.get("pending_input_request")
    return {
        "run_id": run["run_id"],
        "title": run.get("title") or run["run_id"],
        "state": run["state"],
        "badge": run["badge"],
        "counts": run.get("counts_text") or "",
        "age": _age(v, run),
        "request": request["summary"] if request else None,
        "stop_reason": run.get("stop_reason") if run["terminal"] else None,
    }


@router.get("/runs")
def runs_page(session: Session, core: CoreDep, after: str | None = None) -> Response:
    v = viewer(core, session)
    try:
        shown = overview.overview(core, v.who, after=after)
    except ValidationFailed:
        return message(
            _("This page of finished runs does not exist"),
            [_("The link may be old. The overview starts from the most recent runs.")],
            status=422,
            link=("/runs", _("Go to the runs overview")),
            v=v,
        )
    groups = [
        {
            "id": name,
            "title": _(GROUP_TITLE[name]),
            "empty": _(GROUP_EMPTY[name]),
            "rows": [_row(v, run) for run in group["runs"]],
            "more": group["more"],
        }
        for name, group in shown["groups"].items()
    ]
    ctx = v.base("runs", _("Runs"))
    ctx.update(
        groups=groups,
        next_cursor=shown["next_cursor"],
        paged=after is not None,
        body_data={"cursor": str(shown["head_cursor"])},
    )
    return render("runs.html.j2", ctx)
