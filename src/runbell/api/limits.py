"""A request body cap, enforced before anything reads the body (→ 413 problem+json), and
the character rule, checked before anything reads a request (→ 422 naming the field)."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runbell.api.responses import dumps
from runbell.domain.errors import ValidationFailed
from runbell.domain.limits import first_unstorable, unstorable


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` mid-body. An HTTPException, so that FastAPI's body parser
    re-raises it (it turns other errors into a vague 400) and it renders as 413."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body exceeds {max_bytes} bytes")


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = dumps(
            {
                "type": "https://runbell.dev/problems/too-large",
                "title": "Content too large",
                "status": 413,
                "detail": f"request body exceeds {self.max_bytes} bytes",
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# A JSON escape of NUL or of a UTF-16 surrogate; a raw NUL or a form's %00.
_SUSPECT_JSON = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_SUSPECT_FORM = re.compile(rb"%00|\x00")
FORM = "application/x-www-form-urlencoded"


async def reject_unstorable(request: Request) -> None:
    """Refuse text the databases cannot store (``domain.limits``: U+0000, lone
    surrogates) anywhere in a request, before anything reads it: path and query
    parameters, headers, JSON bodies (values and nested keys), form posts.

    PostgreSQL refuses NUL in ``text`` and ``jsonb`` (a 500 after part of the work ran)
    where SQLite stores it; a lone surrogate stores, then every response that includes it
    fails to encode. Either way the same request must get the same answer on both
    databases: a 422 naming the field. Bodies are decoded only when their raw bytes hold
    such an escape, so ordinary requests pay one regular-expression scan.
    """
    for name, value in request.path_params.items():
        _refuse_text(str(value), str(name), "path parameter")
    for name, value in request.query_params.multi_items():
        _refuse_text(name, name, "query parameter name")
        _refuse_text(value, name, "query parameter")
    for name, value in request.headers.items():
        _refuse_text(value, name, "header")
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    body = await request.body()  # cached: the route reads the same bytes
    if request.headers.get("content-type", "").startswith(FORM):
        if _SUSPECT_FORM.search(body):
            text = body.decode("utf-8", "replace")
            for name, value in parse_qsl(text, keep_blank_values=True, max_num_fields=500):
                _refuse_text(name, name, "form field name")
                _refuse_text(value, name, "form field")
        return
    if not _SUSPECT_JSON.search(body):
        return
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return  # not JSON: the route answers that itself
    found = first_unstorable(decoded)
    if found is not None:
        field, why = found
        raise ValidationFailed(f"{field}: {why}; send valid Unicode text", field=field)


def _refuse_text(text: str, field: str, where: str) -> None:
    why = unstorable(text)
    if why is not None:
        raise ValidationFailed(f"the {where} {field!r} {why}", field=_printable(field))


def _printable(name: str) -> str:
    """A field name fit for a problem document (a bad name is shown escaped)."""
    return repr(name)[1:-1] if unstorable(name) is not None else name
