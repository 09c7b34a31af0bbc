"""Which language a page is in before anyone signs in: the browser's ``Accept-Language``.

A pure ASGI middleware sets :mod:`runbell.i18n`'s current language for each HTTP request
from the header (:func:`runbell.i18n.negotiate`); a page for a signed-in person then
switches to their preference (:func:`runbell.web.viewer.viewer`). The API's texts are
not translated, so setting it there too changes nothing it says.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from runbell import i18n


class AcceptLanguage:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers") or ():
            if name == b"accept-language":
                header = value.decode("latin-1")
                break
        with i18n.using(i18n.negotiate(header)):
            await self.app(scope, receive, send)
