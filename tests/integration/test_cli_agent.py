"""``runbell login/report/progress/ask/wait`` run as processes (the installed entry point,
the documented environment) against a real running Runbell; answers come from this
process through the API as the owner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.integration.test_sdk import answer_when_pending
from tests.timeouts import WAIT, scaled

RUNBELL = str(Path(sys.executable).parent / "runbell")


def env_for(url: str, key: str | None, owner: str | None, config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNBELL_")}
    env["RUNBELL_CONFIG"] = str(config)
    if url:
        env["RUNBELL_URL"] = url
    if key:
        env["RUNBELL_KEY"] = key
    if owner:
        env["RUNBELL_OWNER"] = owner
    return env


@pytest.fixture
def env(live: LiveServer, creds: TenantCreds, tmp_path: Path) -> dict[str, str]:
    return env_for(live.url, creds.runtime_key, creds.owner_email, tmp_path / "none.toml")


def runbell(
    env: dict[str, str], *args: str, timeout: float = scaled(60)
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RUNBELL, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_ask_answered_through_the_api_exits_0_with_the_value(
    env: dict[str, str], live: LiveServer, creds: TenantCreds
) -> None:
    assert runbell(env, "report", "ci-1", "working", "--title", "CI build").returncode == 0
    helper = answer_when_pending(live.url, creds.owner_token, "ci-1", "answer", "staging")
    done = runbell(
        env,
        "ask",
        "ci-1",
        "Deploy where?",
        "--kind",
        "choice",
        "--option",
        "staging=Staging",
        "--option",
        "prod=Production",
        "--details",
        '{"commit": "3f2c1a"}',
        "--timeout",
        "30",
    )
    helper.join()
    assert (done.returncode, done.stdout, done.stderr) == (0, "staging\n", "")


def test_ask_approval_approved_0_rejected_1(
    env: dict[str, str], live: LiveServer, creds: TenantCreds
) -> None:
    helper = answer_when_pending(live.url, creds.owner_token, "ci-2", "approve")
    approved = runbell(env, "ask", "ci-2", "Ship it?", "--title", "Release", "--timeout", "30")
    helper.join()
    assert (approved.returncode, approved.stdout) == (0, "approved\n")
    helper = answer_when_pending(live.url, creds.owner_token, "ci-2", "reject")
    rejected = runbell(env, "ask", "ci-2", "Really ship it?", "--timeout", "30")
    helper.join()
    assert (rejected.returncode, rejected.stdout) == (1, "rejected\n")


def test_ask_expired_or_timed_out_exits_2(env: dict[str, str]) -> None:
    expired = runbell(env, "ask", "ci-3", "Quick?", "--expires-in", "1", "--timeout", "30")
    assert (expired.returncode, expired.stdout) == (2, "")
    assert expired.stderr == "runbell: no answer: expired\n"
    timed_out = runbell(env, "ask", "ci-3", "Anyone?", "--timeout", "0.5")
    assert (timed_out.returncode, timed_out.stderr) == (2, "runbell: no answer: timeout\n")


def test_ask_again_under_the_same_request_id_waits_on_the_same_request(
    env: dict[str, str], live: LiveServer, creds: TenantCreds
) -> None:
    args = ["ask", "ci-8", "Ship?", "--request-id", "ci-8-ship", "--expires-in", "600"]
    first = runbell(env, *args, "--timeout", "0.5")
    assert first.returncode == 2
    helper = answer_when_pending(live.url, creds.owner_token, "ci-8", "approve")
    again = runbell(env, *args, "--timeout", "30")  # the job re-run: no second question
    helper.join()
    assert (again.returncode, again.stdout) == (0, "approved\n")
    requests = httpx.get(
        f"{live.url}/v1/input-requests/ci-8-ship", headers=bearer(creds.owner_token), timeout=WAIT
    ).json()
    assert requests["input_request"]["state"] == "answered"
    run = httpx.get(
        f"{live.url}/v1/runs/ci-8", headers=bearer(creds.owner_token), timeout=WAIT
    ).json()
    assert run["version"] == 3  # created working (1), one request (2), one answer (3)


def test_server_down_exits_3_with_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = env_for(f"http://127.0.0.1:{port}", "rbk_x", None, tmp_path / "none.toml")
    for args in (["ask", "ci-4", "Ship?"], ["report", "ci-4", "working"], ["wait", "ci-4"]):
        down = runbell(env, *args)
        assert down.returncode == 3, down
        assert down.stdout == ""
        lines = down.stderr.splitlines()
        assert len(lines) == 2, lines
        assert lines[0].startswith(f"runbell: cannot reach Runbell at http://127.0.0.1:{port}")
        assert lines[1] == "hint: is the server running (runbell serve)? RUNBELL_URL names it"


def test_a_wrong_key_says_what_to_do(live: LiveServer, tmp_path: Path) -> None:
    """Issue 16 row 17: `runbell: 401 …` said nothing about what to do."""
    env = env_for(live.url, "rbk_not_a_key_of_this_server", None, tmp_path / "none.toml")
    wrong = runbell(env, "report", "ci-401", "working")
    assert wrong.returncode == 3
    lines = wrong.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("runbell: 401 "), lines
    assert lines[1].startswith("hint: RUNBELL_KEY must be a runtime key of this server"), lines
    assert "runbell key create" in lines[1]


def test_errors_and_usage_errors_exit_3(env: dict[str, str], tmp_path: Path) -> None:
    unconfigured = runbell(env_for("", None, None, tmp_path / "none.toml"), "wait", "x")
    assert unconfigured.returncode == 3
    assert unconfigured.stderr.splitlines() == [
        "runbell: RUNBELL_URL and RUNBELL_KEY not set: export RUNBELL_URL and RUNBELL_KEY, "
        "or run `runbell login`"
    ]
    assert runbell(env, "ask", "x").returncode == 3  # missing SUMMARY
    bad_kind = runbell(env, "ask", "x", "Q?", "--kind", "poll")
    assert (bad_kind.returncode, bad_kind.stderr) == (
        3,
        "runbell: --kind must be one of approval, choice, text, not 'poll'\n",
    )
    missing = runbell(env, "progress", "no-such-run", "hello")
    assert (missing.returncode, missing.stderr) == (3, "runbell: 404 no run 'no-such-run'\n")


def test_report_progress_and_wait(env: dict[str, str]) -> None:
    first = runbell(env, "report", "ci-5", "working", "--title", "Nightly", "--notify")
    assert (first.returncode, first.stdout) == (0, "applied: queued -> working\n")
    assert runbell(env, "progress", "ci-5", "tests", "--count", "done=3").stdout == "accepted\n"
    assert runbell(env, "wait", "ci-5", "--timeout", "0.5").returncode == 2
    done = runbell(
        env,
        "report",
        "ci-5",
        "completed",
        "--reason",
        "green",
        "--event-id",
        "ci-5-done",
        "--summary",
        "all 212 tests pass",
        "--link",
        "logs=https://ci.example/5",
    )
    assert (done.returncode, done.stdout) == (0, "applied: working -> completed\n")
    again = runbell(env, "report", "ci-5", "completed", "--event-id", "ci-5-done")
    assert (again.returncode, again.stdout) == (0, "duplicate: working -> completed\n")
    waited = runbell(env, "wait", "ci-5")
    assert (waited.returncode, waited.stdout) == (0, "completed: green\n")
    runbell(env, "report", "ci-6", "working")
    runbell(env, "report", "ci-6", "failed", "--reason", "tests failed")
    assert runbell(env, "wait", "ci-6").returncode == 1


def test_login_writes_the_file_later_commands_use(
    live: LiveServer, creds: TenantCreds, tmp_path: Path
) -> None:
    config = tmp_path / "cfg" / "config.toml"
    bare = env_for("", None, None, config)
    refused = runbell(bare, "login", "--url", live.url, "--key", "rbk_wrong", "--owner", "x@y")
    assert refused.returncode == 3 and not config.exists()
    assert refused.stderr.startswith("runbell: not saved: 401 ")
    saved = runbell(
        bare, "login", "--url", live.url, "--key", creds.runtime_key, "--owner", creds.owner_email
    )
    assert (saved.returncode, saved.stdout) == (0, f"saved {config}\n")
    assert config.stat().st_mode & 0o777 == 0o600
    reported = runbell(bare, "report", "ci-7", "completed", "--title", "From the file")
    assert reported.returncode == 0, reported.stderr
    # The environment wins over the file.
    other: dict[str, Any] = dict(bare, RUNBELL_KEY="rbk_wrong")
    assert runbell(other, "wait", "ci-7").returncode == 3
