"""Who is looking at a page, and the pages every part of the web app may answer with:
a message (a heading and a few paragraphs) and "you no longer have access to this"."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from fastapi.responses import Response

from runbell import i18n
from runbell.domain.errors import ValidationFailed
from runbell.domain.principal import Principal, WebSession
from runbell.domain.quiet_hours import zone
from runbell.flows import pages
from runbell.flows.context import Core
from runbell.i18n import _
from runbell.web.templating import render


@dataclass
class Viewer:
    """The signed-in person a page is for: their email, their timezone, their language
    and ``now``."""

    session: WebSession
    email: str
    tz: ZoneInfo
    tz_name: str
    now: datetime
    extra: dict[str, Any] = field(default_factory=dict)
    locale: str = i18n.DEFAULT

    @property
    def who(self) -> Principal:
        return self.session.principal

    def time(self, value: datetime | None, *, seconds: bool = False) -> str:
        return i18n.format_time(value, self.locale, self.tz, seconds=seconds)

    def base(self, page: str, title: str) -> dict[str, Any]:
        return {
            "page": page,
            "title": title,
            "signed_in": True,
            "csrf_token": self.session.csrf_token,
            "me_email": self.email,
            "body_data": {},
            # The People page is for administrators (as /v1/subject-grants).
            "nav_people": self.who.is_admin,
        }


def viewer(core: Core, session: WebSession) -> Viewer:
    facts = pages.viewer(core, session.principal)
    tz_name = facts["timezone"]
    try:
        tz = zone(tz_name)
    except ValidationFailed:
        tz_name, tz = "UTC", ZoneInfo("UTC")
    # From here on this request's texts are in the person's language (before sign-in,
    # web.language chose one from Accept-Language).
    locale = i18n.activate(facts["locale"])
    return Viewer(session, facts["email"], tz, tz_name, core.db.clock(), locale=locale)


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
        _("You no longer have access to this"),
        [
            _(
                "This link does not open anything for you. It may belong to someone else, "
                "or your access to the run it pointed at has changed."
            ),
        ],
        status=status,
        link=("/", _("Go to your inbox")),
        v=v,
    )
