"""The files a browser asks for at fixed paths: the service worker (at the root, so its
scope covers every page) and the icon; everything else is under ``/static``.

=========================================  ==========================================
``GET  /sw.js``                            the service worker (root scope)
``GET  /favicon.ico``                      the icon
``GET  /manifest.webmanifest``             the web app manifest (Home Screen apps)
``GET  /static/…``                         styles, scripts, images
=========================================  ==========================================
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response

from runbell.web.templating import PAGE_HEADERS

STATIC_DIR = Path(__file__).parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/favicon.ico")
def favicon() -> Response:
    """Browsers ask for it on every site, whatever the page links: the same bell as
    ``/static/favicon.svg``, as an ICO (16, 32 and 48 px)."""
    return FileResponse(
        STATIC_DIR / "favicon.ico",
        media_type="image/x-icon",
        headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"},
    )


@router.get("/sw.js")
def service_worker() -> Response:
    """At the root so its scope covers every page (no ``Service-Worker-Allowed`` needed);
    ``no-cache`` so a new version is picked up on the next visit."""
    return FileResponse(
        STATIC_DIR / "sw.js",
        media_type="text/javascript; charset=utf-8",
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": PAGE_HEADERS["Content-Security-Policy"],
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.get("/manifest.webmanifest")
def manifest() -> Response:
    """What a page added to a Home Screen opens as: standalone, which iOS and iPadOS
    require before they offer web push to it."""
    return FileResponse(
        STATIC_DIR / "manifest.webmanifest",
        media_type="application/manifest+json",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )
