"""The agent receives the edit (issue 19 item 3): the SDK's ``ask(..., editable=...)``
and MCP's ``request_input(editable=...)`` return the approved value with ``edited``; a
callback URL minted through the SDK answers without a key. Against a live server, on
SQLite and PostgreSQL; the person answers through the API from another thread."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx

from runbell.client import AsyncClient, Client
from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.integration.test_mcp import call, connect
from tests.timeouts import WAIT

SCHEMA = {
    "type": "object",
    "properties": {"tasks": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
    "required": ["tasks"],
}


def edit_when_asked(
    live: LiveServer, creds: TenantCreds, run_id: str, value: Any
) -> threading.Thread:
    def person() -> None:
        with httpx.Client(
            base_url=live.url, headers=bearer(creds.owner_token), timeout=WAIT
        ) as http:
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
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
                    "decision": "approve",
                    "value": value,
                    "expected_run_version": run.json()["version"],
                    "expected_request_version": pending["version"],
                },
                headers={"Idempotency-Key": uuid.uuid4().hex},
            )
            assert r.status_code == 200, r.text

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    return thread


def test_the_sdk_ask_returns_the_edited_value(live: LiveServer, creds: TenantCreds) -> None:
    with Client(live.url, creds.runtime_key, creds.owner_email) as rb:
        rb.put_run("sdk-edit", state="working")
        edited = {"tasks": ["migrate", "deploy"]}
        person = edit_when_asked(live, creds, "sdk-edit", edited)
        answer = rb.ask(
            "sdk-edit",
            "Run these tasks?",
            editable={"schema": SCHEMA, "value": {"tasks": ["migrate", "seed", "deploy"]}},
            expires_in=600,
            timeout=WAIT,
        )
        person.join(WAIT)
    assert answer.approved and answer.edited
    assert answer.value == edited


async def test_the_async_sdk_mints_a_callback_url_that_answers(
    live: LiveServer, creds: TenantCreds
) -> None:
    async with AsyncClient(live.url, creds.runtime_key, creds.owner_email) as rb:
        await rb.put_run("sdk-cb", state="working")
        opened = await rb.open_input_request(
            "sdk-cb", summary="Ship it?", expires_in=600, callback=["approve"]
        )
        assert opened.callback_url is not None
        # The URL is under the server's public_url; this test reaches it at live.url.
        path = opened.callback_url[opened.callback_url.index("/v1/callbacks/") :]
        async with httpx.AsyncClient(base_url=live.url, timeout=WAIT) as http:  # no API key
            r = await http.post(path, json={"decision": "approve"})
        assert r.status_code == 200, r.text
        answer = await rb.wait_for_answer(opened.input_request.id, timeout=WAIT)
    assert answer.approved and answer.answered_by == opened.raw["callback"]["id"]


async def test_mcp_request_input_returns_the_edited_value(
    live: LiveServer, creds: TenantCreds
) -> None:
    async with connect("http", live, creds.runtime_key, creds.owner_email) as s:
        await call(s, "report_run", run_id="mcp-edit", state="working", title="Chores")
        edited = {"tasks": ["lint"]}
        person = edit_when_asked(live, creds, "mcp-edit", edited)
        got = await call(
            s,
            "request_input",
            run_id="mcp-edit",
            summary="Run these tasks?",
            editable={"schema": SCHEMA, "value": {"tasks": ["lint", "format"]}},
            wait_seconds=30,
        )
        person.join(WAIT)
    assert got["status"] == "answered" and got["decision"] == "approve"
    assert got["edited"] is True and got["value"] == edited
    assert "edited value" in got["message"]
