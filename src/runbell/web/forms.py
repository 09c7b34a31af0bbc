"""Sessions, forms and CSRF for the web app's pages.

Every page needs a session (:data:`Session`; without one, a redirect to
``/login?next=…``); every form carries the session's CSRF token, checked
(:data:`Checked`) before anything changes. :func:`safe_next` keeps every "return to"
path on this site.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from runbell.api.deps import web_session
from runbell.domain.principal import Principal, WebSession
from runbell.i18n import _
from runbell.web.viewer import message


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


def install_handlers(app: FastAPI) -> None:
    """Answer :class:`SignInRequired` with the sign-in redirect and :class:`CsrfRefused`
    with a 403 page that says nothing changed."""

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired) -> Response:
        return RedirectResponse(f"/login?next={quote(exc.next_path, safe='/')}", status_code=303)

    api_answer = app.exception_handlers.get(StarletteHTTPException)

    @app.exception_handler(StarletteHTTPException)
    async def _not_here(request: Request, exc: StarletteHTTPException) -> Response:
        # A person who typed or followed a wrong address gets a page, not JSON; the API,
        # and every client that does not ask for HTML, keeps its problem+json answer.
        if exc.status_code in (404, 405) and _wants_page(request):
            return message(
                _("There is no page here"),
                [
                    _("The address may be mistyped, or the page may have moved."),
                    _("Runs and notifications are reached from your inbox."),
                ],
                status=exc.status_code,
                link=("/", _("Go to your inbox")),
            )
        assert api_answer is not None
        answer = api_answer(request, exc)
        return await answer if inspect.isawaitable(answer) else answer

    @app.exception_handler(CsrfRefused)
    async def _csrf(request: Request, exc: CsrfRefused) -> Response:
        return message(
            _("This form has expired"),
            [
                _(
                    "Nothing was changed: the form was not sent from a current Runbell page "
                    "(it may be from an older tab, or another site)."
                ),
                _("Go back, reload the page and try again."),
            ],
            status=403,
        )


#: Paths whose answers are for programs: never an HTML error page.
_API_PREFIXES = ("/v1/", "/mcp", "/openapi.json", "/.well-known/", "/static/", "/docs/assets/")


def _wants_page(request: Request) -> bool:
    """A browser asking for a page: ``GET`` with ``text/html`` accepted, not an API path."""
    path = request.url.path
    return (
        request.method in ("GET", "HEAD")
        and "text/html" in request.headers.get("accept", "")
        and not path.startswith(_API_PREFIXES)
    )
