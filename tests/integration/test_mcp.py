"""The MCP server, driven by the official ``mcp`` SDK's own client session: over stdio
(``.venv/bin/runbell mcp`` as a process, against a live Runbell over HTTP) and over
streamable HTTP (the live server's ``/mcp``). The person answers through the API, from
another thread, as they would from the web app or their phone."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import httpx
import mcp_types
import pytest
from mcp.client.extension import ClaimContext, ResultClaim
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, Field

import runbell
from runbell.flows.context import Core
from runbell.testing import TenantCreds, make_tenant
from tests.conftest import LiveServer, bearer
from tests.integration.test_contract_rules import misfits
from tests.timeouts import WAIT

RUNBELL = str(Path(sys.executable).with_name("runbell"))
TOOLS = {"report_run", "request_input", "await_run", "list_attention", "get_run", "cancel_run"}
TRANSPORTS = ["stdio", "http"]


@asynccontextmanager
async def connect(
    transport: str,
    live: LiveServer,
    key: str,
    owner: str,
    *,
    modern: bool = False,
    **session: Any,
) -> AsyncIterator[ClientSession]:
    """An SDK client session to Runbell's MCP server over ``transport``: initialized
    (protocol 2025-11-25, the handshake), or ``modern`` (2026-07-28: ``server/discover``,
    per-request capabilities, where extensions are negotiated)."""
    if transport == "stdio":
        params = StdioServerParameters(
            command=RUNBELL,
            args=["mcp"],
            env={
                "RUNBELL_URL": live.url,
                "RUNBELL_KEY": key,
                "RUNBELL_OWNER": owner,
                # The runbell under test (a worktree's src/), not what the venv installed.
                "PYTHONPATH": str(Path(runbell.__file__).resolve().parents[1]),
            },
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, **session) as s,
        ):
            await (s.discover() if modern else s.initialize())
            yield s
        return
    http = create_mcp_http_client(headers={**bearer(key), "X-Runbell-Owner": owner})
    async with (
        http,
        streamable_http_client(f"{live.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, **session) as s,
    ):
        await (s.discover() if modern else s.initialize())
        yield s


async def call(s: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await s.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    doc: dict[str, Any] = json.loads(text)
    return doc


async def call_error(s: ClientSession, tool: str, **arguments: Any) -> str:
    result = await s.call_tool(tool, arguments)
    assert result.is_error
    return str(result.content[0].text)  # type: ignore[union-attr]


def in_thread(fn: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def answer_when_asked(
    live: LiveServer, creds: TenantCreds, run_id: str, decision: str, value: str | None = None
) -> Callable[[], None]:
    """The person: waits for the run's pending request to show up, then answers it through
    ``POST /v1/input-requests/{id}/responses`` with their own token."""

    def person() -> None:
        with httpx.Client(
            base_url=live.url, headers=bearer(creds.owner_token), timeout=WAIT
        ) as http:
            for _ in range(400):  # bounded: 20 s at most
                run = http.get(f"/v1/runs/{run_id}")
                pending = run.json().get("pending_input_request") if run.is_success else None
                if pending:
                    break
                time.sleep(0.05)
            else:
                return
            r = http.post(
                f"/v1/input-requests/{pending['id']}/responses",
                json={
                    "decision": decision,
                    "value": value,
                    "expected_run_version": run.json()["version"],
                    "expected_request_version": pending["version"],
                },
                headers={"Idempotency-Key": f"answer-{pending['id']}"},
            )
            assert r.status_code == 200, r.text

    return person


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_lists_the_tools_with_instructions(
    transport: str, modern: bool, live: LiveServer, creds: TenantCreds
) -> None:
    async with connect(transport, live, creds.runtime_key, creds.owner_email, modern=modern) as s:
        listed = await s.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        assert all(t.description for t in listed.tools)
        # Each pattern fits its string's length bounds, as in the OpenAPI document.
        assert [m for t in listed.tools for m in misfits(t.input_schema, t.name)] == []
        instructions = s.instructions or ""
        assert "request_input" in instructions
        assert "handle" in instructions


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_request_input_answered_through_the_api_then_await_run_sees_the_end(
    transport: str, live: LiveServer, creds: TenantCreds
) -> None:
    run_id = f"mcp-{transport}-1"
    async with connect(transport, live, creds.runtime_key, creds.owner_email) as s:
        started = await call(
            s,
            "report_run",
            run_id=run_id,
            state="working",
            title="Refactor",
            notify_on_complete=True,
        )
        assert started == {"run_id": run_id, "outcome": "created", "state": "working", "version": 1}

        person = in_thread(answer_when_asked(live, creds, run_id, "approve"))
        got = await call(
            s, "request_input", run_id=run_id, summary="Deploy to staging?", wait_seconds=30
        )
        person.join(WAIT)
        assert got["status"] == "answered"
        assert got["decision"] == "approve"
        assert got["answered_by"] == creds.owner_email

        with httpx.Client(
            base_url=live.url, headers=bearer(creds.runtime_key), timeout=WAIT
        ) as http:
            run = http.get(f"/v1/runs/{run_id}").json()
            assert run["state"] == "working"  # the answer moved the run on
            assert run["pending_input_request"] is None

        not_yet = await call(s, "await_run", run_id=run_id, wait_seconds=0)
        assert not_yet["status"] == "waiting"
        assert not_yet["handle"] == run_id
        assert "call await_run again" in not_yet["message"].lower()

        def runtime_finishes() -> None:
            time.sleep(0.2)
            with httpx.Client(
                base_url=live.url, headers=bearer(creds.runtime_key), timeout=WAIT
            ) as http:
                r = http.post(
                    f"/v1/runs/{run_id}/signals", json={"event_id": "done-1", "state": "completed"}
                )
                assert r.json()["outcome"] == "applied", r.text

        finisher = in_thread(runtime_finishes)
        done = await call(s, "await_run", run_id=run_id, wait_seconds=30)
        finisher.join(WAIT)
        assert done["status"] == "finished"
        assert done["state"] == "completed"

    with httpx.Client(base_url=live.url, headers=bearer(creds.owner_token), timeout=WAIT) as http:
        inbox = http.get("/v1/notifications").json()
    kinds = {n["attention_type"] for n in inbox["notifications"] if n["run_id"] == run_id}
    assert kinds == {"input_required", "completed"}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_unanswered_request_returns_a_handle_to_call_again_with(
    transport: str, live: LiveServer, creds: TenantCreds
) -> None:
    run_id = f"mcp-{transport}-2"
    async with connect(transport, live, creds.runtime_key, creds.owner_email) as s:
        first = await call(
            s,
            "request_input",
            run_id=run_id,
            summary="Which region?",
            kind="choice",
            options=["eu", "us"],
            wait_seconds=0,
        )
        assert first["status"] == "waiting"
        handle = first["handle"]
        assert handle in first["message"]

        answer_when_asked(live, creds, run_id, "answer", "eu")()
        again = await call(s, "request_input", run_id=run_id, handle=handle, wait_seconds=5)
        assert again["status"] == "answered"
        assert again["value"] == "eu"
        assert again["handle"] == handle
        with httpx.Client(
            base_url=live.url, headers=bearer(creds.runtime_key), timeout=WAIT
        ) as http:
            run = http.get(f"/v1/runs/{run_id}").json()
        assert run["version"] == 3  # created, one request, one answer: no second request


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_another_tenants_run_is_not_found(
    transport: str, live: LiveServer, creds: TenantCreds, core: Core
) -> None:
    other = make_tenant(core, "globex")
    async with connect(transport, live, creds.runtime_key, creds.owner_email) as s:
        await call(s, "report_run", run_id="mine-1", state="working")
    async with connect(transport, live, other.runtime_key, other.owner_email) as s:
        for tool, args in (
            ("get_run", {"run_id": "mine-1"}),
            ("await_run", {"run_id": "mine-1", "wait_seconds": 0}),
            ("cancel_run", {"run_id": "mine-1"}),
        ):
            assert "not found: no run 'mine-1'" in await call_error(s, tool, **args), tool
        listed = await call(s, "list_attention")
        assert "mine-1" not in json.dumps(listed)


async def test_cancel_run_and_list_attention(live: LiveServer, creds: TenantCreds) -> None:
    async with connect("http", live, creds.runtime_key, creds.owner_email) as s:
        await call(s, "request_input", run_id="blocked-1", summary="Go?", wait_seconds=0)
        listed = await call(s, "list_attention")
        assert "blocked-1" in json.dumps(listed)
        stopped = await call(s, "cancel_run", run_id="blocked-1", reason="not needed")
        assert stopped["state"] == "stopping"
        run = await call(s, "get_run", run_id="blocked-1")
        assert run["cancel_requested"]


async def test_a_person_s_token_reads_but_does_not_report(
    live: LiveServer, creds: TenantCreds
) -> None:
    async with connect("http", live, creds.runtime_key, creds.owner_email) as s:
        await call(s, "report_run", run_id="theirs-1", state="working")
    async with connect("http", live, creds.owner_token, creds.owner_email) as s:
        assert (await call(s, "get_run", run_id="theirs-1"))["state"] == "working"
        refused = await call_error(s, "report_run", run_id="theirs-1", state="completed")
        assert "Forbidden (403)" in refused
        assert "API key" in refused


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer rb_nope"}, {"Authorization": "Basic eDp5"}]
)
def test_mcp_over_http_needs_a_good_bearer(live: LiveServer, headers: dict[str, str]) -> None:
    r = httpx.post(
        f"{live.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**headers, "Accept": "application/json"},
        timeout=WAIT,
    )
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["status"] == 401
    # An MCP client (Accept: both media types the transport names) reads a JSON-RPC error.
    r = httpx.post(
        f"{live.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["data"]["status"] == 401


# --- MCP Tasks (the io.modelcontextprotocol/tasks extension, SEP-2663) ------------------

TASKS = "io.modelcontextprotocol/tasks"


class TaskCreated(mcp_types.Result):
    """The claimed ``tools/call`` result of a call the server runs as a task."""

    model_config = ConfigDict(populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class TaskState(mcp_types.Result):
    model_config = ConfigDict(populate_by_name=True)
    result_type: Literal["complete"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str
    created_at: str = Field(alias="createdAt")
    result: dict[str, Any] | None = None


class TaskIdParams(mcp_types.RequestParams):
    model_config = ConfigDict(populate_by_name=True)
    task_id: str = Field(serialization_alias="taskId")


class GetTask(mcp_types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams


async def _not_resolved(created: TaskCreated, ctx: ClaimContext) -> mcp_types.CallToolResult:
    raise AssertionError("the test drives tasks/get itself")


@asynccontextmanager
async def connect_with_tasks(
    transport: str, live: LiveServer, key: str, owner: str
) -> AsyncIterator[ClientSession]:
    claims = {TASKS: [ResultClaim(result_type="task", model=TaskCreated, resolve=_not_resolved)]}
    async with connect(
        transport, live, key, owner, modern=True, extensions={TASKS: {}}, result_claims=claims
    ) as s:
        yield s


async def get_task(s: ClientSession, task_id: str) -> TaskState:
    return await s.send_request(GetTask(params=TaskIdParams(task_id=task_id)), TaskState)


def tool_result(state: TaskState) -> dict[str, Any]:
    assert state.status == "completed" and state.result is not None
    assert not state.result.get("isError")
    doc: dict[str, Any] = json.loads(state.result["content"][0]["text"])
    return doc


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_long_tools_run_as_mcp_tasks_when_the_client_declares_the_extension(
    transport: str, live: LiveServer, creds: TenantCreds, core: Core
) -> None:
    run_id = f"tasked-{transport}"
    async with connect_with_tasks(transport, live, creds.runtime_key, creds.owner_email) as s:
        assert s.protocol_version == "2026-07-28"
        asked = await s.call_tool(
            "request_input", {"run_id": run_id, "summary": "Ship it?"}, allow_claimed=True
        )
        assert isinstance(asked, TaskCreated)
        assert asked.status == "working"
        polled = await get_task(s, asked.task_id)
        assert polled.status == "working"

        answer_when_asked(live, creds, run_id, "reject")()
        answered_task = await get_task(s, asked.task_id)
        assert answered_task.created_at == polled.created_at  # the request's own time
        answered = tool_result(answered_task)
        assert answered["status"] == "answered"
        assert answered["decision"] == "reject"

        waiting = await s.call_tool("await_run", {"run_id": run_id}, allow_claimed=True)
        assert isinstance(waiting, TaskCreated)
        assert (await get_task(s, waiting.task_id)).status == "working"
        with httpx.Client(
            base_url=live.url, headers=bearer(creds.runtime_key), timeout=WAIT
        ) as http:
            http.post(f"/v1/runs/{run_id}/signals", json={"event_id": "f-1", "state": "failed"})
        finished = tool_result(await get_task(s, waiting.task_id))
        assert finished == finished | {"status": "finished", "state": "failed"}

        # Once the run is over, await_run answers at once: no task is needed.
        direct = await s.call_tool("await_run", {"run_id": run_id}, allow_claimed=True)
        assert isinstance(direct, mcp_types.CallToolResult)
        assert json.loads(direct.content[0].text)["state"] == "failed"  # type: ignore[union-attr]

    other = make_tenant(core, "initech")
    async with connect_with_tasks(transport, live, other.runtime_key, other.owner_email) as s:
        with pytest.raises(MCPError) as refused:
            await get_task(s, waiting.task_id)
        assert refused.value.error.code == -32602


async def test_without_the_extension_long_tools_wait_and_hand_back_a_handle(
    live: LiveServer, creds: TenantCreds
) -> None:
    async with connect("http", live, creds.runtime_key, creds.owner_email) as s:
        got = await s.call_tool(
            "request_input", {"run_id": "plain-1", "summary": "Go?", "wait_seconds": 0}
        )
        assert isinstance(got, mcp_types.CallToolResult)
        assert json.loads(got.content[0].text)["status"] == "waiting"  # type: ignore[union-attr]
