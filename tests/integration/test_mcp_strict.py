"""MCP tool arguments are as strict as the HTTP API (issue 16 row 10: ``"yes"`` was taken
for ``notify_on_complete``). Every tool, given a wrong type for each of its parameters,
refuses naming that parameter and changes nothing; the rules the API's own models hold
(``runbell.api.schemas``, strict) hold for the tools too."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.integration.test_mcp import call, call_error, connect

WRONG: list[tuple[str, dict[str, Any], str]] = [
    # (tool, arguments, the parameter the refusal must name)
    ("report_run", {"run_id": "s-1", "notify_on_complete": "yes"}, "notify_on_complete"),
    ("report_run", {"run_id": "s-1", "notify_on_complete": 1}, "notify_on_complete"),
    ("report_run", {"run_id": "s-1", "notify_on_complete": "true"}, "notify_on_complete"),
    ("report_run", {"run_id": 5}, "run_id"),
    ("report_run", {"run_id": "no spaces"}, "run_id"),
    ("report_run", {"run_id": "s-1", "state": "done"}, "state"),
    ("report_run", {"run_id": "s-1", "state": True}, "state"),
    ("report_run", {"run_id": "s-1", "title": 5}, "title"),
    ("report_run", {"run_id": "s-1", "objective": ["x"]}, "objective"),
    ("report_run", {"run_id": "s-1", "state": "failed", "reason": True}, "reason"),
    ("report_run", {"run_id": "s-1", "state": "failed", "error": {"m": 1}}, "error"),
    ("report_run", {"run_id": "s-1", "owner": 5}, "owner"),
    ("report_run", {"run_id": "s-1", "state": "working", "event_id": 7}, "event_id"),
    # Only the API's model knows this one (SignalIn.event_id: at least 1 character).
    ("report_run", {"run_id": "s-1", "state": "completed", "event_id": ""}, "event_id"),
    ("request_input", {"run_id": 5, "summary": "Go?"}, "run_id"),
    ("request_input", {"run_id": "s-2", "summary": 5}, "summary"),
    ("request_input", {"run_id": "s-2", "summary": "Go?", "kind": "maybe"}, "kind"),
    ("request_input", {"run_id": "s-2", "summary": "Go?", "options": "eu"}, "options"),
    ("request_input", {"run_id": "s-2", "summary": "Go?", "options": [1, 2]}, "options"),
    ("request_input", {"run_id": "s-2", "summary": "Go?", "details": "x"}, "details"),
    (
        "request_input",
        {"run_id": "s-2", "summary": "Go?", "expires_in_seconds": "600"},
        "expires_in_seconds",
    ),
    (
        "request_input",
        {"run_id": "s-2", "summary": "Go?", "expires_in_seconds": 600.0},
        "expires_in_seconds",
    ),
    ("request_input", {"run_id": "s-2", "handle": 5}, "handle"),
    ("request_input", {"run_id": "s-2", "summary": "Go?", "wait_seconds": "5"}, "wait_seconds"),
    ("request_input", {"run_id": "s-2", "summary": "Go?", "owner": 5}, "owner"),
    # The option becomes an OptionIn: its id holds at most 100 characters.
    ("request_input", {"run_id": "s-2", "summary": "Go?", "options": ["x" * 101]}, "options"),
    ("await_run", {"run_id": 5}, "run_id"),
    ("await_run", {"run_id": "s-3", "wait_seconds": "5"}, "wait_seconds"),
    ("await_run", {"run_id": "s-3", "wait_seconds": True}, "wait_seconds"),
    ("list_attention", {"limit": "10"}, "limit"),
    ("list_attention", {"limit": 10.0}, "limit"),
    ("list_attention", {"limit": True}, "limit"),
    ("get_run", {"run_id": 5}, "run_id"),
    ("get_run", {"run_id": None}, "run_id"),
    ("cancel_run", {"run_id": 5}, "run_id"),
    ("cancel_run", {"run_id": "s-4", "reason": 5}, "reason"),
    ("cancel_run", {"run_id": "s-4", "reason": "r" * 501}, "reason"),
]


def test_every_tool_is_in_the_table() -> None:
    from runbell.mcp.tools import TOOL_NAMES

    assert {tool for tool, _, _ in WRONG} == set(TOOL_NAMES)


async def test_wrong_types_are_refused_naming_the_parameter(
    live: LiveServer, creds: TenantCreds
) -> None:
    async with connect("http", live, creds.runtime_key, creds.owner_email) as s:
        for tool, arguments, field in WRONG:
            text = await call_error(s, tool, **arguments)
            assert field in text, (tool, arguments, text)
        # The same calls with the right types work (so the table tests the types).
        await call(s, "report_run", run_id="s-1", state="working", notify_on_complete=True)
        await call(s, "request_input", run_id="s-2", summary="Go?", wait_seconds=0)
        await call(s, "list_attention", limit=10)
    with httpx.Client(base_url=live.url, headers=bearer(creds.runtime_key)) as http:
        run = http.get("/v1/runs/s-1").json()
        # Refused calls changed nothing: one version, no completion, no second request.
        assert (run["version"], run["state"], run["notify_on_complete"]) == (1, "working", True)
        assert http.get("/v1/runs/s-3").status_code == 404
        assert http.get("/v1/runs/s-4").status_code == 404
        assert http.get("/v1/runs/s-2").json()["version"] == 2


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_yes_is_not_a_boolean_on_either_transport(
    transport: str, live: LiveServer, creds: TenantCreds
) -> None:
    async with connect(transport, live, creds.runtime_key, creds.owner_email) as s:
        text = await call_error(
            s, "report_run", run_id=f"yes-{transport}", notify_on_complete="yes"
        )
        assert "notify_on_complete" in text
        assert "valid boolean" in text
        refused = await call_error(
            s, "report_run", run_id=f"yes-{transport}", state="completed", event_id=""
        )
        assert "Invalid request (422): event_id:" in refused
    with httpx.Client(base_url=live.url, headers=bearer(creds.runtime_key)) as http:
        assert http.get(f"/v1/runs/yes-{transport}").status_code == 404  # nothing half done
