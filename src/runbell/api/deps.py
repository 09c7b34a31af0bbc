"""Authentication and shared request dependencies."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from runbell.core import Runbell
from runbell.domain.errors import Forbidden, Unauthorized
from runbell.store import accounts
from runbell.store.accounts import Principal


def get_core(request: Request) -> Runbell:
    core: Runbell = request.app.state.core
    return core


Core = Annotated[Runbell, Depends(get_core)]


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send Authorization: Bearer <api key or user token>")
    return token.strip()


async def principal(request: Request) -> Principal:
    token = _bearer(request)
    core: Runbell = request.app.state.core

    def lookup() -> Principal | None:
        with core.db.read() as conn:
            return accounts.authenticate(conn, token, core.db.clock())

    who = await run_in_threadpool(lookup)
    if who is None:
        raise Unauthorized("unknown, revoked or expired credentials")
    return who


Who = Annotated[Principal, Depends(principal)]


def require_runtime(who: Who) -> Principal:
    if who.kind != "key":
        raise Forbidden("this endpoint takes a runtime or admin API key")
    return who


def require_admin(who: Who) -> Principal:
    if not who.is_admin:
        raise Forbidden("this endpoint needs an admin API key or an admin member")
    return who


def require_user(who: Who) -> Principal:
    if not who.is_user:
        raise Forbidden("this endpoint takes a user token (a person), not an API key")
    return who


Runtime = Annotated[Principal, Depends(require_runtime)]
Admin = Annotated[Principal, Depends(require_admin)]
User = Annotated[Principal, Depends(require_user)]
