"""The HTTP API face: it parses, authenticates, calls one flow and renders the answer.

Importing a submodule (``runbell.api.schemas``, which the MCP tools validate their
arguments with) does not load the routers: :func:`install` imports them when the app is
built, so ``runbell mcp`` (stdio) starts without the whole server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from runbell.flows.context import Core

__all__ = ["install"]


def install(app: FastAPI, core: Core, *, listen_host: str | None = None, **kw: Any) -> None:
    """:func:`runbell.api.app.install`, imported on first use."""
    from runbell.api.app import install as install_api

    install_api(app, core, listen_host=listen_host, **kw)
