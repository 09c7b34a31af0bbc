"""A server starts without what its first requests do not need: the ``mcp`` SDK (loaded
on the first ``/mcp`` call), Apprise (the first chat URL), Alembic (only when the
database is behind the newest migration) and the web push library (the first push).
Together they were over a third of every ``runbell api`` start. Checked by what is
imported, never by a stopwatch, like ``test_cli_start``: a fresh interpreter builds the
app on an up-to-date SQLite database, runs its lifespan and answers ``/readyz`` and the
MCP metadata document."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

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
