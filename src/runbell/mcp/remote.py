"""The HTTP backend for ``runbell mcp`` (stdio): the same calls as
:class:`~runbell.mcp.local.LocalBackend`, made to a remote Runbell's API.

Configured by ``RUNBELL_URL``, ``RUNBELL_KEY`` (a runtime API key) and ``RUNBELL_OWNER``
(the email of the person the runs are for), like every other integration.
"""

from __future__ import annotations

import os
import uuid
from typing import Any
from urllib.parse import quote

import httpx

from runbell.mcp.backend import Problem

ATTENTION_GROUPS = "needs_you,stalled,needs_review,working"


class RemoteBackend:
    """A runtime API key's view of a remote Runbell."""

    def __init__(
        self,
        url: str,
        key: str,
        default_owner: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.default_owner = default_owner
        # Long-polls hold a request for up to 30 s: the read timeout is above that.
        self.http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {key}", "User-Agent": "runbell-mcp"},
            timeout=httpx.Timeout(10.0, read=45.0),
            transport=transport,
        )

    @classmethod
    def from_env(cls) -> RemoteBackend:
        url = os.environ.get("RUNBELL_URL", "").strip()
        key = os.environ.get("RUNBELL_KEY", "").strip()
        if not url or not key:
            raise SystemExit("runbell mcp: set RUNBELL_URL and RUNBELL_KEY (a runtime API key)")
        return cls(url, key, os.environ.get("RUNBELL_OWNER", "").strip() or None)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _send(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            r = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise Problem(503, "Runbell unreachable", f"{type(exc).__name__}: {exc}") from exc
        if r.status_code >= 400:
            try:
                doc = r.json()
            except ValueError:
                doc = {}
            raise Problem(
                r.status_code,
                str(doc.get("title") or r.reason_phrase),
                str(doc.get("detail") or r.text[:200]),
            )
        out: dict[str, Any] = r.json()
        return out

    async def put_run(self, run_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        return await self._send("PUT", f"/v1/runs/{_seg(run_id)}", json=fields)

    async def signal(self, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._send("POST", f"/v1/runs/{_seg(run_id)}/signals", json=body)

    async def open_input_request(self, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._send("POST", f"/v1/runs/{_seg(run_id)}/input-requests", json=body)

    async def get_input_request(self, request_id: str) -> dict[str, Any]:
        return await self._send("GET", f"/v1/input-requests/{_seg(request_id)}")

    async def get_run(self, run_id: str) -> dict[str, Any]:
        return await self._send("GET", f"/v1/runs/{_seg(run_id)}")

    async def cancel(self, run_id: str, reason: str | None) -> dict[str, Any]:
        return await self._send(
            "POST",
            f"/v1/runs/{_seg(run_id)}/cancel",
            json={"reason": reason} if reason else {},
            headers={"Idempotency-Key": f"mcp-{uuid.uuid4().hex}"},
        )

    async def attention(self, limit: int) -> dict[str, Any]:
        return await self._send(
            "GET", "/v1/runs", params={"group": ATTENTION_GROUPS, "limit": limit}
        )

    async def feed_head(self) -> str:
        page = await self._send("GET", "/v1/events", params={"after": "latest", "limit": 1})
        return str(page["next_cursor"])

    async def wait_events(self, after: str, wait: float) -> str:
        try:
            page = await self._send(
                "GET", "/v1/events", params={"after": after, "limit": 100, "wait": wait}
            )
        except Problem as exc:
            if exc.status != 410:
                raise
            return await self.feed_head()  # the caller re-reads the state: nothing is lost
        return str(page["next_cursor"])


def _seg(value: str) -> str:
    return quote(value, safe="")
