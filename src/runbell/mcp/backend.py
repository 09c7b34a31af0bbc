"""What the MCP tools need from a Runbell, once, so both faces serve the same tools.

A :class:`Backend` is a handful of coroutines that mirror the HTTP contract
(``docs/api.md``): :class:`~runbell.mcp.local.LocalBackend` calls the flows in the
process that serves ``/mcp``; :class:`~runbell.mcp.remote.RemoteBackend` calls a remote
Runbell over HTTP for ``runbell mcp`` (stdio). Both raise :class:`Problem` with the
status, title and detail the API would have answered, so a tool's error reads the same
whichever way it came.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Problem(Exception):
    """An answer other than success: the API's problem document, in short."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{title} ({status}): {detail}")
        self.status = status
        self.title = title
        self.detail = detail


class Backend(Protocol):
    """One caller's view of one tenant (the bearer it authenticated with)."""

    default_owner: str | None
    """Who a new run is for when the tool call names nobody (RUNBELL_OWNER, a header)."""

    async def put_run(self, run_id: str, fields: dict[str, Any]) -> Mapping[str, Any]:
        """``PUT /v1/runs/{run_id}``: the run snapshot."""
        ...

    async def signal(self, run_id: str, body: dict[str, Any]) -> Mapping[str, Any]:
        """``POST /v1/runs/{run_id}/signals``: ``{outcome, run, notifications}``."""
        ...

    async def open_input_request(self, run_id: str, body: dict[str, Any]) -> Mapping[str, Any]:
        """``POST /v1/runs/{run_id}/input-requests``: ``{input_request, run, …}``."""
        ...

    async def get_input_request(self, request_id: str) -> Mapping[str, Any]:
        """``GET /v1/input-requests/{id}``: its ``input_request`` (state, decision, …)."""
        ...

    async def get_run(self, run_id: str) -> Mapping[str, Any]:
        """``GET /v1/runs/{run_id}``: the run snapshot."""
        ...

    async def cancel(self, run_id: str, reason: str | None) -> Mapping[str, Any]:
        """``POST /v1/runs/{run_id}/cancel``: ``{outcome, run}``."""
        ...

    async def attention(self, limit: int) -> Mapping[str, Any]:
        """``GET /v1/runs?group=needs_you,stalled,needs_review,working``: the runs
        overview (an API key has no ``needs_you``: its blocked runs are ``working`` rows in
        ``input_required``)."""
        ...

    async def feed_head(self) -> str:
        """The feed's cursor now (``after=latest``): waits start from here."""
        ...

    async def wait_events(self, after: str, wait: float) -> str:
        """Long-poll the feed after ``after`` for up to ``wait`` seconds; the new cursor.
        Returns early on any committed event of the tenant (the caller re-checks)."""
        ...
