"""A real MCP server, built with the ``mcp`` SDK, that runs tasks: for the ``mcp_tasks``
state reader's tests.

It serves streamable HTTP on a loopback port under uvicorn, requires a bearer token,
offers a tool ``start_job`` that creates a task (its ``CreateTaskResult`` as the 2025-11-25
revision shapes it), and answers ``tasks/get`` (``-32602`` for an unknown task, as the
specification says). The test moves a task between states with :meth:`set_status`, the
way the server's own worker would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

import mcp.types as types
import uvicorn
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.server import require_client_extension
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from tests.conftest import free_port
from tests.timeouts import WAIT

#: A name no resolver knows; tests resolve it to 127.0.0.1 through the reader's own resolver.
PINNED_NAME = "tasks.mcp.test"

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class TaskServer:
    """The MCP server and its tasks (``task_id → status``)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.tasks: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []
        self.unauthorized = 0
        self.hosts: list[str] = []  # the Host header of every HTTP request
        server = self

        class Tasks(Extension):
            identifier = "io.modelcontextprotocol/tasks"

            def methods(self) -> list[MethodBinding]:
                async def get_task(ctx: Any, params: types.GetTaskRequestParams) -> Any:
                    # Tasks only for clients that declare the extension (SEP-2133).
                    require_client_extension(ctx, self.identifier)
                    server.gets.append(params.task_id)
                    task = server.tasks.get(params.task_id)
                    if task is None:
                        raise MCPError(-32602, f"unknown task {params.task_id!r}")
                    return types.GetTaskResult(**task)

                return [
                    MethodBinding(
                        method="tasks/get",
                        params_type=types.GetTaskRequestParams,
                        handler=get_task,
                    )
                ]

        mcp = MCPServer("runbell-test-tasks", extensions=[Tasks()])

        @mcp.tool()
        def start_job(task_id: str) -> str:
            """Start a job that runs as a task (its id chosen by the caller)."""
            server.create(task_id)
            return task_id

        self.mcp = mcp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        # The SDK's DNS-rebinding guard checks Host: the loopback name, and the made-up
        # name a test resolves to loopback itself (to show the reader dials what it checked).
        security = TransportSecuritySettings(
            allowed_hosts=[f"127.0.0.1:{self.port}", f"{PINNED_NAME}:{self.port}"]
        )
        app = self._bearer_only(mcp.streamable_http_app(transport_security=security))
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)

    def _bearer_only(self, app: ASGIApp) -> ASGIApp:
        expected = f"Bearer {self.token}".encode()

        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.hosts.append(dict(scope["headers"]).get(b"host", b"").decode())
            if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
                self.unauthorized += 1
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            await app(scope, receive, send)

        return guarded

    def create(self, task_id: str) -> None:
        now = _now()
        self.tasks[task_id] = {
            "task_id": task_id,
            "status": "working",
            "status_message": "started",
            "created_at": now,
            "last_updated_at": now,
            "ttl": 600_000,
            "poll_interval": 1000,
        }

    def set_status(self, task_id: str, status: str) -> None:
        task = self.tasks[task_id]
        task.update(status=status, last_updated_at=_now(), status_message=status)

    def __enter__(self) -> TaskServer:
        self.thread.start()
        deadline = time.monotonic() + WAIT
        while not self.uvicorn.started:
            if time.monotonic() > deadline:
                raise RuntimeError("MCP test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=WAIT)
