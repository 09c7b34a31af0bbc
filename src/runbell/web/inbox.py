"""The inbox page: what needs you (open requests you can still answer, most urgent
first), what is for your information, and what closed recently; acknowledging from it.

=========================================  ==========================================
``GET  /``                                 the inbox
``POST /notifications/{id}/ack``           acknowledge from the inbox
=========================================  ==========================================
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from runbell.api.deps import CoreDep
from runbell.domain.errors import NotFound
from runbell.flows import inbox, pages, views
from runbell.flows.pages import Standing
from runbell.web import wording
from runbell.web.forms import Checked, Session, safe_next
from runbell.web.templating import render
from runbell.web.viewer import Viewer, no_access, viewer

#: Attention types whose notification carries a decision (when still actionable).
DECISIONS = ("input_required", "amendment", "needs_review")

router = APIRouter(include_in_schema=False)

CANNOT_SEE = "A run you cannot see"


def _item(v: Viewer, note: Standing) -> dict[str, Any]:
    expires = note.get("expires_at")
    return {
        "id": note["id"],
        "run_id": note["run_id"],
        "summary": note["summary"],
        "attention": note["attention_type"],
        "urgency": note["urgency"],
        "state": note["state"],
        "unread": note.get("first_seen_at") is None and note["state"] == "open",
        "created": v.time(note["created_at"]),
        "created_iso": views.iso(note["created_at"]),
        "expires": v.time(expires) if expires else None,
        "expires_iso": views.iso(expires),
        "expires_in": wording.relative(expires, v.now) if expires else None,
        "actionable": note["actionable"],
        "reason": note["actionable_reason"],
        "closed": v.time(note.get("closed_at")),
    }


def _groups(items: list[dict[str, Any]], titles: dict[str, str]) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for item in items:
        group = groups.setdefault(
            item["run_id"],
            {"run_id": item["run_id"], "title": titles[item["run_id"]], "items": []},
        )
        group["items"].append(item)
    return list(groups.values())


@router.get("/")
def inbox_page(session: Session, core: CoreDep) -> Response:
    v = viewer(core, session)
    shown = pages.inbox_page(core, v.who, v.now)
    titles = {rid: CANNOT_SEE if title is None else title for rid, title in shown["titles"].items()}
    items = [_item(v, n) for n in shown["open"]]
    # What waits for this person's decision: a request, a proposed change, a review.
    needs = [i for i in items if i["attention"] in DECISIONS and i["actionable"]]
    needs_ids = {i["id"] for i in needs}
    fyi = [i for i in items if i["id"] not in needs_ids]
    needs.sort(key=lambda i: wording.URGENCY_RANK.get(i["urgency"], 0), reverse=True)
    earlier = [
        {
            **_item(v, n),
            # A run the person may see now has a page; a digest or a lost run does not.
            "run_link": n["attention_type"] != "digest"
            and shown["titles"].get(n["run_id"]) is not None,
        }
        for n in shown["closed"]
    ]
    ctx = v.base("inbox", "Inbox")
    ctx.update(
        needs=_groups(needs, titles),
        fyi=_groups(fyi, titles),
        earlier=earlier,
        titles=titles,
        open_count=len(items),
        needs_count=len(needs),
        body_data={"cursor": str(shown["head_cursor"])},
    )
    return render("inbox.html.j2", ctx)


@router.post("/notifications/{notification_id}/ack")
def ack_form(notification_id: str, signed: Checked, core: CoreDep) -> Response:
    try:
        inbox.acknowledge(core, signed.who, notification_id)
    except NotFound:
        return no_access(viewer(core, signed.session), 404)
    return RedirectResponse(safe_next(signed.form.first("next")), status_code=303)
