"""The HTTP backend for ``runbell mcp`` (stdio): the same calls as
:class:`~runbell.mcp.local.LocalBackend`, made to a remote Runbell through the SDK
(:class:`runbell.client.AsyncClient`: retries with stable event ids and idempotency keys,
``Retry-After``, problem documents as typed errors).

Configured like every other integration: ``RUNBELL_URL``, ``RUNBELL_KEY`` (a runtime API
key) and ``RUNBELL_OWNER`` (the email of the person the runs are for), else the file
``runbell login`` writes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from runbell.client import AsyncClient, errors
from runbell.client._core import Call
from runbell.mcp.backend import Problem

T = TypeVar("T")
ATTENTION_GROUPS = "needs_you,stalled,needs_review,working"


class RemoteBackend:
    """A runtime API key's view of a remote Runbell."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.default_owner = client.owner

    @classmethod
    def from_env(cls) -> RemoteBackend:
        try:
            return cls(AsyncClient.from_env())
        except errors.ConfigError as exc:
            raise SystemExit(f"runbell mcp: {exc.detail}") from exc

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _do(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except errors.RunbellError as exc:
            status = exc.status or 503  # None: the server never answered
            raise Problem(status, exc.title or "Runbell unreachable", exc.detail) from exc

    async def put_run(self, run_id: str, fields: dict[str, Any]) -> Mapping[str, Any]:
        return (await self._do(self.client.put_run(run_id, **fields))).raw

    async def signal(self, run_id: str, body: dict[str, Any]) -> Mapping[str, Any]:
        sent = self.client.signal(
            run_id,
            body["state"],
            event_id=body["event_id"],
            reason=body.get("reason"),
            error=body.get("error"),
        )
        return (await self._do(sent)).raw

    async def open_input_request(self, run_id: str, body: dict[str, Any]) -> Mapping[str, Any]:
        opened = self.client.open_input_request(
            run_id,
            summary=body["summary"],
            kind=body["kind"],
            request_id=body["input_request_id"],
            details=body.get("details"),
            options=body.get("options"),
            expires_at=body.get("expires_at"),
            action=body.get("action"),
        )
        return (await self._do(opened)).raw

    async def get_input_request(self, request_id: str) -> Mapping[str, Any]:
        return (await self._do(self.client.get_input_request(request_id))).raw

    async def get_run(self, run_id: str) -> Mapping[str, Any]:
        return (await self._do(self.client.get_run(run_id))).raw

    async def cancel(self, run_id: str, reason: str | None) -> Mapping[str, Any]:
        return (await self._do(self.client.cancel(run_id, reason))).raw

    async def attention(self, limit: int) -> Mapping[str, Any]:
        # The SDK has no runs-overview call yet: its own transport, same retries and errors.
        call = Call("GET", "/v1/runs", params={"group": ATTENTION_GROUPS, "limit": limit})
        page: dict[str, Any] = await self._do(self.client._send(call))
        return page

    async def feed_head(self) -> str:
        return await self._do(self.client.head_cursor())

    async def wait_events(self, after: str, wait: float) -> str:
        try:
            _, cursor = await self._do(self.client.events(after=after, wait=wait, limit=100))
        except Problem as exc:
            if exc.status != 410:
                raise
            return await self.feed_head()  # the caller re-reads the state: nothing is lost
        return cursor
