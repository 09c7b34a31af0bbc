"""``/mcp``: the MCP tools over streamable HTTP, inside the app.

Every request carries ``Authorization: Bearer <api key | user token>``, checked exactly
as the API checks it (:func:`runbell.flows.accounts.authenticate`); a missing or unknown
one is a 401 before any MCP message is read, whose ``WWW-Authenticate`` points at the
OAuth 2.0 Protected Resource Metadata (RFC 9728) served at
``/.well-known/oauth-protected-resource/mcp``: a bearer in the header, and no
authorization server, so an MCP client can tell its user to configure a key instead of
starting an OAuth flow that cannot succeed. A token that does not check out counts as a
failed authentication (:mod:`runbell.flows.auth_failures`; 429 past the burst).

Before that, ``Host`` and ``Origin`` are checked (:mod:`runbell.domain.origins`: the
address the request came in on, ``RUNBELL_PUBLIC_URL``, ``RUNBELL_MCP_ALLOWED_HOSTS`` and
``RUNBELL_MCP_ALLOWED_ORIGINS``): a page on another origin, or a name re-pointed at this
machine (DNS rebinding), gets 403. The SDK's own guard stays off: it knows neither the
socket's address nor the public URL, and answers in plain text.

A refusal is an RFC 9457 problem document, except to an MCP client (a POST whose
``Accept`` names both ``application/json`` and ``text/event-stream``, as the transport
requires, and not ``application/problem+json``): it gets the same status and headers
with a JSON-RPC error whose ``data`` is that problem document, the one shape its SDK
reads, so the person sees "Unauthorized: …" rather than "the server returned an error".

The caller's :class:`~runbell.mcp.local.LocalBackend` rides a context variable into the
SDK's handler (the SDK's dispatcher carries the request task's context into the tool),
so each tool call runs as that caller, in that tenant: another tenant's run id is "not
found".

Stateless streamable HTTP: no MCP session lives in this process, so any process behind a
load balancer can answer any request; what a wait needs is Runbell's own durable state.
``X-Runbell-Owner`` (an email) names the person new runs are for, like ``RUNBELL_OWNER``.

The ``mcp`` SDK is imported, and the tools built, on the first request that passes the
checks above (in a worker thread, while that request waits), not when the app is made:
together they were a third of every server start (about 1.5 s of CPU on a 2-core
machine), paid by every ``runbell api`` and ``runbell serve`` whether or not an MCP
client ever calls.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import structlog
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from runbell.api.problems import TYPE_BASE, problem
from runbell.api.responses import JSON
from runbell.domain.errors import RunbellError
from runbell.domain.limits import unstorable
from runbell.domain.origins import Guard, parse_authority
from runbell.flows import accounts, auth_failures
from runbell.flows.context import Core
from runbell.mcp.backend import Backend
from runbell.mcp.local import LocalBackend

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )

log = structlog.get_logger(__name__)

PATH = "/mcp"
WELL_KNOWN = "/.well-known/oauth-protected-resource"
#: JSON-RPC error code of a refusal before any MCP message is read (implementation range).
REFUSED = -32001
_caller: ContextVar[LocalBackend | None] = ContextVar("runbell_mcp_caller", default=None)


def _backend() -> Backend:
    b = _caller.get()
    if b is None:  # only reachable if the SDK ever dropped the request's context
        raise RuntimeError("no authenticated caller for this MCP request")
    return b


def _guard(core: Core) -> Guard:
    s = core.settings
    return Guard.of(s.public_url, s.mcp_allowed_hosts, s.mcp_allowed_origins)


def _server(scope: Scope) -> tuple[str, int] | None:
    server = scope.get("server")
    return (str(server[0]), int(server[1] or 0)) if server else None


def base_url(core: Core, scope: Scope) -> str:
    """The base the caller reached this server at, for the links a refusal or the metadata
    document gives: ``RUNBELL_PUBLIC_URL`` when the request's Host is its host (or names
    nothing this server answers to), else the scheme and Host the request used."""
    public = core.public_url
    host = Headers(scope=scope).get("host")
    if host is None or _guard(core).refusal(host, None, _server(scope)) is not None:
        return public
    named, ours = parse_authority(host), parse_authority(urlsplit(public).netloc)
    if named is not None and ours is not None and ours.matches(named):
        return public
    return f"{scope.get('scheme', 'http')}://{host}"


def protected_resource(base: str, path: str) -> dict[str, Any]:
    """RFC 9728 metadata for the resource at ``base + path``: bearer tokens in the
    ``Authorization`` header, no authorization server (Runbell issues its own keys)."""
    return {
        "resource": base + path,
        "resource_name": "Runbell",
        "bearer_methods_supported": ["header"],
        "resource_documentation": f"{base}/docs",
    }


def _wants_jsonrpc(scope: Scope) -> bool:
    accept = Headers(scope=scope).get("accept", "").lower()
    return (
        scope.get("method") == "POST"
        and "application/json" in accept
        and "text/event-stream" in accept
        and "application/problem+json" not in accept
    )


def refusal(
    scope: Scope,
    status: int,
    title: str,
    detail: str,
    slug: str,
    headers: dict[str, str] | None = None,
) -> Response:
    """A refusal in the shape the caller reads (see the module docstring)."""
    if not _wants_jsonrpc(scope):
        return problem(status, title, detail, slug, headers=headers)
    doc = {"type": TYPE_BASE + slug, "title": title, "status": status, "detail": detail}
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": REFUSED, "message": f"{title}: {detail}", "data": doc},
    }
    return JSON(body, status_code=status, headers=headers)


@cache
def _shared_server() -> MCPServer[Any]:
    """The MCP server behind every app of this process, built once: its tools depend on
    nothing but :func:`_backend` (the caller comes from a context variable), and building
    them (a pydantic model and a JSON schema per tool) is most of what making an app
    costs."""
    from runbell.mcp.tools import build_server  # the SDK: see the module docstring

    return build_server(_backend)


_mounting = threading.Lock()


def _new_manager() -> StreamableHTTPSessionManager:
    """A session manager for one app, on the shared server (imports the SDK the first
    time; called in a worker thread)."""
    from mcp.server.transport_security import TransportSecuritySettings

    with _mounting:  # the SDK keeps the manager it just made on the server: take ours
        server = _shared_server()
        # Host and Origin are checked in McpMount.__call__, before the SDK sees a request.
        server.streamable_http_app(
            stateless_http=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager: StreamableHTTPSessionManager = server.session_manager
        return manager


class McpMount:
    """The ``/mcp`` route, its metadata documents, and the SDK session manager its
    lifespan must run (one per app: a manager runs once; the server behind it is shared).

    The manager is made on the first request that needs it (module docstring): the
    lifespan runs a task that waits for that request, makes the manager in a thread and
    runs it until the app stops, so the manager's task group lives in the lifespan's, as
    the SDK requires, while the request that asked waits for it to be ready.
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        self._handler: StreamableHTTPASGIApp | None = None  # once the manager runs
        self._failure: BaseException | None = None
        # Made by the lifespan, on the server's event loop.
        self._wanted: anyio.Event | None = None
        self._ready: anyio.Event | None = None

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        wanted, ready, stop = anyio.Event(), anyio.Event(), anyio.Event()
        self._wanted, self._ready = wanted, ready
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._run, wanted, ready, stop)
            try:
                yield
            finally:
                stop.set()
                wanted.set()  # a manager never asked for is never made

    async def _run(self, wanted: anyio.Event, ready: anyio.Event, stop: anyio.Event) -> None:
        """Make and run the session manager once a request wants it, until ``stop``."""
        try:
            await wanted.wait()
            if stop.is_set():
                return
            try:
                manager = await anyio.to_thread.run_sync(_new_manager)
            except Exception as exc:  # the request that asked answers 500, with the cause
                log.exception("mcp.unavailable")
                self._failure = exc
                return
            from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

            async with manager.run():
                self._handler = StreamableHTTPASGIApp(manager)
                ready.set()
                await stop.wait()
        finally:
            self._handler = None
            ready.set()  # nobody waits for a manager that will not come

    async def _sdk(self) -> StreamableHTTPASGIApp:
        """The SDK's ASGI app, started on the first call."""
        if self._handler is None:
            if self._wanted is None or self._ready is None:
                raise RuntimeError("the /mcp endpoint needs the app's lifespan to run")
            self._wanted.set()
            await self._ready.wait()
            if self._handler is None:
                raise RuntimeError("the /mcp endpoint is not available") from self._failure
        return self._handler

    def routes(self) -> list[BaseRoute]:
        return [
            Route(PATH, endpoint=self, methods=["GET", "POST", "DELETE"]),
            Route(WELL_KNOWN, endpoint=self.metadata, methods=["GET"]),
            Route(WELL_KNOWN + PATH, endpoint=self.metadata, methods=["GET"]),
        ]

    async def metadata(self, request: Request) -> Response:
        path = request.url.path.removeprefix(WELL_KNOWN)
        doc = protected_resource(base_url(self.core, request.scope), path)
        return JSON(doc, headers={"Cache-Control": "max-age=300"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        refused = _guard(self.core).refusal(
            headers.get("host"), headers.get("origin"), _server(scope)
        )
        if refused is not None:
            await refusal(scope, 403, "Forbidden", refused, "forbidden-origin")(
                scope, receive, send
            )
            return
        scheme, _, token = headers.get("authorization", "").partition(" ")
        token = token.strip()
        who = None
        if scheme.lower() == "bearer" and token:
            who = await anyio.to_thread.run_sync(accounts.authenticate, self.core, token)
        if who is None:
            answer = await self._unauthorized(scope, token if scheme.lower() == "bearer" else "")
            await answer(scope, receive, send)
            return
        owner = headers.get("x-runbell-owner", "").strip() or None
        why = unstorable(owner or "")
        if why is not None:  # the character rule (domain.limits), as api.limits applies it
            detail = f"the header 'x-runbell-owner' {why}"
            await problem(422, "Invalid request", detail, "validation", field="x-runbell-owner")(
                scope, receive, send
            )
            return
        sdk = await self._sdk()
        reset = _caller.set(LocalBackend(self.core, who, owner))
        try:
            await sdk(scope, receive, send)
        finally:
            _caller.reset(reset)

    async def _unauthorized(self, scope: Scope, token: str) -> Response:
        meta = f"{base_url(self.core, scope)}{WELL_KNOWN}{PATH}"
        challenge = f'Bearer realm="runbell", resource_metadata="{meta}"'
        if not token:
            detail = (
                "send Authorization: Bearer <api key or user token>; Runbell issues its own "
                "keys (runbell key create), there is no OAuth sign-in"
            )
            return refusal(
                scope, 401, "Unauthorized", detail, "unauthorized", {"WWW-Authenticate": challenge}
            )
        client = scope.get("client")
        throttled: RunbellError | None = await anyio.to_thread.run_sync(
            lambda: auth_failures.failed(
                self.core, "bearer", client[0] if client else None, credential=token
            )
        )
        if throttled is not None:
            retry = str(throttled.extra["retry_after"])
            return refusal(
                scope,
                429,
                throttled.title,
                throttled.detail,
                throttled.type_slug,
                {"Retry-After": retry},
            )
        challenge += ', error="invalid_token"'
        return refusal(
            scope,
            401,
            "Unauthorized",
            "unknown, revoked or expired credentials",
            "unauthorized",
            {"WWW-Authenticate": challenge},
        )
