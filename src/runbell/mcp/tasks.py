"""MCP Tasks for the two long tools, ``await_run`` and ``request_input``: the Tasks
Extension ``io.modelcontextprotocol/tasks`` (SEP-2663, the 2026-07-28 revision), served
through the ``mcp`` SDK's extension interface (``mcp.server.extension``).

A client that declares the extension on a ``tools/call`` of a long tool gets a task at
once (``resultType: "task"``) instead of a bounded wait, then polls ``tasks/get``. No task
is kept in memory: a task id names the Runbell state it waits on
(``request_input/<run_id>/<request_id>``, ``await_run/<run_id>``), and ``tasks/get`` reads
that state through the same tool, for the same caller, so it survives the session, the
process, and a load balancer, and another tenant's task id is unknown. The task is
``working`` while nobody has answered (or the run has not finished) and ``completed``
with the tool's result inlined once it has; a tool error is a ``completed`` task whose
result has ``isError`` (SEP-2663 keeps ``failed`` for protocol errors).

Clients without the extension (and every client on an older protocol revision, where the
SDK does not negotiate extensions) get the bounded wait and its resumable handle.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, CallToolResult, RequestParams, TextContent
from mcp_types.jsonrpc import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

IDENTIFIER = "io.modelcontextprotocol/tasks"
LONG_TOOLS = ("await_run", "request_input")
POLL_INTERVAL_MS = 2000
_VERSIONS = frozenset(MODERN_PROTOCOL_VERSIONS)


class TaskIdParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel`` params: ``{taskId}``."""

    model_config = ConfigDict(populate_by_name=True)
    task_id: str = Field(alias="taskId", min_length=1, max_length=500)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def opted_in(ctx: ServerRequestContext[Any, Any]) -> bool:
    """The client declared the tasks extension for this request (modern revision only)."""
    if ctx.protocol_version not in _VERSIONS:
        return False
    caps = ctx.session.client_capabilities
    return bool(caps and caps.extensions and IDENTIFIER in caps.extensions)


def _unknown(task_id: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=f"unknown or expired task {task_id!r}")


def _payload(result: CallToolResult) -> dict[str, Any]:
    text = result.content[0].text if result.content else "{}"  # type: ignore[union-attr]
    doc: dict[str, Any] = json.loads(text) if not result.is_error else {"error": text}
    return doc


class RunbellTasks(Extension):
    """The tasks extension over the server's own tools (``server.call_tool``)."""

    identifier = IDENTIFIER

    def __init__(self) -> None:
        self.server: MCPServer[Any] | None = None  # bound by build_server

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=_VERSIONS),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=_VERSIONS),
        )

    async def _call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        assert self.server is not None
        try:
            result = await self.server.call_tool(name, arguments)
        except ToolError as exc:
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        assert isinstance(result, CallToolResult)
        return result

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name not in LONG_TOOLS or not opted_in(ctx):
            return await call_next(ctx)
        arguments = {**(params.arguments or {}), "wait_seconds": 0}
        first = await self._call(params.name, arguments)  # opens the request, or looks
        if first.is_error or _payload(first).get("status") != "waiting":
            return first  # failed at once, or already done: no task needed
        doc = _payload(first)
        if params.name == "request_input":
            task_id = f"request_input/{arguments['run_id']}/{doc['handle']}"
        else:
            task_id = f"await_run/{arguments['run_id']}"
        now = _now()
        return {
            "resultType": "task",
            "taskId": task_id,
            "status": "working",
            "statusMessage": doc["message"],
            "createdAt": doc.get("since") or now,
            "lastUpdatedAt": now,
            "ttlMs": None,  # as long as Runbell keeps the run
            "pollIntervalMs": POLL_INTERVAL_MS,
        }

    def _arguments(self, task_id: str) -> tuple[str, dict[str, Any]]:
        tool, _, rest = task_id.partition("/")
        if tool == "await_run" and rest and "/" not in rest:
            return tool, {"run_id": rest, "wait_seconds": 0}
        run_id, _, request_id = rest.partition("/")
        if tool == "request_input" and run_id and request_id and "/" not in request_id:
            return tool, {"run_id": run_id, "handle": request_id, "wait_seconds": 0}
        raise _unknown(task_id)

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        tool, arguments = self._arguments(params.task_id)
        result = await self._call(tool, arguments)
        if result.is_error and "not found" in _payload(result)["error"]:
            raise _unknown(params.task_id)  # including another tenant's
        doc = _payload(result)
        now = _now()
        task: dict[str, Any] = {
            "resultType": "complete",
            "taskId": params.task_id,
            "createdAt": doc.get("since") or now,  # when the request was opened, the run began
            "lastUpdatedAt": now,
            "ttlMs": None,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if not result.is_error and doc.get("status") == "waiting":
            return task | {"status": "working", "statusMessage": doc["message"]}
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return task | {"status": "completed", "result": dumped}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        self._arguments(params.task_id)
        raise MCPError(
            code=INVALID_PARAMS,
            message="a Runbell task waits on durable state and has nothing to stop: stop "
            "polling it; to stop the run itself, call cancel_run",
        )
