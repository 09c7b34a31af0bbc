"""Authentication and shared request dependencies.

Two ways in: ``Authorization: Bearer <api key | user token>`` (programs), or the
browser's ``rb_session`` cookie (the web app), used only when no ``Authorization``
header is sent. A cookie-authenticated unsafe request (POST, PUT, PATCH, DELETE) must
also carry the session's CSRF token in ``X-CSRF-Token`` — except device receipts
(``POST /v1/notifications/{id}/receipts``), which the service worker sends without page
context; they are telemetry and never change a decision (invariant 10).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from starlette.concurrency import run_in_threadpool

from runbell.domain.errors import Forbidden, Unauthorized, ValidationFailed
from runbell.domain.principal import APP, Principal, WebSession
from runbell.flows import accounts, auth_failures, sessions
from runbell.flows.context import Core

SESSION_COOKIE = "rb_session"  # the browser session cookie (HttpOnly, SameSite=Lax)
# A person's own app says so with this header and a user token (the SDK's ``as_app=True``):
# its open stream then counts as the person watching, which holds back their pushes. A
# declaration, not a security boundary: it can only quieten that person's own alerts, and a
# plain script (or any API key) never sends it by accident.
CLIENT_HEADER = "x-runbell-client"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Telemetry the service worker posts without a page (and so without the CSRF token).
CSRF_EXEMPT = re.compile(r"^/v1/notifications/[^/]+/receipts$")


# The dependencies below that do no I/O are ``async def``: FastAPI runs a plain ``def``
# dependency in the thread pool, a hop there and back on every request for nothing.


async def get_core(request: Request) -> Core:
    core: Core = request.app.state.core
    return core


CoreDep = Annotated[Core, Depends(get_core)]


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send Authorization: Bearer <api key or user token>")
    return token.strip()


async def web_session(request: Request) -> WebSession | None:
    """The browser session named by the ``rb_session`` cookie, if it is live."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    core: Core = request.app.state.core

    return await run_in_threadpool(sessions.lookup, core, token)


async def principal(request: Request) -> Principal:
    if "authorization" not in request.headers and SESSION_COOKIE in request.cookies:
        session = await web_session(request)
        if session is None:
            raise Unauthorized("your session has ended or your access changed; sign in again")
        if (
            request.method not in SAFE_METHODS
            and not CSRF_EXEMPT.match(request.url.path)
            and not session.csrf_ok(request.headers.get("x-csrf-token"))
        ):
            raise Forbidden("a browser session must send its CSRF token in the X-CSRF-Token header")
        return session.principal
    token = _bearer(request)
    core: Core = request.app.state.core
    # A token this process verified moments ago needs no thread (runtime.credentials).
    who = accounts.remembered(core, token)
    if who is None:
        who = await run_in_threadpool(accounts.authenticate, core, token)
    if who is None:
        address = request.client.host if request.client else None
        throttled = await run_in_threadpool(
            auth_failures.failed, core, "bearer", address, credential=token
        )
        if throttled is not None:
            raise throttled
        raise Unauthorized("unknown, revoked or expired credentials")
    if who.is_user and request.headers.get(CLIENT_HEADER, "").strip().lower() == APP:
        return replace(who, client=APP)
    return who


Who = Annotated[Principal, Depends(principal)]


def require_runtime(who: Principal) -> Principal:
    if who.kind != "key":
        raise Forbidden("this endpoint takes a runtime or admin API key")
    return who


def require_admin(who: Principal) -> Principal:
    if not who.is_admin:
        raise Forbidden("this endpoint needs an admin API key or an admin member")
    return who


def require_user(who: Principal) -> Principal:
    if not who.is_user:
        raise Forbidden("this endpoint takes a user token (a person), not an API key")
    return who


# The same checks as dependencies, ``async`` so that FastAPI calls them inline.
async def _runtime(who: Who) -> Principal:
    return require_runtime(who)


async def _admin(who: Who) -> Principal:
    return require_admin(who)


async def _user(who: Who) -> Principal:
    return require_user(who)


Runtime = Annotated[Principal, Depends(_runtime)]
Admin = Annotated[Principal, Depends(_admin)]
User = Annotated[Principal, Depends(_user)]


def _declared_query(dependant: Dependant) -> frozenset[str]:
    names: set[str] = set()
    stack = [dependant]
    while stack:
        current = stack.pop()
        names.update(param.alias for param in current.query_params)
        stack.extend(current.dependencies)
    return frozenset(names)


_DECLARED: dict[int, frozenset[str]] = {}


async def known_query(request: Request) -> None:
    """Refuse query parameters the route does not declare: 422 naming each of them.

    A misspelled or unsupported filter (``GET /v1/deliveries?notification_id=…``) would
    otherwise be ignored and the answer would look like a filtered one. Every ``/v1``
    route gets this dependency from ``runbell.api.app.install``; the names a route takes
    are its declared query parameters (the OpenAPI document lists them), so the check runs
    before authentication without telling anything that is not public.
    """
    if not request.query_params:
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    declared = _DECLARED.get(id(route))
    if declared is None:
        declared = _DECLARED[id(route)] = _declared_query(dependant)
    unknown = sorted({name for name in request.query_params if name not in declared})
    if unknown:
        accepted = ", ".join(sorted(declared)) or "none"
        raise ValidationFailed(
            f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(n) for n in unknown)}; this operation takes: {accepted}",
            field=unknown[0],
            errors=[{"field": name, "message": "unknown query parameter"} for name in unknown],
        )


KnownQuery = Depends(known_query)


async def runtime_caller(request: Request) -> Principal:
    """:func:`known_query`, :func:`principal` and the runtime check as one dependency.

    The same three checks in the same order (an undeclared query parameter 422 before
    authentication, 401, then 403 for a person), for a route that needs nothing else from
    them: FastAPI spends more per dependency node than these checks cost, and
    ``POST /v1/runs/{id}/signals`` is the hottest route (bench/profile/p1-p2-write-path.md).
    Such a route sits on a router included *without* :data:`KnownQuery`.
    """
    await known_query(request)
    return require_runtime(await principal(request))


RuntimeCaller = Annotated[Principal, Depends(runtime_caller)]
