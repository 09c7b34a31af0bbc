"""``runbell schedule`` on both databases: an operator creates a schedule, gives it a new
instruction version, pauses and revokes it; a bad cadence is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runbell.cli import main
from runbell.config import Settings
from runbell.testing import TenantCreds
from tests.conftest import SECRET_KEY


@pytest.fixture
def env(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNBELL_DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("RUNBELL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RUNBELL_SECRET_KEY", SECRET_KEY)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_schedule_commands(
    env: None, creds: TenantCreds, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "schedule", "create", "--tenant", "acme", "--owner", creds.owner_email,
        "--instruction", "Rotate the on-call", "--cadence", "0 25 * * *",
    )  # fmt: skip
    assert code == 2 and "cadence" in err

    code, out, err = run(
        capsys, "schedule", "create", "--tenant", "acme", "--owner", creds.owner_email,
        "--instruction", "Rotate the on-call", "--cadence", "0 9 * * 1",
        "--authority-user", creds.owner_email,
    )  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert made["owner"] == creds.owner_id and made["authority"] == {"users": [creds.owner_email]}

    code, out, err = run(
        capsys, "schedule", "edit", made["id"], "--tenant", "acme",
        "--instruction", "Rotate the on-call and tell the team",
    )  # fmt: skip
    assert code == 0, err
    assert [v["version"] for v in json.loads(out)["versions"]] == [2, 1]

    code, out, _ = run(capsys, "schedule", "pause", made["id"], "--tenant", "acme")
    assert code == 0 and json.loads(out)["state"] == "paused"
    code, out, _ = run(capsys, "schedule", "list", "--tenant", "acme")
    assert [s["state"] for s in json.loads(out)["schedules"]] == ["paused"]
    code, out, _ = run(capsys, "schedule", "revoke", made["id"], "--tenant", "acme")
    assert code == 0 and json.loads(out)["state"] == "revoked"
    code, _, err = run(capsys, "schedule", "resume", made["id"], "--tenant", "acme")
    assert code == 2 and "revoked" in err
    code, out, _ = run(capsys, "schedule", "show", made["id"], "--tenant", "acme")
    assert json.loads(out)["revoked_at"] is not None
