"""A database that cannot serve answers 503 problem+json with Retry-After, not 500.

On SQLite the case is a write lock held beyond ``busy_timeout`` (another process holding a
long write transaction, or a backup). PostgreSQL restarts under load are covered end to
end in ``tests/acceptance/test_database_outage.py``.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from runbell.app import create_app
from runbell.crypto import SecretBox
from runbell.flows.context import Core
from runbell.store.db import Database
from runbell.testing import Clock, TenantCreds, make_tenant
from tests.conftest import SECRET_KEY, bearer, make_settings


@pytest.fixture
def sqlite_file(tmp_path: Path, sqlite_template: Path) -> Path:
    path = tmp_path / "runbell.db"
    shutil.copy(sqlite_template, path)
    return path


@pytest.fixture
def impatient(tmp_path: Path, sqlite_file: Path) -> Iterator[Core]:
    """A core whose SQLite busy timeout is 0.2 s instead of 30 s."""
    url = f"sqlite:///{sqlite_file}"
    db = Database(url, clock=Clock(), sqlite_busy_timeout_s=0.2)
    core = Core(make_settings(tmp_path, url), db, box=SecretBox(SECRET_KEY))
    yield core
    db.dispose()


def hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another process's long write transaction, as far as SQLite can tell."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_sqlite_locked_beyond_busy_timeout_is_503_with_retry_after(
    impatient: Core, sqlite_file: Path
) -> None:
    creds: TenantCreds = make_tenant(impatient)
    runtime = bearer(creds.runtime_key)
    body = {"owner": creds.owner_email, "title": "locked out"}
    with TestClient(create_app(impatient, bridge=False)) as client, capture_logs() as logs:
        with closing(hold_write_lock(sqlite_file)) as other:
            refused = [client.put(f"/v1/runs/r-{i}", json=body, headers=runtime) for i in range(3)]
            other.execute("ROLLBACK")
        for r in refused:
            assert r.status_code == 503, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.headers["retry-after"] == "1"
            problem = r.json()
            assert problem["type"].endswith("/database-unavailable")
            assert problem["status"] == 503 and problem["retry_after"] == 1
        # Nothing was committed: the runs do not exist; once the lock is gone, they can be made.
        assert client.get("/v1/runs/r-0", headers=runtime).status_code == 404
        assert client.put("/v1/runs/r-0", json=body, headers=runtime).status_code == 201

    events = [e["event"] for e in logs]
    assert events.count("database.unavailable") == 1
    assert events.count("database.recovered") == 1
    assert "api.unhandled" not in events
    (start,) = [e for e in logs if e["event"] == "database.unavailable"]
    assert start["reason"] == "busy"
    assert "traceback" not in start


def test_other_database_errors_stay_500(impatient: Core, sqlite_file: Path) -> None:
    """Not every OperationalError is an outage: a broken schema is a bug, and says so."""
    creds = make_tenant(impatient)
    with closing(sqlite3.connect(sqlite_file)) as conn:
        conn.execute("DROP TABLE feed_events")
        conn.commit()
    with (
        TestClient(create_app(impatient, bridge=False), raise_server_exceptions=False) as client,
        capture_logs() as logs,
    ):
        r = client.put(
            "/v1/runs/r-1", json={"owner": creds.owner_email}, headers=bearer(creds.runtime_key)
        )
    assert r.status_code == 500
    assert r.json()["type"].endswith("/internal")
    assert "retry-after" not in r.headers
    assert [e["event"] for e in logs if e["event"].startswith(("api.", "database."))] == [
        "api.unhandled"
    ]
