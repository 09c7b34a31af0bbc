"""The API reference: Swagger UI at ``/docs`` and ReDoc at ``/redoc``, both rendered from
``/openapi.json`` with bundles this process serves itself.

FastAPI's own pages load their JavaScript and CSS from a public CDN, so on a self-hosted
network without a way out the reference was blank. The bundles come from the
``fastapi-offline`` package (Swagger UI 5 and ReDoc 2, installed with Runbell) and are
served under ``/docs/assets/``; the pages start them with a script of ours instead of an
inline one, so the Content-Security-Policy keeps ``script-src 'self'``. The bundles stay
unchanged; where their colours or markup fail axe-core, ``static/apidocs.css``, ReDoc's theme
options and a small DOM fix-up in ``static/apidocs.js`` put them right (docs/web.md,
Accessibility).
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from runbell.web.templating import DOCS_HEADERS, env

ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs/assets"


def install(app: FastAPI) -> None:
    """Add ``/docs``, ``/redoc`` and their assets to ``app`` (made with ``docs_url=None``
    and ``redoc_url=None``, so FastAPI's CDN pages are not there)."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="api-docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    def page(template: str) -> HTMLResponse:
        html = env.get_template(template).render(
            title=f"{app.title} API reference",
            openapi_url=openapi_url,
            assets=ASSETS_URL,
        )
        return HTMLResponse(html, headers=DOCS_HEADERS)

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return page("apidocs.html.j2")

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return page("redoc.html.j2")
