"""A route whose ordinary requests skip FastAPI's generic request handler.

FastAPI answers every request of a route through one general handler: it parses the
content type with ``email.message``, then walks the route's dependency tree (a dozen
bookkeeping calls per node: cache keys, scopes, generator checks, four parameter kinds),
then validates what it collected. On ``POST /v1/runs/{id}/signals`` that bookkeeping cost
more of the event loop than authenticating the caller and validating the body together
(bench/profile/p1-p2-write-path.md, issue 21).

A :class:`LeanRoute` is an ``APIRoute`` (FastAPI's documented extension point, a custom
``get_route_handler``) that first offers each request to its ``lean`` handler. The lean
handler serves only the common shape — no query string, a JSON object body, every check
passing — and returns None for anything else *before it has answered or changed
anything*; FastAPI's own handler then answers that request from the start, exactly as it
would without this class. So a malformed, unauthenticated or unusual request gets the
very answer it always got (``tests/integration/test_lean_route.py`` sends a table of them
both ways and compares), and the lean path only has to be right about the requests it
keeps.

What a lean handler must do, in FastAPI's order: the app's own dependencies (today
``limits.reject_unstorable``; :func:`app_dependencies_are` checks that nothing was added),
the route's dependencies, then the path parameters and the body, then the endpoint.
FastAPI's native telemetry hooks are not called on the lean path (Runbell configures none).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from runbell.api.limits import reject_unstorable

__all__ = ["LeanRoute", "app_dependencies_are", "json_object"]


class LeanRoute(APIRoute):
    """An ``APIRoute`` trying :meth:`lean` before FastAPI's handler (module docstring).

    Subclass it (a router's ``route_class``) and override :meth:`lean`; ``enabled`` False
    sends every request through FastAPI's handler (the comparison test)."""

    enabled: bool = True

    async def lean(self, request: Request) -> Response | None:
        """The answer, or None — before answering or changing anything — for FastAPI's
        own handler to give it."""
        return None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        stock = super().get_route_handler()

        async def handler(request: Request) -> Response:
            if self.enabled:
                response = await self.lean(request)
                if response is not None:
                    return response
            return await stock(request)

        return handler


def app_dependencies_are(request: Request, *calls: Callable[..., Any]) -> bool:
    """Whether the app's own dependencies (``FastAPI(dependencies=...)``) are exactly
    ``calls``, in order: a lean handler that runs those itself steps aside otherwise."""
    deps = request.app.router.dependencies
    return len(deps) == len(calls) and all(
        d.dependency is c for d, c in zip(deps, calls, strict=True)
    )


async def json_object(request: Request) -> dict[str, Any] | None:
    """The start every lean handler shares: the request's JSON object body, or None —
    before anything is answered or changed — unless it has the common shape (no query
    string, ``Content-Type: application/json``, a body that parses to a JSON object, the
    app's one dependency ``reject_unstorable``). Then, as FastAPI's handler does once it
    has parsed the body, the app's dependency runs (a refusal is raised, as there)."""
    if request.scope.get("query_string") or not app_dependencies_are(request, reject_unstorable):
        return None
    if request.headers.get("content-type") != "application/json":
        return None
    try:
        doc = json.loads(await request.body())
    except HTTPException:
        raise  # the body limit's 413, as FastAPI's handler lets it through
    except Exception:  # not JSON, too deep, a lost client: FastAPI's handler says which
        return None
    if not isinstance(doc, dict):
        return None
    await reject_unstorable(request)
    return doc
