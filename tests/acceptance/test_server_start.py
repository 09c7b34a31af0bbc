"""A server starts without what its first requests do not need: the ``mcp`` SDK (loaded
on the first ``/mcp`` call), Apprise (the first chat URL), Alembic (only when the
database is behind the newest migration) and the web push library (the first push).
Together they were over a third of every ``runbell api`` start. Checked by what is
imported, never by a stopwatch, like ``test_cli_start``: a fresh interpreter builds the
app on an up-to-date SQLite database, runs its lifespan and answers ``/readyz`` and the
MCP metadata document. And the process commands refuse a bad setting before importing any
of the server (it cost a second of CPU to print one line)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.acceptance.test_cli_start import run_probe

#: Loaded on first use only (see the module docstring).
LATER = ("mcp", "mcp_types", "apprise", "alembic", "pywebpush", "aiohttp")

MIGRATE = (
    "from runbell.app import migrate; from runbell.config import Settings; migrate(Settings())"
)

PROBE = textwrap.dedent(
    """
    import json, sys

    from starlette.testclient import TestClient

    from runbell.app import build, create_app
    from runbell.config import Settings

    core = build(Settings())
    try:
        with TestClient(create_app(core, listen_host="127.0.0.1")) as client:
            ready = client.get("/readyz").json()
            meta = client.get("/.well-known/oauth-protected-resource/mcp").status_code
    finally:
        core.db.dispose()
    loaded = sorted(m for m in sys.modules if sys.modules[m] is not None)
    print(json.dumps({"ready": ready, "meta": meta, "modules": loaded}))
    """
)


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run_probe([code], tmp_path, RUNBELL_DATA_DIR=str(tmp_path / "data"))


def test_an_api_start_loads_no_mcp_sdk_apprise_alembic_or_web_push(tmp_path: Path) -> None:
    migrated = _run(MIGRATE, tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    res = _run(PROBE, tmp_path)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout.splitlines()[-1])
    assert result["ready"]["status"] == "ready", result["ready"]
    assert result["meta"] == 200
    loaded = [m for m in result["modules"] if any(m == h or m.startswith(h + ".") for h in LATER)]
    assert not loaded, f"the server start loaded {loaded}"


#: What a process command refused for a bad setting may not have loaded: the server, the
#: database, the worker (over a second of CPU, spent before the one line it prints).
SERVER = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "httpx", "structlog")
SERVER_PARTS = ("runbell.app", "runbell.api", "runbell.web", "runbell.flows", "runbell.store")

REFUSED = textwrap.dedent(
    """
    import contextlib, io, json, sys

    from runbell.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(sys.argv[1:])
    loaded = sorted(m for m in sys.modules if sys.modules[m] is not None)
    print(json.dumps({"code": code, "err": err.getvalue(), "modules": loaded}))
    """
)


@pytest.mark.parametrize("command", [["serve"], ["api"], ["worker"], ["migrate"]])
def test_a_bad_setting_is_refused_before_the_server_is_imported(
    tmp_path: Path, command: list[str]
) -> None:
    """`runbell serve|api|worker|migrate` read their settings first: an invalid one is
    the usual one line and exit 2, with nothing of the server imported yet."""
    res = run_probe(
        [REFUSED, *command],
        tmp_path,
        RUNBELL_DATA_DIR=str(tmp_path / "data"),
        RUNBELL_SMTP_PORT="0",
    )
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout.splitlines()[-1])
    assert result["code"] == 2
    assert result["err"].startswith("runbell: RUNBELL_SMTP_PORT: "), result["err"]
    heavy = (*SERVER, *SERVER_PARTS)
    loaded = [m for m in result["modules"] if any(m == h or m.startswith(h + ".") for h in heavy)]
    assert not loaded, f"refusing a bad setting loaded {loaded}"
    assert not (tmp_path / "data").exists(), "nothing made"
