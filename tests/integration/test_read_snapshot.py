"""A read is one snapshot on both databases: every statement of one ``Database.read()``
sees the same commits (SQLite: a deferred BEGIN in WAL mode; PostgreSQL: REPEATABLE READ).
Without it, on PostgreSQL, ``GET /v1/runs/{id}`` could pair a run's old version with the
input request a newer commit opened — and an answer made from that view was refused as
stale (seen in tests/integration/test_sdk.py)."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.store import runs
from runbell.store import tables as t
from runbell.testing import TenantCreds
from tests.conftest import bearer


def version(conn: sa.Connection, tenant_id: str) -> int:
    q = sa.select(t.runs.c.version).where(
        t.runs.c.tenant_id == tenant_id, t.runs.c.run_id == "snap"
    )
    return int(conn.execute(q).scalar_one())


def test_a_commit_made_during_a_read_is_not_seen_by_that_read(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    body = {"owner": creds.owner_email, "state": "working"}
    r = client.put("/v1/runs/snap", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    with core.db.read() as conn:
        before = version(conn, creds.tenant_id)
        # Another request commits a new version meanwhile.
        moved = client.post(
            "/v1/runs/snap/signals",
            json={"event_id": "snap-1", "state": "input_required"},
            headers=bearer(creds.runtime_key),
        )
        assert moved.json()["outcome"] == "applied", moved.text
        assert version(conn, creds.tenant_id) == before  # the same snapshot
    with core.db.read() as conn:
        assert version(conn, creds.tenant_id) == before + 1  # a new read sees it


def test_a_read_that_starts_with_a_hot_statement_is_one_snapshot_too(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    """The hot statements (store/fast.py) run on the driver's cursor. As a read's first
    statement, one ran before the read's BEGIN on SQLite, in a snapshot of its own: the
    run came from one commit, the pending request read after it from a newer one, and
    an answer made from that view was refused as stale (caught by the SDK ask test)."""
    body = {"owner": creds.owner_email, "state": "working"}
    r = client.put("/v1/runs/snap", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    with core.db.read() as conn:
        run = runs.get_run(conn, creds.tenant_id, "snap")  # a hot statement, first
        assert run is not None
        moved = client.post(
            "/v1/runs/snap/signals",
            json={"event_id": "snap-2", "state": "input_required"},
            headers=bearer(creds.runtime_key),
        )
        assert moved.json()["outcome"] == "applied", moved.text
        assert version(conn, creds.tenant_id) == run.version  # the same snapshot
        assert runs.get_run(conn, creds.tenant_id, "snap") == run
