"""``runbell delegate`` and ``runbell undelegate`` run as processes against a real
running Runbell (issue 18 item 1), with a scoped key, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.integration.test_cli_agent import env_for, runbell
from tests.timeouts import WAIT


def test_delegate_and_undelegate(
    core: Core, live: LiveServer, creds: TenantCreds, tmp_path: Path
) -> None:
    _, key = accounts.create_key(
        core, creds.tenant_id, "runtime", capabilities=["runs.report", "runs.read"]
    )
    env = env_for(live.url, key, creds.owner_email, tmp_path / "none.toml")
    assert runbell(env, "report", "launch-1", "working").returncode == 0
    made = runbell(
        env, "delegate", "launch-1", "--capability", "runs.read", "--expires-in", "600",
        "--name", "checker",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = re.search(r"\brbd_[A-Za-z0-9_-]{20,}", made.stdout)
    token_id = re.search(r"\bdlg_[0-9a-z]+", made.stdout)
    assert token and token_id, made.stdout
    with httpx.Client(base_url=live.url, timeout=WAIT) as http:
        assert http.get("/v1/runs/launch-1", headers=bearer(token[0])).status_code == 200

        # Wider than the key: refused, exit 3, the capability named with a hint.
        wider = runbell(
            env, "delegate", "launch-1", "--capability", "runs.cancel", "--expires-in", "600",
            "--name", "x",
        )  # fmt: skip
        assert wider.returncode == 3
        assert "403" in wider.stderr and "runs.cancel" in wider.stderr
        assert "runbell key create --capability runs.cancel" in wider.stderr

        gone = runbell(env, "undelegate", token_id[0])
        assert gone.returncode == 0 and token_id[0] in gone.stdout
        assert http.get("/v1/runs/launch-1", headers=bearer(token[0])).status_code == 401
