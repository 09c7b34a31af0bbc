"""``/mcp``: the MCP tools over streamable HTTP, inside the app.

Every request carries ``Authorization: Bearer <api key | user token>``, checked exactly
as the API checks it (:func:`runbell.flows.accounts.authenticate`); a missing or unknown
one is a 401 problem document before any MCP message is read. The caller's
:class:`~runbell.mcp.local.LocalBackend` rides a context variable into the SDK's handler
(the SDK's dispatcher carries the request task's context into the tool), so each tool
call runs as that caller, in that tenant: another tenant's run id is "not found".

Stateless streamable HTTP: no MCP session lives in this process, so any process behind a
load balancer can answer any request; what a wait needs is Runbell's own durable state.
``X-Runbell-Owner`` (an email) names the person new runs are for, like ``RUNBELL_OWNER``.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from typing import Any

import anyio.to_thread
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from runbell.api.problems import problem
from runbell.domain.limits import unstorable
from runbell.flows import accounts
from runbell.flows.context import Runbell
from runbell.mcp.backend import Backend
from runbell.mcp.local import LocalBackend
from runbell.mcp.tools import build_server

PATH = "/mcp"
_caller: ContextVar[LocalBackend | None] = ContextVar("runbell_mcp_caller", default=None)


def _backend() -> Backend:
    b = _caller.get()
    if b is None:  # only reachable if the SDK ever dropped the request's context
        raise RuntimeError("no authenticated caller for this MCP request")
    return b


class McpMount:
    """The ``/mcp`` route and the SDK session manager its lifespan must run."""

    def __init__(self, rb: Runbell) -> None:
        self.rb = rb
        self.server = build_server(_backend)
        # The SDK's DNS-rebinding guard protects cookie- or network-trusted local servers;
        # /mcp trusts only the bearer a browser page cannot add, and answers on any host.
        self.server.streamable_http_app(
            stateless_http=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.inner = StreamableHTTPASGIApp(self.server.session_manager)

    def lifespan(self) -> AbstractAsyncContextManager[Any]:
        return self.server.session_manager.run()

    def route(self) -> Route:
        return Route(PATH, endpoint=self, methods=["GET", "POST", "DELETE"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        scheme, _, token = headers.get("authorization", "").partition(" ")
        who = None
        if scheme.lower() == "bearer" and token.strip():
            who = await anyio.to_thread.run_sync(accounts.authenticate, self.rb, token.strip())
        if who is None:
            refusal = problem(
                401,
                "Unauthorized",
                "send Authorization: Bearer <api key or user token>"
                if not token.strip()
                else "unknown, revoked or expired credentials",
                "unauthorized",
                headers={"WWW-Authenticate": 'Bearer realm="runbell"'},
            )
            await refusal(scope, receive, send)
            return
        owner = headers.get("x-runbell-owner", "").strip() or None
        why = unstorable(owner or "")
        if why is not None:  # the character rule (domain.limits), as api.limits applies it
            detail = f"the header 'x-runbell-owner' {why}"
            await problem(422, "Invalid request", detail, "validation", field="x-runbell-owner")(
                scope, receive, send
            )
            return
        reset = _caller.set(LocalBackend(self.rb, who, owner))
        try:
            await self.inner(scope, receive, send)
        finally:
            _caller.reset(reset)
