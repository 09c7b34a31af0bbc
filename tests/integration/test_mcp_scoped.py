"""MCP tools with a scoped runtime key (issue 18 item 1), over stdio (the SDK, through the
API) and streamable HTTP (the in-process backend, which carries the authenticated
principal and so its scope): a missing capability is refused naming it, a run outside the
scope is not found, as a run that does not exist."""

from __future__ import annotations

import pytest

from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.conftest import LiveServer
from tests.integration.test_mcp import TRANSPORTS, call, call_error, connect


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_scoped_key_through_mcp(
    transport: str, live: LiveServer, creds: TenantCreds, core: Core
) -> None:
    _, key = accounts.create_key(
        core,
        creds.tenant_id,
        "runtime",
        capabilities=["runs.report", "runs.read"],
        run_patterns=["launch-*"],
    )
    async with connect(transport, live, creds.runtime_key, creds.owner_email) as s:
        await call(s, "report_run", run_id="other-1", state="working")
    async with connect(transport, live, key, creds.owner_email) as s:
        reported = await call(s, "report_run", run_id="launch-1", state="working")
        assert "launch-1" in str(reported)
        assert (await call(s, "get_run", run_id="launch-1"))["state"] == "working"
        refused = await call_error(s, "cancel_run", run_id="launch-1")
        assert "403" in refused and "runs.cancel" in refused
        assert "not found: no run 'other-1'" in await call_error(s, "get_run", run_id="other-1")
        outside = await call_error(s, "report_run", run_id="other-1", state="completed")
        assert "no run 'other-1'" in outside
