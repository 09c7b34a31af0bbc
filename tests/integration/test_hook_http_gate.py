"""Headless gating and HTTP hooks (issue 20 items 1 and 2), against a real running Runbell
on SQLite and PostgreSQL:

- ``runbell hook claude-code --gate …`` on a ``PreToolUse`` event, as ``claude -p`` runs
  it: approve → ``allow``, reject → ``deny`` with the reason, no answer → ``ask``; an
  interactive session (``CLAUDE_CODE_ENTRYPOINT=cli``) is not asked (PermissionRequest
  asks there); Runbell out of reach → ``ask``.
- ``POST /v1/hooks/claude-code`` and ``/v1/hooks/codex`` with the same payloads answer
  with the same JSON, waiting on the server for the person's answer.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.integration import test_hooks
from tests.integration.test_hooks import (
    ALLOW,
    CODEX_TURN,
    DENY,
    HOOK_WAIT,
    RUN1,
    answer,
    answer_in_thread,
    finish,
    fixture,
    hook,
    log_of,
    pending,
    run,
    start,
)
from tests.integration.test_hooks import api as api
from tests.timeouts import WAIT


@pytest.fixture
def env(live: LiveServer, creds: TenantCreds, tmp_path: Path) -> dict[str, str]:
    """test_hooks's hook environment, importing this checkout's runbell when the tests do
    (PYTHONPATH)."""
    out = test_hooks.env.__wrapped__(live, creds, tmp_path)  # type: ignore[attr-defined]
    path = os.environ.get("PYTHONPATH")
    return {**out, "PYTHONPATH": path} if path else out


GATED = ("claude-code", "--gate", "Bash", "--gate", "Write(/etc/**)")


def pre(**changes: Any) -> dict[str, Any]:
    return fixture("claude_code", "pre_tool_use", **changes)


def decision(out: str) -> tuple[str, str]:
    specific = json.loads(out)["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse"
    return specific["permissionDecision"], specific["permissionDecisionReason"]


@pytest.mark.parametrize(
    ("answered", "expected"),
    [("approve", ("allow", "Approved in Runbell")), ("reject", ("deny", "Denied in Runbell"))],
)
def test_a_gated_call_in_claude_p_is_asked_in_runbell(
    env: dict[str, str],
    api: httpx.Client,
    answered: str,
    expected: tuple[str, str],
) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    proc = start(env, pre(), *GATED, RUNBELL_HOOK_TIMEOUT="60", CLAUDE_CODE_ENTRYPOINT="sdk-cli")
    found = pending(api, RUN1)
    request = api.get(f"/v1/input-requests/{found['request']['id']}").json()["input_request"]
    assert request["summary"] == "Claude Code wants to use Bash"
    assert request["action"] == {
        "kind": "shell", "command": "rm -rf node_modules && npm ci", "cwd": "/home/dev/shop"
    }  # fmt: skip
    thread = answer_in_thread(api, RUN1, answered)
    code, out, err = finish(proc)
    thread.join(timeout=HOOK_WAIT)
    assert (code, err) == (0, "")
    assert decision(out) == expected
    assert run(api, RUN1)["state"] == "working"


def test_no_answer_in_time_is_ask_and_the_run_goes_on(
    env: dict[str, str],
    api: httpx.Client,
) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    out = hook(env, pre(), *GATED, RUNBELL_HOOK_TIMEOUT="1", CLAUDE_CODE_ENTRYPOINT="sdk-cli")
    assert decision(out)[0] == "ask"
    after = run(api, RUN1)
    assert after["pending_input_request"] is None and after["state"] == "working"


def test_ungated_calls_and_interactive_sessions_are_not_asked(
    env: dict[str, str],
    api: httpx.Client,
) -> None:
    hook(env, fixture("claude_code", "user_prompt_submit"))
    # Interactive: PermissionRequest asks when Claude Code would; one question per call.
    assert hook(env, pre(), *GATED, CLAUDE_CODE_ENTRYPOINT="cli") == ""
    write = pre(tool_name="Write", tool_input={"file_path": "/home/dev/x", "content": "x"})
    assert hook(env, write, *GATED, CLAUDE_CODE_ENTRYPOINT="sdk-cli") == ""
    assert run(api, RUN1)["pending_input_request"] is None


def test_runbell_out_of_reach_is_ask(env: dict[str, str]) -> None:
    out = hook(
        env, pre(), *GATED, RUNBELL_URL="http://127.0.0.1:9", CLAUDE_CODE_ENTRYPOINT="sdk-cli"
    )
    assert decision(out)[0] == "ask"
    assert "hook failed" in log_of(env)


# ----------------------------------------------------------------------------- HTTP hooks


@pytest.fixture
def rt(live: LiveServer, creds: TenantCreds) -> Iterator[httpx.Client]:
    """Claude Code's HTTP hook: the runtime key as Bearer."""
    headers = bearer(creds.runtime_key)

    def owned(request: httpx.Request) -> None:
        # The URL `runbell hook install claude-code --http` writes names the runs' owner.
        request.url = request.url.copy_merge_params({"owner": creds.owner_email})

    with httpx.Client(
        base_url=live.url,
        headers=headers,
        timeout=HOOK_WAIT + WAIT,
        event_hooks={"request": [owned]},
    ) as c:
        yield c


def post_in_thread(
    rt: httpx.Client, path: str, payload: dict[str, Any], **kw: Any
) -> tuple[threading.Thread, dict[str, httpx.Response]]:
    got: dict[str, httpx.Response] = {}

    def post() -> None:
        got["response"] = rt.post(path, json=payload, **kw)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, got


def test_an_http_hook_session(rt: httpx.Client, api: httpx.Client) -> None:
    path = "/v1/hooks/claude-code"
    for name in ("session_start", "user_prompt_submit"):
        r = rt.post(path, json=fixture("claude_code", name))
        assert r.status_code == 200 and r.json() == {}, r.text
    assert run(api, RUN1)["state"] == "working"

    thread, got = post_in_thread(
        rt, path + "?timeout=60", fixture("claude_code", "permission_request")
    )
    answer(api, RUN1, "approve")
    thread.join(timeout=HOOK_WAIT)
    assert got["response"].status_code == 200 and got["response"].json() == ALLOW

    thread, got = post_in_thread(
        rt,
        path + "?timeout=60",
        fixture("claude_code", "permission_request", tool_input={"command": "ls"}),
    )
    answer(api, RUN1, "reject")
    thread.join(timeout=HOOK_WAIT)
    assert got["response"].json() == DENY

    # No answer within the URL's timeout: {} (Claude Code's own dialog), the run goes on.
    r = rt.post(
        path + "?timeout=1",
        json=fixture("claude_code", "permission_request", tool_input={"command": "pwd"}),
    )
    assert r.status_code == 200 and r.json() == {}
    assert run(api, RUN1)["state"] == "working"

    r = rt.post(path, json=fixture("claude_code", "stop"))
    assert r.json() == {}
    assert run(api, RUN1)["state"] == "completed"
    # The next prompt is the next turn, told from the runs themselves (no local state).
    r = rt.post(path, json=fixture("claude_code", "user_prompt_submit", prompt="again"))
    assert r.status_code == 200
    assert run(api, f"{RUN1}.2")["state"] == "working"


def test_an_http_hook_gates_headless_calls(rt: httpx.Client, api: httpx.Client) -> None:
    path = "/v1/hooks/claude-code?timeout=60&gate=Bash"
    rt.post("/v1/hooks/claude-code", json=fixture("claude_code", "user_prompt_submit"))
    r = rt.post(path, json=pre(), headers={"X-Runbell-Entrypoint": "cli"})
    assert r.json() == {}  # interactive: PermissionRequest asks
    thread, got = post_in_thread(rt, path, pre(), headers={"X-Runbell-Entrypoint": "sdk-cli"})
    answer(api, RUN1, "reject")
    thread.join(timeout=HOOK_WAIT)
    assert decision(got["response"].text) == ("deny", "Denied in Runbell")
    r = rt.post("/v1/hooks/claude-code?timeout=1&gate=Bash", json=pre(tool_use_id="toolu_2"))
    assert decision(r.text)[0] == "ask"


def test_an_http_codex_hook(rt: httpx.Client, api: httpx.Client) -> None:
    r = rt.post("/v1/hooks/codex", json=fixture("codex", "user_prompt_submit"))
    assert r.status_code == 200 and r.json() == {}
    thread, got = post_in_thread(
        rt, "/v1/hooks/codex?timeout=60", fixture("codex", "permission_request")
    )
    answer(api, CODEX_TURN, "approve")
    thread.join(timeout=HOOK_WAIT)
    assert got["response"].json() == ALLOW
    rt.post("/v1/hooks/codex", json=fixture("codex", "stop"))
    assert run(api, CODEX_TURN)["state"] == "completed"


def test_http_hook_refusals(rt: httpx.Client, live: LiveServer, creds: TenantCreds) -> None:
    r = rt.post("/v1/hooks/claude-code?gate=Write(", json=pre())
    assert r.status_code == 422 and r.json()["field"] == "gate"
    r = rt.post("/v1/hooks/claude-code", json={"hook_event_name": "Stop"})
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    r = httpx.post(f"{live.url}/v1/hooks/claude-code", json=pre(), timeout=WAIT)
    assert r.status_code == 401
    r = httpx.post(
        f"{live.url}/v1/hooks/claude-code",
        json=pre(),
        headers=bearer(creds.owner_token),
        timeout=WAIT,
    )
    assert r.status_code == 403  # a runtime key's endpoint
    # An event nobody maps answers at once.
    r = rt.post("/v1/hooks/claude-code", json={"hook_event_name": "x", "session_id": "y"})
    assert r.status_code == 200 and r.json() == {}


def test_an_http_hook_finds_a_late_turn_from_the_runs(rt: httpx.Client, api: httpx.Client) -> None:
    """No local state: the current turn is the last of the session's runs (probed in
    O(log n)), so turn 6 follows five finished ones."""
    path = "/v1/hooks/claude-code"
    for turn in range(1, 6):
        rt.post(path, json=fixture("claude_code", "user_prompt_submit", prompt=f"turn {turn}"))
        assert rt.post(path, json=fixture("claude_code", "stop")).json() == {}
        run_id = RUN1 if turn == 1 else f"{RUN1}.{turn}"
        assert run(api, run_id)["state"] == "completed"
    rt.post(path, json=fixture("claude_code", "user_prompt_submit", prompt="turn 6"))
    assert run(api, f"{RUN1}.6")["state"] == "working"
    # A second Stop of a finished turn reports nothing, as the command hook's state says.
    rt.post(path, json=fixture("claude_code", "stop"))
    assert rt.post(path, json=fixture("claude_code", "stop")).json() == {}
    assert api.get(f"/v1/runs/{RUN1}.7").status_code == 404
