"""Included routers as one table per process, shared by every application built in it.

FastAPI's ``include_router`` adds a lazy entry: on the first request that walks past it,
each of its endpoints is analysed again (signature, parameters, pydantic adapters) for
that application, although its router did so when the module declared it. A request to
a page walks past every API router first, so an application's first requests cost about
0.1 s of CPU per router set, paid again by each application a process builds: each
``runbell.testing.server()`` in a test suite, each app a test builds. :func:`include`
builds the table once per process and gives every later application the same entries,
whose analysed endpoints they keep.

The entries belong to a template application with the same route settings as the one
they are added to (its dependencies, default response class, prefix, tags, ...), so a
route behaves as if included there; only ``app.dependency_overrides`` does not reach
them (Runbell sets none). What ``include`` adds must be routes only: a router's lifespan
or startup handlers would stay with the template (none of Runbell's routers has one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRouter
from starlette.routing import BaseRoute

#: The route settings an included router takes from the application's router.
INHERITED = (
    "prefix",
    "tags",
    "dependencies",
    "default_response_class",
    "responses",
    "callbacks",
    "deprecated",
    "include_in_schema",
    "generate_unique_id_function",
    "strict_content_type",
    "max_body_size",
)

_tables: dict[Hashable, tuple[BaseRoute, ...]] = {}
_lock = threading.Lock()


def _settings_key(router: APIRouter) -> Hashable:
    def frozen(value: Any) -> Hashable:
        if isinstance(value, list | tuple):
            return tuple(frozen(v) for v in value)
        if isinstance(value, dict):
            return tuple(sorted((repr(k), frozen(v)) for k, v in value.items()))
        dependency = getattr(value, "dependency", None)
        if dependency is not None:  # a Depends(...): a new object per application
            return (type(value), dependency, getattr(value, "use_cache", None))
        if isinstance(value, Hashable):
            return value
        return repr(value)

    return tuple(frozen(getattr(router, name, None)) for name in INHERITED)


def include(app: FastAPI, add: Callable[[FastAPI], None]) -> None:
    """Add to ``app`` the routes that ``add`` (a function of ``include_router`` calls)
    adds to an application, from this process's table for ``add`` and ``app``'s route
    settings, built on first use."""
    key = (add, _settings_key(app.router))
    with _lock:
        routes = _tables.get(key)
        if routes is None:
            template = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
            for name in INHERITED:
                setattr(template.router, name, getattr(app.router, name))
            before = len(template.router.routes)
            add(template)
            # Only routes are carried over: anything else ``add`` left on the template
            # (low-priority routes, startup or shutdown handlers) would be lost silently.
            kept = template.router
            if kept._low_priority_routes or kept.on_startup or kept.on_shutdown:
                raise RuntimeError(f"{add.__qualname__} added more than routes to the app")
            routes = tuple(template.router.routes[before:])
            _tables[key] = routes
    app.router.routes.extend(routes)
