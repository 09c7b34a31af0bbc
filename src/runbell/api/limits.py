"""A request body cap, enforced before anything reads the body (→ 413 problem+json)."""

from __future__ import annotations

import json
import re

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runbell.api.responses import dumps
from runbell.domain.errors import ValidationFailed


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


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


async def reject_lone_surrogates(request: Request) -> None:
    """Refuse JSON that decodes to a lone UTF-16 surrogate (``"\\ud800"``).

    Python accepts it, the database stores it, and then every response that includes
    it fails to encode — a 500 on a write that already committed, and a read that stays
    broken. Checked once per request, only when the raw body has such an escape.
    """
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    body = await request.body()  # cached: the route reads the same bytes
    if not _SURROGATE_ESCAPE.search(body):
        return
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return  # not JSON: the route answers that itself
    try:
        json.dumps(decoded, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationFailed(
            "the body contains a lone UTF-16 surrogate escape (\\ud800-\\udfff); "
            "send valid Unicode text",
            field="body",
        ) from exc
