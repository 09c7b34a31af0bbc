"""RFC 9457 problem documents for every error, including framework ones."""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from runbell.api.responses import JSON
from runbell.api.schemas import UNION_TAGS
from runbell.domain.errors import RunbellError

PROBLEM = "application/problem+json"
TYPE_BASE = "https://runbell.dev/problems/"


def problem(
    status: int,
    title: str,
    detail: str,
    slug: str,
    *,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {"type": TYPE_BASE + slug, "title": title, "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    headers = dict(headers or {})
    if "retry_after" in extra:
        headers["Retry-After"] = str(extra["retry_after"])
    return JSON(body, status_code=status, media_type=PROBLEM, headers=headers)


_HTTP = {
    401: ("Unauthorized", "unauthorized"),
    404: ("Not found", "not-found"),
    405: ("Method not allowed", "method-not-allowed"),
    413: ("Content too large", "too-large"),
    415: ("Unsupported media type", "unsupported-media-type"),
}


def _field_name(error: dict[str, Any]) -> str:
    if error.get("type") == "json_invalid":
        return "body"  # the loc holds a byte offset, not a field
    loc = tuple(error.get("loc", ()))
    parts = [
        str(p)
        for p in loc
        # A discriminated union's tag is not a field: "reader.api_key", not
        # "reader.openai_responses.api_key".
        if p not in ("body", "query", "path", "header") and p not in UNION_TAGS
    ]
    return ".".join(parts) or "body"


def _allowed_methods(request: Request) -> str:
    """Every method the path is served with (Starlette's 405 names the first route's only,
    and several routes share a path, e.g. GET and PUT /v1/runs/{run_id})."""
    routes = request.app.router.routes
    return ", ".join(
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    )


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def install(app: FastAPI) -> None:
    @app.exception_handler(RunbellError)
    async def _runbell(_: Request, exc: RunbellError) -> JSONResponse:
        extra = dict(exc.extra)
        if exc.status == 422 and "field" in extra and "errors" not in extra:
            # Same shape as schema errors: clients read one list whatever raised it.
            extra["errors"] = [{"field": extra["field"], "message": exc.detail}]
        return problem(exc.status, exc.title, exc.detail, exc.type_slug, **extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": _field_name(dict(e)), "message": e.get("msg", "invalid")}
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"field": "body", "message": "invalid"}
        return problem(
            422,
            "Invalid request",
            f"{first['field']}: {first['message']}",
            "validation",
            field=first["field"],
            errors=errors,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            # FastAPI's own parse failure (e.g. absurdly deep nesting): a malformed body.
            return problem(
                422,
                "Invalid request",
                "body: the body could not be parsed as JSON",
                "validation",
                field="body",
                errors=[{"field": "body", "message": "could not be parsed"}],
            )
        title, slug = _HTTP.get(exc.status_code, ("Error", f"http-{exc.status_code}"))
        headers = exc.headers
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed_methods(request)}
        return problem(exc.status_code, title, str(exc.detail), slug, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return _internal(exc)

    install_database_unavailable(app)


def _internal(exc: Exception) -> JSONResponse:
    import structlog

    # A plain traceback without locals: request headers must not reach the log.
    structlog.get_logger(__name__).error(
        "api.unhandled",
        error=type(exc).__name__,
        traceback="".join(traceback.format_exception(exc)),
    )
    return problem(
        500,
        "Internal error",
        "the server failed; the error is logged. Retrying with the same event id or "
        "Idempotency-Key is safe",
        "internal",
    )


def install_database_unavailable(app: FastAPI) -> None:
    """Database outages answer 503 ``database-unavailable`` with ``Retry-After``.

    Connection-level errors (``runbell.store.db.unavailable_reason``) are the database's
    state, not a bug: no traceback, and the process logs one warning per outage
    (``Availability``). Other database errors are still 500s with a traceback.
    """
    import sqlalchemy as sa

    from runbell.flows.health import retry_after_s

    async def _database(request: Request, exc: Exception) -> JSONResponse:
        core = getattr(request.app.state, "core", None)
        retry_after = retry_after_s(core, exc) if core is not None else None
        if retry_after is None:
            return _internal(exc)
        return problem(
            503,
            "Service unavailable",
            "the database is unavailable (restarting, unreachable or busy); nothing "
            "failed on your side. Retry after the Retry-After delay with the same event "
            "id or Idempotency-Key: a request that did commit is answered as a duplicate",
            "database-unavailable",
            retry_after=retry_after,
        )

    app.add_exception_handler(sa.exc.DBAPIError, _database)
    app.add_exception_handler(sa.exc.TimeoutError, _database)
