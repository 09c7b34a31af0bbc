"""Signing in from a browser: ask for a one-time link by email, use it, sign out.

=========================================  ==========================================
``GET  /login``, ``POST /login``           ask for a sign-in link
``GET  /auth/{token}``                     use a one-time link → session
``POST /logout``                           end the session
=========================================  ==========================================

The login form has its own CSRF cookie (there is no session yet). Where the browser was
going when it was sent here is kept in a cookie for ``/auth`` (a link printed by
``runbell user login-link`` names no ``next``). The answer to ``POST /login`` is the same
whether or not the address belongs to anyone: a member's links are queued as an email in
the outbox (:func:`runbell.flows.sessions.request_sign_in`) and sent by the worker — by
this process right after the answer when it runs no worker of its own. A link that
names nothing counts as a failed authentication (:mod:`runbell.flows.auth_failures`): past
the burst, 429 with Retry-After.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote, unquote

import structlog
from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import RedirectResponse, Response

from runbell.api.deps import SESSION_COOKIE, CoreDep
from runbell.dispatch.worker import Worker
from runbell.domain.errors import TooManyAttempts
from runbell.flows import auth_failures, sessions
from runbell.flows.channel_config import smtp_config
from runbell.flows.context import Core
from runbell.i18n import _
from runbell.web import wording
from runbell.web.forms import Checked, CsrfRefused, FormBody, safe_next
from runbell.web.templating import render
from runbell.web.viewer import message

log = structlog.get_logger(__name__)

LOGIN_CSRF_COOKIE = "rb_login_csrf"
# Where the browser was going when it was sent to sign in: used by /auth/{token} when the
# link itself names no ``next`` (a link printed by `runbell user login-link`).
NEXT_COOKIE = "rb_next"

router = APIRouter(include_in_schema=False)


def cookie_secure(core: Core) -> bool:
    return core.settings.public_url.lower().startswith("https://")


def mailbox_path(request: Request) -> str | None:
    """Where mail to this person lands when it is not really sent: the demo's mailbox,
    which ``runbell serve --demo`` registers as ``app.state.mailbox_path`` (a function of
    the request: only this machine may open it). None on any other server."""
    find = getattr(request.app.state, "mailbox_path", None)
    if find is None:
        return None
    path: str | None = find(request)
    return path


@router.get("/login")
def login_page(request: Request, core: CoreDep, next: str | None = None) -> Response:
    target = safe_next(next)
    stale = False
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        if sessions.lookup(core, token) is not None:
            return RedirectResponse(target, status_code=303)
        stale = True
    return _login_form(core, request, target, stale=stale)


def _login_form(
    core: Core,
    request: Request,
    target: str,
    *,
    stale: bool = False,
    notice: str | None = None,
    status: int = 200,
) -> Response:
    login_csrf = request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_urlsafe(32)
    email_enabled = smtp_config(core) is not None
    response = render(
        "login.html.j2",
        {
            "title": _("Sign in"),
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
        secure=cookie_secure(core),
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
            secure=cookie_secure(core),
        )
    return response


@router.post("/login")
def login_submit(
    request: Request, core: CoreDep, form: FormBody, background: BackgroundTasks
) -> Response:
    target = safe_next(form.first("next"))
    expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not expected or not secrets.compare_digest(form.first("csrf_token"), expected):
        raise CsrfRefused()
    if smtp_config(core) is None:
        return _login_form(
            core,
            request,
            target,
            notice=(
                _(
                    "Email sign-in is not set up on this server. Ask an administrator for a "
                    "sign-in link: they can make one with `runbell user login-link`."
                )
            ),
        )
    address = form.first("email").strip()[:320]
    queued = sessions.request_sign_in(core, address, target)
    if queued is not None and getattr(request.app.state, "worker", None) is None:
        # No delivery worker in this process (`runbell api`, an embedder): send this one
        # through the worker's own steps now, after the answer. A worker elsewhere that
        # claims it first sends it instead; never both.
        background.add_task(Worker(core, {}).send_now, queued)
    # The same answer whether or not the address belongs to anyone.
    paragraphs = [
        _(
            "If that address belongs to a member, a sign-in link is on its way. "
            "It works once, for 15 minutes."
        ),
    ]
    link = ("/login", _("Back to sign-in"))
    mailbox = mailbox_path(request)
    if mailbox:
        paragraphs.append(
            _("This is the demo: the mail lands in the demo mailbox, not a real one.")
        )
        link = (mailbox, _("Open the demo mailbox"))
    return message(_("Check your email"), paragraphs, link=link)


@router.get("/auth/{token}")
def use_link(token: str, request: Request, core: CoreDep, next: str | None = None) -> Response:
    outcome = sessions.sign_in(core, token)
    # The token stays out of referrers and caches either way.
    private = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
    if isinstance(outcome, sessions.LinkRefused):
        if outcome.reason == "unknown":
            address = request.client.host if request.client else None
            throttled = auth_failures.failed(core, "sign_in_link", address, credential=token)
            if throttled is not None:
                return _too_many(request, throttled, private)
        text, status = {
            "used": (_("This sign-in link was already used. Each link works only once."), 410),
            "expired": (_("This sign-in link has expired. Links work for 15 minutes."), 410),
            "no_access": (_("This sign-in link is for a membership that was revoked."), 410),
            "unknown": (_("This is not a valid sign-in link."), 404),
        }[outcome.reason]
        return message(
            _("This sign-in link cannot be used"),
            [text, _("Ask for a new link on the sign-in page.")],
            status=status,
            link=("/login", _("Get a new sign-in link")),
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
        secure=cookie_secure(core),
    )
    log.info("web.signed_in", tenant_id=outcome.tenant_id, user_id=outcome.user_id)
    return response


def _too_many(request: Request, refusal: TooManyAttempts, private: dict[str, str]) -> Response:
    """429 past the failed-link burst: a page for a browser, a problem document otherwise."""
    retry = str(refusal.extra["retry_after"])
    if "text/html" not in request.headers.get("accept", ""):
        from runbell.api.problems import problem

        return problem(
            429,
            refusal.title,
            refusal.detail,
            refusal.type_slug,
            headers=private,
            retry_after=retry,
        )
    return message(
        _("Too many sign-in links that do not work"),
        [
            _(
                "This browser's address tried too many sign-in links that are not valid. "
                "Wait {seconds} seconds, then open your link again."
            ).format(seconds=retry),
            _("Ask for a new link on the sign-in page if yours does not work."),
        ],
        status=429,
        link=("/login", _("Get a new sign-in link")),
        headers={**private, "Retry-After": retry},
    )


@router.post("/logout")
def logout(signed: Checked, core: CoreDep) -> Response:
    sessions.sign_out(core, signed.session.id)
    response = RedirectResponse("/login?signed_out=1", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
