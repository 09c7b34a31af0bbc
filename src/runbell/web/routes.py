"""The web app: sign-in, inbox, run pages, deep links and settings.

Server-rendered (Jinja2) and usable without JavaScript for reading and answering; a
small script adds live updates, countdowns and browser notifications. Every page needs
a session (else a redirect to ``/login?next=…``); every form carries the session's CSRF
token, checked here before anything changes. A deep link ``/n/{id}`` is a pointer, never
a grant: it re-checks who you are and what you may see, then shows the run as it is now.

Routes (no ``/v1`` prefix, not in the OpenAPI document):

=========================================================  =================================
``GET  /login``, ``POST /login``                            ask for a sign-in link
``GET  /auth/{token}``                                      use a one-time link → session
``POST /logout``                                            end the session
``GET  /``                                                  the inbox
``POST /notifications/{id}/ack``                            acknowledge from the inbox
``GET  /n/{id}``                                            deep link: the run, in context
``GET  /runs/{run_id}``                                     the run page
``POST /runs/{run_id}/input-requests/{request_id}/respond``  answer a request
``GET  /settings``, ``POST /settings``                      consent, quiet hours, timezone
``POST /settings/chat``, ``…/chat/{id}/delete``             chat destinations
``POST /settings/push/{id}/delete``                         forget a browser
``GET  /sw.js``                                             the service worker (root scope)
``GET  /favicon.ico``                                       the icon
=========================================================  =================================
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit
from zoneinfo import ZoneInfo

import structlog
from fastapi import APIRouter, BackgroundTasks, Depends, FastAPI, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError

from runbell.api.deps import SESSION_COOKIE, get_core, web_session
from runbell.api.schemas import ChatIn, PreferencesIn
from runbell.demo import mailbox_path
from runbell.domain.errors import Conflict, Forbidden, NotFound, RunbellError, ValidationFailed
from runbell.domain.principal import Principal, WebSession
from runbell.domain.quiet_hours import zone
from runbell.flows import inbox, preferences, receipts, sessions, views
from runbell.flows import input_requests as actions
from runbell.flows import runs as run_flows
from runbell.flows.context import Runbell
from runbell.store import feed, runs
from runbell.store import input_requests as requests
from runbell.web import reads, wording
from runbell.web.templating import PAGE_HEADERS, render

log = structlog.get_logger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
LOGIN_CSRF_COOKIE = "rb_login_csrf"
# Where the browser was going when it was sent to sign in: used by /auth/{token} when the
# link itself names no ``next`` (a link printed by `runbell user login-link`).
NEXT_COOKIE = "rb_next"
URGENCIES = ("low", "normal", "time_sensitive", "urgent")
CHANNELS = (("email", "Email"), ("webpush", "Browser notifications"), ("chat", "Chat"))
COMMON_ZONES = (
    "UTC",
    "Europe/London",
    "Europe/Paris",
    "Europe/Berlin",
    "Europe/Madrid",
    "Europe/Warsaw",
    "Europe/Kyiv",
    "Africa/Lagos",
    "Africa/Johannesburg",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Pacific/Auckland",
    "America/Sao_Paulo",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Anchorage",
    "Pacific/Honolulu",
)

router = APIRouter(include_in_schema=False)
Core = Annotated[Runbell, Depends(get_core)]


# --- sessions, forms and CSRF ----------------------------------------------------------


class SignInRequired(Exception):
    """No live session: answered with a redirect to the sign-in page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class CsrfRefused(Exception):
    """A form without this session's CSRF token: answered 403, nothing changed."""


class Form(dict[str, list[str]]):
    """A parsed ``application/x-www-form-urlencoded`` body."""

    def first(self, name: str, default: str = "") -> str:
        values = self.get(name)
        return values[0] if values else default

    def all(self, name: str) -> list[str]:
        return list(self.get(name, []))


@dataclass(frozen=True)
class Signed:
    """A signed-in browser whose form passed the CSRF check."""

    session: WebSession
    form: Form

    @property
    def who(self) -> Principal:
        return self.session.principal


def safe_next(value: str | None) -> str:
    """A same-site path to return to after sign-in, or ``/``: never another origin."""
    if not value or len(value) > 2000 or not value.startswith("/") or value.startswith("//"):
        return "/"
    if "\\" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


def _return_path(request: Request) -> str:
    if request.method == "GET":
        path = request.url.path
        return path + (f"?{request.url.query}" if request.url.query else "")
    referer = request.headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        if parts.netloc == request.url.netloc:
            return safe_next(parts.path + (f"?{parts.query}" if parts.query else ""))
    return "/"


async def page_session(request: Request) -> WebSession:
    session = await web_session(request)
    if session is None:
        raise SignInRequired(_return_path(request))
    return session


async def read_form(request: Request) -> Form:
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return Form()
    body = (await request.body()).decode("utf-8", "replace")
    return Form(parse_qs(body, keep_blank_values=True, max_num_fields=500))


Session = Annotated[WebSession, Depends(page_session)]
FormBody = Annotated[Form, Depends(read_form)]


async def checked(session: Session, form: FormBody) -> Signed:
    if not session.csrf_ok(form.first("csrf_token")):
        raise CsrfRefused()
    return Signed(session, form)


Checked = Annotated[Signed, Depends(checked)]


def install(app: FastAPI) -> None:
    """Add the web app to ``app``: pages, static files and the service worker."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.exception_handler(SignInRequired)
    async def _sign_in(_: Request, exc: SignInRequired) -> Response:
        return RedirectResponse(f"/login?next={quote(exc.next_path, safe='/')}", status_code=303)

    @app.exception_handler(CsrfRefused)
    async def _csrf(_: Request, exc: CsrfRefused) -> Response:
        return message(
            "This form has expired",
            [
                "Nothing was changed: the form was not sent from a current Runbell page "
                "(it may be from an older tab, or another site).",
                "Go back, reload the page and try again.",
            ],
            status=403,
        )


# --- page context ----------------------------------------------------------------------


@dataclass
class Viewer:
    session: WebSession
    email: str
    tz: ZoneInfo
    tz_name: str
    now: datetime
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def who(self) -> Principal:
        return self.session.principal

    def time(self, value: datetime | None) -> str:
        return wording.local_time(value, self.tz)

    def base(self, page: str, title: str) -> dict[str, Any]:
        return {
            "page": page,
            "title": title,
            "signed_in": True,
            "csrf_token": self.session.csrf_token,
            "me_email": self.email,
            "body_data": {},
        }


def viewer(core: Runbell, session: WebSession) -> Viewer:
    with core.db.read() as conn:
        tz_name = reads.timezone_of(conn, session.tenant_id, session.user_id)
        email = reads.email_of(conn, session.user_id)
    try:
        tz = zone(tz_name)
    except ValidationFailed:
        tz_name, tz = "UTC", ZoneInfo("UTC")
    return Viewer(session, email, tz, tz_name, core.db.clock())


def message(
    title: str,
    paragraphs: list[str],
    *,
    status: int = 200,
    link: tuple[str, str] | None = None,
    v: Viewer | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    ctx: dict[str, Any] = v.base("message", title) if v else {"title": title, "page": "message"}
    ctx.update(heading=title, paragraphs=paragraphs, link=link)
    return render("message.html.j2", ctx, status=status, headers=headers)


def no_access(v: Viewer, status: int) -> Response:
    """The same words whether the thing never existed, is someone else's, or access was
    lost: nothing about it leaks."""
    return message(
        "You no longer have access to this",
        [
            "This link does not open anything for you. It may belong to someone else, or "
            "your access to the run it pointed at has changed.",
        ],
        status=status,
        link=("/", "Go to your inbox"),
        v=v,
    )


def _cookie_secure(core: Runbell) -> bool:
    return core.settings.public_url.lower().startswith("https://")


# --- sign-in ---------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, core: Core, next: str | None = None) -> Response:
    target = safe_next(next)
    stale = False
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        if sessions.lookup(core, token) is not None:
            return RedirectResponse(target, status_code=303)
        stale = True
    return _login_form(core, request, target, stale=stale)


def _login_form(
    core: Runbell,
    request: Request,
    target: str,
    *,
    stale: bool = False,
    notice: str | None = None,
    status: int = 200,
) -> Response:
    from runbell.flows.channel_config import smtp_config

    login_csrf = request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_urlsafe(32)
    email_enabled = smtp_config(core) is not None
    response = render(
        "login.html.j2",
        {
            "title": "Sign in",
            "page": "login",
            "next": target,
            "login_csrf": login_csrf,
            "email_enabled": email_enabled,
            "stale": stale,
            "signed_out": request.query_params.get("signed_out") == "1",
            "notice": notice,
            "why": wording.why_sign_in(target),
            "mailbox": mailbox_path(request) if email_enabled else None,
            "demo_email": core.settings.first_user_email,
        },
        status=status,
    )
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        login_csrf,
        max_age=3600,
        path="/login",
        httponly=True,
        samesite="lax",
        secure=_cookie_secure(core),
    )
    if stale:
        response.delete_cookie(SESSION_COOKIE, path="/")
    if target != "/":
        response.set_cookie(
            NEXT_COOKIE,
            quote(target, safe="/"),
            max_age=int(sessions.LINK_TTL.total_seconds()),
            path="/auth",
            httponly=True,
            samesite="lax",
            secure=_cookie_secure(core),
        )
    return response


@router.post("/login")
def login_submit(
    request: Request, core: Core, form: FormBody, background: BackgroundTasks
) -> Response:
    from runbell.flows.channel_config import smtp_config
    from runbell.web.mail import send_sign_in

    target = safe_next(form.first("next"))
    expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not expected or not secrets.compare_digest(form.first("csrf_token"), expected):
        raise CsrfRefused()
    config = smtp_config(core)
    if config is None:
        return _login_form(
            core,
            request,
            target,
            notice=(
                "Email sign-in is not set up on this server. Ask an administrator for a "
                "sign-in link: they can make one with `runbell user login-link`."
            ),
        )
    address = form.first("email").strip()[:320]
    links = [
        (tenant_name, sign_in_url(core, token, target))
        for tenant_name, token in sessions.links_for_email(core.db, address)
    ]
    if links:
        background.add_task(send_sign_in, config, address, links)
    # The same answer whether or not the address belongs to anyone.
    paragraphs = [
        "If that address belongs to a member, a sign-in link is on its way. "
        "It works once, for 15 minutes.",
    ]
    link = ("/login", "Back to sign-in")
    mailbox = mailbox_path(request)
    if mailbox:
        paragraphs.append("This is the demo: the mail lands in the demo mailbox, not a real one.")
        link = (mailbox, "Open the demo mailbox")
    return message("Check your email", paragraphs, link=link)


def sign_in_url(core: Runbell, token: str, next_path: str = "/") -> str:
    url = f"{core.settings.public_url.rstrip('/')}/auth/{token}"
    return url if next_path == "/" else f"{url}?next={quote(next_path, safe='/')}"


@router.get("/auth/{token}")
def use_link(token: str, request: Request, core: Core, next: str | None = None) -> Response:
    outcome = sessions.sign_in(core, token)
    # The token stays out of referrers and caches either way.
    private = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
    if isinstance(outcome, sessions.LinkRefused):
        text, status = {
            "used": ("This sign-in link was already used. Each link works only once.", 410),
            "expired": ("This sign-in link has expired. Links work for 15 minutes.", 410),
            "no_access": ("This sign-in link is for a membership that was revoked.", 410),
            "unknown": ("This is not a valid sign-in link.", 404),
        }[outcome.reason]
        return message(
            "This sign-in link cannot be used",
            [text, "Ask for a new link on the sign-in page."],
            status=status,
            link=("/login", "Get a new sign-in link"),
            headers=private,
        )
    remembered = unquote(request.cookies.get(NEXT_COOKIE, ""))
    response = RedirectResponse(safe_next(next or remembered), status_code=303, headers=private)
    if remembered:
        response.delete_cookie(NEXT_COOKIE, path="/auth")
    response.set_cookie(
        SESSION_COOKIE,
        outcome.cookie,
        max_age=int(sessions.SESSION_TTL.total_seconds()),
        path="/",
        httponly=True,
        samesite="lax",
        secure=_cookie_secure(core),
    )
    log.info("web.signed_in", tenant_id=outcome.tenant_id, user_id=outcome.user_id)
    return response


@router.post("/logout")
def logout(signed: Checked, core: Core) -> Response:
    sessions.sign_out(core, signed.session.id)
    response = RedirectResponse("/login?signed_out=1", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# --- inbox -----------------------------------------------------------------------------


def _item(
    v: Viewer,
    note: dict[str, Any],
    run: dict[str, Any] | None,
    visible: bool,
    request: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ok, reason = (False, "access lost")
    if run is not None and visible:
        ok, reason = views.actionable(note, run, v.now, request)
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
        "actionable": ok,
        "reason": reason,
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
def inbox_page(session: Session, core: Core) -> Response:
    v = viewer(core, session)
    who = v.who
    with core.db.read() as conn:
        head, _ = feed.bounds(conn, who.tenant_id)  # before the reads: no gap to the stream
        opened, closed = reads.inbox(conn, who)
        run_ids = {n["run_id"] for n in opened + closed}
        run_rows = reads.runs_by_id(conn, who.tenant_id, run_ids)
        visible = reads.visible_runs(conn, who, run_ids)
        asks = {n["id"]: actions.get_for_notification(conn, n) for n in opened}
    titles = {
        rid: (run_rows[rid].get("title") or rid) if rid in visible else "A run you cannot see"
        for rid in run_ids
    }
    items = [
        _item(v, n, run_rows.get(n["run_id"]), n["run_id"] in visible, asks[n["id"]])
        for n in opened
    ]
    needs = [i for i in items if i["attention"] == "input_required" and i["actionable"]]
    needs_ids = {i["id"] for i in needs}
    fyi = [i for i in items if i["id"] not in needs_ids]
    needs.sort(key=lambda i: wording.URGENCY_RANK.get(i["urgency"], 0), reverse=True)
    earlier = [_item(v, n, run_rows.get(n["run_id"]), n["run_id"] in visible) for n in closed]
    ctx = v.base("inbox", "Inbox")
    ctx.update(
        needs=_groups(needs, titles),
        fyi=_groups(fyi, titles),
        earlier=earlier,
        titles=titles,
        open_count=len(items),
        needs_count=len(needs),
        body_data={"cursor": str(head)},
    )
    return render("inbox.html.j2", ctx)


@router.post("/notifications/{notification_id}/ack")
def ack_form(notification_id: str, signed: Checked, core: Core) -> Response:
    try:
        inbox.acknowledge(core, signed.who, notification_id)
    except NotFound:
        return no_access(viewer(core, signed.session), 404)
    return RedirectResponse(safe_next(signed.form.first("next")), status_code=303)


# --- run page and deep links -----------------------------------------------------------


@dataclass
class RunPageState:
    """What a run page shows around the run itself: the notification it was opened from,
    a banner, an answer just recorded, a refused answer, a form error."""

    highlight: dict[str, Any] | None = None
    banner: list[str] = field(default_factory=list)
    answered_request: str | None = None
    conflict: str | None = None
    form_error: str | None = None
    status: int = 200


def _details_text(details: Any) -> str | None:
    if details in (None, {}, []):
        return None
    if isinstance(details, str):
        return details
    return json.dumps(details, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _safe_link(url: Any) -> str | None:
    """Only http(s) links become clickable: a run's links come from a runtime."""
    if not isinstance(url, str):
        return None
    return url if urlsplit(url).scheme in ("http", "https") else None


def _progress_view(v: Viewer, progress: Any) -> dict[str, Any] | None:
    """The run's last progress note (message, what its counts count) and when it came."""
    if not isinstance(progress, dict):
        return None
    text = wording.progress_text(progress.get("message"), progress.get("counts"))
    if not text:
        return None
    try:
        at = datetime.fromisoformat(str(progress.get("at")))
    except ValueError:
        at = None
    return {"text": text, "at": v.time(at), "at_iso": views.iso(at)}


def _option_label(req: dict[str, Any], value: Any) -> Any:
    for option in req.get("options") or []:
        if isinstance(option, dict) and option.get("id") == value:
            return option.get("label") or value
    return value


def _request_view(v: Viewer, req: dict[str, Any]) -> dict[str, Any]:
    expires = req.get("expires_at")
    options = req.get("options") or []
    return {
        "id": req["id"],
        "kind": req["kind"],
        "summary": req["summary"],
        "details": _details_text(req.get("details")),
        "options": [
            {"id": str(o.get("id")), "label": str(o.get("label") or o.get("id"))}
            for o in options
            if isinstance(o, dict) and o.get("id") is not None
        ],
        "version": req["version"],
        "state": req["state"],
        "expires": v.time(expires) if expires else None,
        "expires_iso": views.iso(expires),
        "expires_in": wording.relative(expires, v.now) if expires else None,
        "expired": bool(expires and expires <= v.now),
    }


def run_page(core: Runbell, v: Viewer, run_id: str, state: RunPageState) -> Response:
    who = v.who
    try:
        snapshot = run_flows.get_run(core, who, run_id)  # the access check, and the API's view
    except NotFound:
        return no_access(v, 404)
    with core.db.read() as conn:
        head, _ = feed.bounds(conn, who.tenant_id)
        run = runs.require_run(conn, who.tenant_id, run_id)
        transitions = runs.list_transitions(conn, who.tenant_id, run_id)
        waiting = requests.pending_for_run(conn, who.tenant_id, run_id)
        pending = waiting[-1] if waiting else None
        may_answer = actions.may_answer(conn, who, run)
        my_notes = reads.notes_for_run(conn, who, run_id)
        owner = reads.email_of(conn, run["owner_user_id"])
        answered = None
        if state.answered_request:
            answered = requests.get(conn, who.tenant_id, state.answered_request)
            if (
                answered is None
                or answered["run_id"] != run_id
                or answered["answered_by_id"] != who.user_id
            ):
                answered = None
    request_view = _request_view(v, pending) if pending else None
    report = run.get("report") or {}
    links = [
        {"label": str(link.get("label") or link.get("url")), "url": _safe_link(link.get("url"))}
        for link in (report.get("links") or [])
        if isinstance(link, dict)
    ]
    highlight = state.highlight
    ctx = v.base("run", run.get("title") or run_id)
    ctx.update(
        run={
            "run_id": run_id,
            "title": run.get("title") or run_id,
            "objective": run.get("objective"),
            "kind": run.get("kind"),
            "owner": owner,
            "state": run["state"],
            "terminal": snapshot["terminal"],
            "version": run["version"],
            "subject": run.get("subject"),
            "details": _details_text(snapshot.get("details")),
            "progress": None if snapshot["terminal"] else _progress_view(v, run.get("progress")),
            "error": run.get("error"),
            "report": report,
            "links": links,
            "operations": snapshot.get("operations"),
            "created": v.time(run.get("created_at")),
            "updated": v.time(run.get("updated_at")),
            "finished": v.time(run.get("finished_at")),
        },
        request=request_view,
        may_answer=may_answer,
        idempotency_key=secrets.token_urlsafe(24),
        transitions=[
            {
                "version": tr["version"],
                "kind": tr["kind"],
                "from": tr["from_state"],
                "to": tr["to_state"],
                "reason": tr.get("reason"),
                "at": v.time(tr["at"]),
                "at_iso": views.iso(tr["at"]),
            }
            for tr in reversed(transitions)
        ],
        notes=[
            {
                "id": n["id"],
                "summary": n["summary"],
                "attention": n["attention_type"],
                "urgency": n["urgency"],
                "state": n["state"],
                "created": v.time(n["created_at"]),
                "created_iso": views.iso(n["created_at"]),
                "highlight": highlight is not None and highlight["id"] == n["id"],
                "deliveries": [
                    {
                        "channel": d["channel"],
                        "status": d["status"],
                        "attempts": d["attempt_count"],
                        "updated": v.time(d["updated_at"]),
                    }
                    for d in n["deliveries"]
                ],
            }
            for n in my_notes
        ],
        highlight=highlight,
        banner=state.banner,
        answered=(
            {
                "decision": answered["decision"],
                "value": _option_label(answered, answered["value"]),
                "summary": answered["summary"],
                "at": v.time(answered["answered_at"]),
            }
            if answered
            else None
        ),
        conflict=state.conflict,
        form_error=state.form_error,
        body_data={
            "cursor": str(head),
            "run-id": run_id,
            "run-version": str(run["version"]),
            "request-id": request_view["id"] if request_view else "",
            "request-version": str(request_view["version"]) if request_view else "",
        },
    )
    return render("run.html.j2", ctx, status=state.status)


@router.get("/runs/{run_id}")
def run_view(run_id: str, session: Session, core: Core, answered: str | None = None) -> Response:
    v = viewer(core, session)
    return run_page(core, v, run_id, RunPageState(answered_request=answered))


def _record_opened(core: Runbell, who: Principal, notification_id: str) -> None:
    """An ``opened`` receipt: telemetry that also sets first-seen, never a decision. The
    channel the link came from is unknown here, so none is recorded."""
    try:
        receipts.record_receipt(core, who, notification_id, "opened", None)
    except RunbellError as exc:  # telemetry must never break the page
        log.warning("web.receipt_failed", error=exc.detail)


def _when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@router.get("/n/{notification_id}")
def deep_link(notification_id: str, session: Session, core: Core) -> Response:
    v = viewer(core, session)
    try:
        note = inbox.get_notification(core, v.who, notification_id)
    except NotFound:
        return no_access(v, 404)
    if note["actionable_reason"] == "access lost":
        return no_access(v, 403)
    _record_opened(core, v.who, notification_id)
    banner: list[str] = []
    if not note["actionable"] and (
        note["attention_type"] == "input_required" or note["state"] != "open"
    ):
        reason = note["actionable_reason"]
        if reason == "informational":
            reason = note["state"]
        request = note.get("input_request")
        if request and request.get("answered_by"):
            by = request["answered_by"]
            who_answered = "you" if by["id"] == v.who.user_id else by["email"]
            banner.append(
                f"This request was already answered by {who_answered} on "
                f"{v.time(_when(request['answered_at']))} ({request['decision']}), here or "
                "on another device."
            )
        else:
            banner.append(wording.why_not_actionable(reason, note.get("closed_reason")))
        run = note["run"]
        banner.append(
            "Below is the run as it is now: "
            f"{wording.STATE_LABEL.get(run['state'], run['state']).lower()}, "
            f"version {run['version']}."
        )
    highlight = {
        "id": note["id"],
        "summary": note["summary"],
        "attention": note["attention_type"],
        "urgency": note["urgency"],
        "state": note["state"],
        "actionable": note["actionable"],
    }
    return run_page(core, v, note["run_id"], RunPageState(highlight=highlight, banner=banner))


def refusal_text(v: Viewer, exc: Conflict) -> str:
    """Why an answer was refused, in plain words and the person's timezone."""
    current = exc.extra.get("current") or {}
    req = current.get("input_request") or {}
    run = current.get("run") or {}
    state = req.get("state")
    if state == "answered" and req.get("answered_by"):
        by = req["answered_by"]
        who_answered = "you" if by.get("id") == v.who.user_id else by.get("email")
        text = (
            f"This request was already answered by {who_answered} on "
            f"{v.time(_when(req.get('answered_at')))} ({req.get('decision')})."
        )
    elif state == "superseded":
        text = "A newer request replaced this one."
    elif state == "cancelled":
        now = wording.STATE_LABEL.get(run.get("state", ""), run.get("state", "changed"))
        text = (
            f"This request was cancelled: the run stopped waiting for it (it is now {now.lower()})."
        )
    elif state == "expired":
        text = f"This request expired on {v.time(_when(req.get('expires_at')))}."
    else:
        text = wording.conflict_text(exc.detail)
    return text + " Your answer was not recorded and nothing ran. The current state is below."


@router.post("/runs/{run_id}/input-requests/{request_id}/respond")
def respond_form(run_id: str, request_id: str, signed: Checked, core: Core) -> Response:
    v = viewer(core, signed.session)
    form = signed.form

    def again(**kw: Any) -> Response:
        return run_page(core, v, run_id, RunPageState(**kw))

    decision = form.first("decision")
    body: dict[str, Any] = {"decision": decision}
    try:
        body["expected_run_version"] = int(form.first("expected_run_version"))
        body["expected_request_version"] = int(form.first("expected_request_version"))
    except ValueError:
        return again(
            form_error="The form was incomplete. Reload the page and try again.", status=422
        )
    if decision == "answer":
        body["value"] = form.first("value")
        if not body["value"].strip():
            return again(form_error="Choose an option or write an answer first.", status=422)
    key = form.first("idempotency_key")[:200] or secrets.token_urlsafe(24)
    with core.db.read() as conn:
        req = requests.get(conn, v.who.tenant_id, request_id)
    if req is None or req["run_id"] != run_id:
        return no_access(v, 404)
    try:
        actions.respond(core, v.who, request_id, body, key)
    except Conflict as exc:
        return again(conflict=refusal_text(v, exc), status=409)
    except Forbidden as exc:
        return again(
            conflict="You may not answer this request: " + wording.conflict_text(exc.detail),
            status=403,
        )
    except NotFound:
        return no_access(v, 404)
    except ValidationFailed as exc:
        return again(form_error=wording.conflict_text(exc.detail), status=422)
    return RedirectResponse(
        f"/runs/{quote(run_id, safe='')}?answered={quote(request_id, safe='')}",
        status_code=303,
    )


# --- settings --------------------------------------------------------------------------


def settings_page(
    core: Runbell,
    v: Viewer,
    *,
    error: str | None = None,
    saved: str | None = None,
    draft: dict[str, Any] | None = None,
    status: int = 200,
) -> Response:
    prefs = preferences.preferences_of(core, v.who)
    chats = [{**c, "mine": not c["shared"]} for c in preferences.chat_destinations(core, v.who)]
    devices = preferences.subscriptions(core, v.who)
    windows = [*prefs["quiet_hours"], {"start": "", "end": ""}]
    ctx = v.base("settings", "Settings")
    ctx.update(
        prefs=draft or {**prefs, "quiet_hours": windows},
        channels=CHANNELS,
        urgencies=URGENCIES,
        zones=COMMON_ZONES,
        chats=chats,
        devices=[
            {
                "id": d["id"],
                "user_agent": d["user_agent"],
                "created": v.time(d["created_at"]),
                "last": v.time(d["last_success_at"]),
            }
            for d in devices
        ],
        error=error,
        saved=saved,
        is_admin=v.who.is_admin,
    )
    return render("settings.html.j2", ctx, status=status)


@router.get("/settings")
def settings_view(session: Session, core: Core, saved: str | None = None) -> Response:
    words = {
        "prefs": "Your notification settings were saved.",
        "chat": "Chat destination added.",
        "chat-removed": "Chat destination removed.",
        "device-removed": "That browser will no longer get notifications.",
    }
    return settings_page(core, viewer(core, session), saved=words.get(saved or ""))


@router.post("/settings")
def settings_save(signed: Checked, core: Core) -> Response:
    v = viewer(core, signed.session)
    form = signed.form
    consent = {c: [u for u in form.all(f"consent_{c}") if u in URGENCIES] for c, _ in CHANNELS}
    windows = []
    i = 0
    while f"quiet_start_{i}" in form and i < 14:
        start, end = form.first(f"quiet_start_{i}").strip(), form.first(f"quiet_end_{i}").strip()
        if start or end:
            window: dict[str, Any] = {"start": start, "end": end}
            days = form.first(f"quiet_days_{i}").strip()
            if days:
                try:
                    window["days"] = [int(d) for d in days.split(",")]
                except ValueError:
                    window["days"] = days  # refused by validation below, with its message
            windows.append(window)
        i += 1
    tz_name = form.first("timezone").strip()
    current = preferences.preferences_of(core, v.who)["consent"]
    # Only channels whose urgencies changed get a new consent record (when and how).
    changed = {c: u for c, u in consent.items() if set(u) != set(current.get(c, []))}
    try:
        body = PreferencesIn.model_validate(
            {"consent": changed, "quiet_hours": windows, "timezone": tz_name}
        )
        preferences.save_preferences(
            core,
            v.who,
            consent=preferences.consent_of(body.consent),
            quiet_hours=body.quiet_hours,
            timezone=body.timezone,
        )
    except (ValidationFailed, ValidationError) as exc:
        text = exc.detail if isinstance(exc, ValidationFailed) else _first_error(exc)
        draft = {
            "email": v.email,
            "consent": consent,
            "quiet_hours": [*windows, {"start": "", "end": ""}],
            "timezone": tz_name,
        }
        return settings_page(core, v, error=wording.conflict_text(text), draft=draft, status=422)
    return RedirectResponse("/settings?saved=prefs", status_code=303)


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid settings"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg"))


@router.post("/settings/chat")
def settings_add_chat(signed: Checked, core: Core) -> Response:
    v = viewer(core, signed.session)
    try:
        body = ChatIn(
            url=signed.form.first("url").strip(),
            label=signed.form.first("label").strip() or None,
        )
        preferences.add_chat_destination(core, v.who, body.url, body.label)
    except (RunbellError, ValidationError) as exc:
        text = exc.detail if isinstance(exc, RunbellError) else _first_error(exc)
        return settings_page(
            core, v, error="That chat destination was not added: " + text, status=422
        )
    return RedirectResponse("/settings?saved=chat", status_code=303)


@router.post("/settings/chat/{destination_id}/delete")
def settings_delete_chat(destination_id: str, signed: Checked, core: Core) -> Response:
    # Only your own here: shared rooms are managed through the admin API.
    preferences.remove_chat_destination(core, signed.who, destination_id, own_only=True)
    return RedirectResponse("/settings?saved=chat-removed", status_code=303)


@router.post("/settings/push/{subscription_id}/delete")
def settings_delete_push(subscription_id: str, signed: Checked, core: Core) -> Response:
    preferences.unsubscribe(core, signed.who, subscription_id)
    return RedirectResponse("/settings?saved=device-removed", status_code=303)


# --- the service worker and the icon ---------------------------------------------------


@router.get("/favicon.ico")
def favicon() -> Response:
    """Browsers ask for it on every site, whatever the page links: the same bell as
    ``/static/favicon.svg``, as an ICO (16, 32 and 48 px)."""
    return FileResponse(
        STATIC_DIR / "favicon.ico",
        media_type="image/x-icon",
        headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"},
    )


@router.get("/sw.js")
def service_worker() -> Response:
    """At the root so its scope covers every page (no ``Service-Worker-Allowed`` needed);
    ``no-cache`` so a new version is picked up on the next visit."""
    return FileResponse(
        STATIC_DIR / "sw.js",
        media_type="text/javascript; charset=utf-8",
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": PAGE_HEADERS["Content-Security-Policy"],
            "X-Content-Type-Options": "nosniff",
        },
    )
