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
from typing import Any

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from runbell.flows.context import Runbell
from runbell.testing import TenantCreds, make_tenant
from tests.conftest import LiveServer, bearer

RUNBELL = str(Path(sys.executable).with_name("runbell"))
TOOLS = {"report_run", "request_input", "await_run", "list_attention", "get_run", "cancel_run"}
TRANSPORTS = ["stdio", "http"]


@asynccontextmanager
async def connect(
    transport: str, live: LiveServer, key: str, owner: str
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session to Runbell's MCP server over ``transport``."""
    if transport == "stdio":
        params = StdioServerParameters(
            command=RUNBELL,
            args=["mcp"],
            env={"RUNBELL_URL": live.url, "RUNBELL_KEY": key, "RUNBELL_OWNER": owner},
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            yield s
        return
    http = create_mcp_http_client(headers={**bearer(key), "X-Runbell-Owner": owner})
    async with (
        http,
        streamable_http_client(f"{live.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
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
        with httpx.Client(base_url=live.url, headers=bearer(creds.owner_token)) as http:
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


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_lists_the_tools_with_instructions(
    transport: str, live: LiveServer, creds: TenantCreds
) -> None:
    async with connect(transport, live, creds.runtime_key, creds.owner_email) as s:
        listed = await s.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        assert all(t.description for t in listed.tools)
        instructions = s.instructions or ""
        assert "request_input" in instructions
        assert "handle" in instructions


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_request_input_answered_through_the_api_then_await_run_sees_the_end(
    transport: str, live: LiveServer, creds: TenantCreds
) -> None:
    run_id = f"mcp-{transport}-1"
    async with connect(transport, live, creds.runtime_key, creds.owner_email) as s:
        started = await call(s, "report_run", run_id=run_id, state="working", title="Refactor")
        assert started == {"run_id": run_id, "outcome": "created", "state": "working", "version": 1}

        person = in_thread(answer_when_asked(live, creds, run_id, "approve"))
        got = await call(
            s, "request_input", run_id=run_id, summary="Deploy to staging?", wait_seconds=30
        )
        person.join(5)
        assert got["status"] == "answered"
        assert got["decision"] == "approve"
        assert got["answered_by"] == creds.owner_email

        with httpx.Client(base_url=live.url, headers=bearer(creds.runtime_key)) as http:
            run = http.get(f"/v1/runs/{run_id}").json()
            assert run["state"] == "working"  # the answer moved the run on
            assert run["pending_input_request"] is None

        not_yet = await call(s, "await_run", run_id=run_id, wait_seconds=0)
        assert not_yet["status"] == "waiting"
        assert not_yet["handle"] == run_id
        assert "call await_run again" in not_yet["message"].lower()

        def runtime_finishes() -> None:
            time.sleep(0.2)
            with httpx.Client(base_url=live.url, headers=bearer(creds.runtime_key)) as http:
                r = http.post(
                    f"/v1/runs/{run_id}/signals", json={"event_id": "done-1", "state": "completed"}
                )
                assert r.json()["outcome"] == "applied", r.text

        finisher = in_thread(runtime_finishes)
        done = await call(s, "await_run", run_id=run_id, wait_seconds=30)
        finisher.join(5)
        assert done["status"] == "finished"
        assert done["state"] == "completed"


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
        with httpx.Client(base_url=live.url, headers=bearer(creds.runtime_key)) as http:
            run = http.get(f"/v1/runs/{run_id}").json()
        assert run["version"] == 3  # created, one request, one answer: no second request


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_another_tenants_run_is_not_found(
    transport: str, live: LiveServer, creds: TenantCreds, core: Runbell
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


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer rb_nope"}, {"Authorization": "Basic eDp5"}]
)
def test_mcp_over_http_needs_a_good_bearer(live: LiveServer, headers: dict[str, str]) -> None:
    r = httpx.post(
        f"{live.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["status"] == 401
