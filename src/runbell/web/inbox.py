"""The inbox page: what needs you (open requests you can still answer, most urgent
first), what is for your information, and what closed recently; acknowledging from it,
one notification or a whole group at once.

A digest is one entry that opens to the notifications it folds (they are not listed
apart while it is open); acknowledging it acknowledges them. Open notifications group by
run, or by agent or project (the run's subject); a big group starts collapsed with its
count in view. Filters (query parameters, as links): ``show=needs_me|failures|finished``,
``group=run|agent``, ``run=<run id>``, ``subject_type=…&subject_id=…``.

=========================================  ==========================================
``GET  /``                                 the inbox
``POST /notifications/{id}/ack``           acknowledge from the inbox
``POST /inbox/acknowledge``                acknowledge every open item of one group
=========================================  ==========================================
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from runbell.api.deps import CoreDep
from runbell.domain.errors import NotFound, ValidationFailed
from runbell.domain.inbox import DECISIONS, FILTERS, InboxFilter, collapsed
from runbell.flows import inbox, inbox_bulk, inbox_view, neutral_words, views
from runbell.flows.pages import Standing
from runbell.i18n import N_, _
from runbell.web import flow_words, wording
from runbell.web.forms import Checked, Session, safe_next
from runbell.web.templating import render
from runbell.web.viewer import Viewer, message, no_access, viewer

router = APIRouter(include_in_schema=False)

CANNOT_SEE = N_("A run you cannot see")
FILTER_LABEL = {
    None: N_("All"),
    "needs_me": N_("Needs me"),
    "failures": N_("Failures"),
    "finished": N_("Finished"),
}
GROUP_LABEL = {"run": N_("Run"), "agent": N_("Agent or project")}


def _item(v: Viewer, note: Standing, title: str | None, run_link: bool) -> dict[str, Any]:
    expires = note.get("expires_at")
    return {
        "id": note["id"],
        "run_id": note["run_id"],
        "summary": neutral_words.summary(note),
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
        "title": title,
        # A run the person may see now has a page; a digest or a lost run does not.
        "run_link": run_link,
        "folds": [],
    }


def _subject_label(subject: tuple[str, str]) -> str:
    return f"{subject[0]}: {subject[1]}"


def _groups(
    items: list[dict[str, Any]], shown: inbox_view.InboxShown, by: str
) -> list[dict[str, Any]]:
    """Items grouped by run or by subject, in the order of their first item."""
    groups: dict[str, dict[str, Any]] = {}
    for item in items:
        run_id, title = item["run_id"], item["title"]
        if item["attention"] == "digest":
            key, group_title, link = f"digest:{run_id}", _("Digests"), None
        elif by == "agent":
            subject = shown["subjects"].get(run_id)
            if title is None:
                key, group_title = "hidden", _("Runs you cannot see")
            elif subject is None:
                key, group_title = "none", _("No agent or project")
            else:
                key, group_title = "s:" + "\x1f".join(subject), _subject_label(subject)
            link = (
                None
                if subject is None
                else "/?" + urlencode({"subject_type": subject[0], "subject_id": subject[1]})
            )
        else:
            key, group_title = f"run:{run_id}", title or _(CANNOT_SEE)
            link = f"/runs/{run_id}" if item["run_link"] else None
        group = groups.setdefault(
            key, {"key": key, "title": group_title, "link": link, "items": [], "by": by}
        )
        group["items"].append(item)
    out = list(groups.values())
    for g in out:
        g["count"] = len(g["items"])
        g["collapsed"] = collapsed(g["count"], len(out))
        g["ids"] = " ".join(i["id"] for i in g["items"])
    return out


def _only(request: Request) -> tuple[InboxFilter, str]:
    q = request.query_params
    show = q.get("show")
    subject_type, subject_id = q.get("subject_type"), q.get("subject_id")
    only = InboxFilter(
        show=show if show in FILTERS else None,
        run_id=q.get("run") or None,
        subject_type=subject_type or None,
        subject_id=subject_id or None,
    )
    group = q.get("group")
    return only, group if group in GROUP_LABEL else "run"


def _href(only: InboxFilter, by: str, **change: Any) -> str:
    """The page's address with ``change`` made to its query ("run" grouping is the default)."""
    params = {
        "show": only.show,
        "group": None if by == "run" else by,
        "run": only.run_id,
        "subject_type": only.subject_type,
        "subject_id": only.subject_id,
    }
    params.update(change)
    if params["group"] == "run":
        params["group"] = None
    query = urlencode({k: v for k, v in params.items() if v})
    return "/?" + query if query else "/"


@router.get("/")
def inbox_page(request: Request, session: Session, core: CoreDep) -> Response:
    v = viewer(core, session)
    only, by = _only(request)
    shown = inbox_view.inbox_view(core, v.who, v.now, only)
    titles = shown["titles"]
    items = []
    for n in shown["open"]:
        title = titles.get(n["run_id"])
        item = _item(v, n, title, n["attention_type"] != "digest" and title is not None)
        item["folds"] = shown["folds"].get(n["id"], [])
        items.append(item)
    # What waits for this person's decision: a request, a proposed change, a review.
    needs = [i for i in items if i["attention"] in DECISIONS and i["actionable"]]
    needs_ids = {i["id"] for i in needs}
    fyi = [i for i in items if i["id"] not in needs_ids]
    needs.sort(key=lambda i: wording.URGENCY_RANK.get(i["urgency"], 0), reverse=True)
    earlier = []
    for n in shown["closed"]:
        title = titles.get(n["run_id"])
        earlier.append(
            _item(
                v, n, title or _(CANNOT_SEE), n["attention_type"] != "digest" and title is not None
            )
        )
    here = _href(only, by)
    ctx = v.base("inbox", _("Inbox"))
    ctx.update(
        needs=_groups(needs, shown, by),
        fyi=_groups(fyi, shown, by),
        earlier=earlier,
        needs_count=len(needs),
        open_count=len(items),
        here=here,
        tabs=[
            {
                "label": _(FILTER_LABEL[name]),
                "count": shown["counts"]["all" if name is None else name],
                "href": _href(only, by, show=name),
                "current": only.show == name,
            }
            for name in (None, *FILTERS)
        ],
        group_links=[
            {"label": _(label), "href": _href(only, by, group=name), "current": by == name}
            for name, label in GROUP_LABEL.items()
        ],
        agents=[
            {
                "label": _subject_label((a["type"], a["id"])),
                "count": a["open"],
                "href": _href(only, by, subject_type=a["type"], subject_id=a["id"], run=None),
                "current": only.subject == (a["type"], a["id"]),
            }
            for a in shown["agents"]
        ],
        narrowed=_narrowed(only, titles),
        everything=_href(only, by, run=None, subject_type=None, subject_id=None),
        truncated=shown["truncated"],
        body_data={"cursor": str(shown["head_cursor"])},
    )
    return render("inbox.html.j2", ctx)


def _narrowed(only: InboxFilter, titles: dict[str, str | None]) -> str | None:
    if only.run_id is not None:
        return _("Run: {title}").format(title=titles.get(only.run_id) or only.run_id)
    if only.by_subject:
        label = _subject_label((only.subject_type or "any", only.subject_id or "any"))
        return _("Agent or project: {label}").format(label=label)
    return None


@router.post("/notifications/{notification_id}/ack")
def ack_form(notification_id: str, signed: Checked, core: CoreDep) -> Response:
    try:
        inbox.acknowledge(core, signed.who, notification_id)
    except NotFound:
        return no_access(viewer(core, signed.session), 404)
    return RedirectResponse(safe_next(signed.form.first("next")), status_code=303)


@router.post("/inbox/acknowledge")
def ack_group_form(signed: Checked, core: CoreDep) -> Response:
    """Acknowledge the group as the page showed it: the ids it listed (none newer), those
    still open and the person's own; a digest among them with what it folds."""
    ids = tuple(signed.form.first("ids").split())
    try:
        inbox_bulk.acknowledge_many(core, signed.who, inbox_bulk.Selection(notification_ids=ids))
    except ValidationFailed as exc:
        return message(
            _("Nothing was acknowledged"),
            [flow_words.worded(exc.detail)],
            status=422,
            link=("/", _("Back to the inbox")),
            v=viewer(core, signed.session),
        )
    return RedirectResponse(safe_next(signed.form.first("next")), status_code=303)
