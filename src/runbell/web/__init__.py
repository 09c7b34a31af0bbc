"""The web app face: server-rendered pages, static files, the service worker and the API
reference, added to the application ``runbell.app.create_app`` builds."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI


def install(app: FastAPI) -> None:
    """Add the pages, static files, the service worker and ``/docs`` + ``/redoc``."""
    from runbell.web import apidocs, routes

    routes.install(app)
    apidocs.install(app)
