"""``runbell.api.routing.include``: every app a process builds gets the same included
routes, built once, and each still answers with its own state and its own settings."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.routing import APIRouter
from fastapi.testclient import TestClient

from runbell.api import routing

router = APIRouter(prefix="/r")


@router.get("/who")
def who(request: Request) -> dict[str, object]:
    return {"app": request.app.state.name, "marked": getattr(request.state, "marked", False)}


def add(app: FastAPI) -> None:
    app.include_router(router)


def marked(request: Request) -> None:
    request.state.marked = True


def app_named(name: str, **options: Any) -> FastAPI:
    app = FastAPI(**options)
    app.state.name = name
    routing.include(app, add)
    return app


def test_apps_share_the_included_routes_and_answer_with_their_own_state() -> None:
    one, two = app_named("one"), app_named("two")
    shared = [r for r in one.router.routes if r in two.router.routes]
    assert shared, "the included entries are the same objects"
    for app, name in ((one, "one"), (two, "two")):
        with TestClient(app) as client:
            assert client.get("/r/who").json() == {"app": name, "marked": False}
    assert one.openapi()["paths"] == two.openapi()["paths"]


def test_other_route_settings_get_their_own_table() -> None:
    plain = app_named("plain")
    guarded = app_named("guarded", dependencies=[Depends(marked)])
    assert guarded.router.routes[-1] is not plain.router.routes[-1]
    with TestClient(guarded) as client:
        assert client.get("/r/who").json() == {"app": "guarded", "marked": True}
    with TestClient(plain) as client:
        assert client.get("/r/who").json() == {"app": "plain", "marked": False}


def test_an_add_that_leaves_more_than_routes_is_refused() -> None:
    """A startup handler (or a low-priority route) left on the template would never run
    for the apps that share its routes: refused when the table is built, not lost."""

    def add_with_startup(app: FastAPI) -> None:
        app.include_router(router)
        app.router.on_startup.append(lambda: None)

    with pytest.raises(RuntimeError, match="more than routes"):
        routing.include(FastAPI(), add_with_startup)
