"""The Claude Code and Codex hooks with a scoped runtime key holding only what they call
(issue 18 item 1): runs.report (runs, signals, progress), input_requests.create
(approvals) and runs.read (waiting for the answer), limited to their runs. A key without
input_requests.create leaves the approval to the agent's own dialog and says why in the
hook log. A real server, on SQLite and PostgreSQL; the hook runs as a process."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.integration.test_hooks import (
    ALLOW,
    CODEX_TURN,
    RUN1,
    answer_in_thread,
    api,  # noqa: F401 (a fixture)
    env,  # noqa: F401 (a fixture)
    finish,
    fixture,
    hook,
    kinds,
    log_of,
    run,
    start,
)
from tests.timeouts import WAIT

HOOK_CAPABILITIES = ["runs.report", "input_requests.create", "runs.read"]


def with_key(base: dict[str, str], key: str) -> dict[str, str]:
    """The hook's environment with ``key``, importing this checkout's Runbell."""
    return {**base, "RUNBELL_KEY": key, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}


def scoped(core: Core, creds: TenantCreds, capabilities: list[str]) -> str:
    _, secret = accounts.create_key(
        core,
        creds.tenant_id,
        "runtime",
        name="hooks",
        capabilities=capabilities,
        run_patterns=["cc-*", "codex-*"],
    )
    return secret


@pytest.fixture
def hook_key(core: Core, creds: TenantCreds) -> str:
    return scoped(core, creds, HOOK_CAPABILITIES)


def test_claude_code_with_a_scoped_key(
    env: dict[str, str],  # noqa: F811
    api: httpx.Client,  # noqa: F811
    hook_key: str,
) -> None:
    env = with_key(env, hook_key)
    assert hook(env, fixture("claude_code", "session_start")) == ""
    assert hook(env, fixture("claude_code", "user_prompt_submit")) == ""
    assert run(api, RUN1)["state"] == "working"
    proc = start(env, fixture("claude_code", "permission_request"), RUNBELL_HOOK_TIMEOUT="60")
    thread = answer_in_thread(api, RUN1, "approve")
    code, out, err = finish(proc)
    thread.join(timeout=WAIT)
    assert (code, err) == (0, "")
    assert json.loads(out) == ALLOW
    assert hook(env, fixture("claude_code", "subagent_stop")) == ""
    assert hook(env, fixture("claude_code", "stop")) == ""
    assert run(api, RUN1)["state"] == "completed"
    assert log_of(env) == ""


def test_codex_with_a_scoped_key(
    env: dict[str, str],  # noqa: F811
    api: httpx.Client,  # noqa: F811
    hook_key: str,
) -> None:
    env = with_key(env, hook_key)
    assert hook(env, fixture("codex", "session_start"), "codex") == ""
    assert hook(env, fixture("codex", "user_prompt_submit"), "codex") == ""
    proc = start(env, fixture("codex", "permission_request"), "codex", RUNBELL_HOOK_TIMEOUT="60")
    thread = answer_in_thread(api, CODEX_TURN, "approve")
    code, out, err = finish(proc)
    thread.join(timeout=WAIT)
    assert (code, err) == (0, "") and json.loads(out) == ALLOW
    assert hook(env, fixture("codex", "stop"), "codex") == ""
    assert run(api, CODEX_TURN)["state"] == "completed"
    assert kinds(api, CODEX_TURN) == ["completed", "input_required"]
    assert log_of(env) == ""


def test_a_key_without_input_requests_create_says_so(
    core: Core,
    creds: TenantCreds,
    env: dict[str, str],  # noqa: F811
    api: httpx.Client,  # noqa: F811
) -> None:
    env = with_key(env, scoped(core, creds, ["runs.report", "runs.read"]))
    assert hook(env, fixture("claude_code", "user_prompt_submit")) == ""
    assert run(api, RUN1)["state"] == "working"  # reporting still works
    # The approval cannot be asked: the hook prints nothing (the agent shows its own
    # dialog), exits 0, and its log names the missing capability.
    out = hook(env, fixture("claude_code", "permission_request"), RUNBELL_HOOK_TIMEOUT="5")
    assert out == ""
    logged = log_of(env)
    assert "Forbidden" in logged and "input_requests.create" in logged
    assert "RUNBELL_KEY lacks input_requests.create" in logged
    assert run(api, RUN1)["pending_input_request"] is None
