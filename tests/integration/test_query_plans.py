"""No statement of an agent's run walks more of a table than that run's rows (SQLite).

A lookup of one run's rows through an index that starts with ``tenant_id`` alone reads
every row of the tenant: invisible in a test with five runs, and a cost that grows with
every run the tenant ever had. ``run_access``'s primary key starts (tenant_id, user_id),
so each run create read and rewrote its access rows by walking the whole tenant (~1 ms a
``PUT`` at 6,000 runs, growing linearly; ``bench/profile/p2-put.md``); a run's
amendments were read through ``ix_amendments_tenant_created`` because SQLite's planner
chose that index to spare itself a sort.

This records every statement the API sends for one agent's run — created with an
authority and links, edited, progress, an approval request answered by its owner,
signals, the reads a page makes (the run with its pending amendments, its history, the
runs overview, the notifications, the feed) — and asks SQLite's planner how it
would run each (``EXPLAIN QUERY PLAN``, with the parameters it was sent): none may scan a
table, and none that names a run may search by the tenant alone. SQLite decides from the
schema alone here (no ``ANALYZE`` statistics), which is how a new database runs.
PostgreSQL plans from statistics; its indexes are the same ones.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user
from tests.conftest import bearer

#: The one table whose statements here mean to read all of a tenant's rows: the fan-out
#: reads the tenant's webhook endpoints (a handful) once per batch.
PER_TENANT = frozenset({"webhook_endpoints"})
#: What a plan line says about one table: ``SCAN t``, or ``SEARCH t USING … (cols)``.
PLAN_LINE = re.compile(r"^(SCAN|SEARCH) (\w+)(?: AS \w+)?(?: USING .*?(?:\((.*)\))?)?$")


@pytest.fixture
def statements(core: Core) -> Iterator[dict[str, Any]]:
    """Every distinct statement sent to the database, with the first parameters it had."""
    seen: dict[str, Any] = {}

    def record(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if not many:
            seen.setdefault(statement, parameters)

    sa.event.listen(core.db.engine, "before_cursor_execute", record)
    yield seen
    sa.event.remove(core.db.engine, "before_cursor_execute", record)


def _one_agents_run(client: TestClient, creds: TenantCreds, clock: Clock, member: str) -> None:
    key = bearer(creds.runtime_key)
    owner = bearer(creds.owner_token)

    def ok(r: Any) -> Any:
        assert r.status_code < 300, r.text
        return r.json()

    run = {
        "owner": creds.owner_email,
        "state": "working",
        "title": "Fix the build",
        "objective": "green CI",
        "authority": {"users": [member], "approvers": [creds.owner_email]},
        "links": [{"kind": "conversation", "id": "c-1"}],
    }
    ok(client.put("/v1/runs/plan-1", json=run, headers=key))
    ok(client.put("/v1/runs/plan-1", json={"title": "Fix the build, again"}, headers=key))
    ok(client.post("/v1/runs/plan-1/progress", json={"message": "tests"}, headers=key))
    asked = {"input_request_id": "ask-1", "kind": "approval", "summary": "Push to main?"}
    ok(client.post("/v1/runs/plan-1/input-requests", json=asked, headers=key))
    snapshot = ok(client.get("/v1/runs/plan-1", headers=owner))
    ok(
        client.post(
            "/v1/input-requests/ask-1/responses",
            json={
                "decision": "approve",
                "expected_run_version": snapshot["version"],
                "expected_request_version": 1,
            },
            headers={**owner, "Idempotency-Key": "plan-answer"},
        )
    )
    signal = {"event_id": "plan-e1", "state": "working"}
    ok(client.post("/v1/runs/plan-1/signals", json=signal, headers=key))
    ok(client.get("/v1/runs/plan-1/history", headers=owner))
    ok(client.get("/v1/runs?group=needs_you", headers=owner))
    ok(client.get("/v1/notifications", headers=owner))
    ok(client.get("/v1/events", headers=owner))
    signal = {"event_id": "plan-e2", "state": "completed"}
    ok(client.post("/v1/runs/plan-1/signals", json=signal, headers=key))


def _plans(path: Path, statements: dict[str, Any]) -> list[tuple[str, str]]:
    """``(plan line, statement)`` for every line of every statement's plan."""
    con = sqlite3.connect(path)
    found = []
    try:
        for statement, parameters in statements.items():
            if not statement.lstrip().upper().startswith(("SELECT", "INSERT", "UPDATE", "DELETE")):
                continue
            for row in con.execute(f"EXPLAIN QUERY PLAN {statement}", parameters or ()):
                found.append((str(row[3]), statement))
    finally:
        con.close()
    return found


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_no_statement_of_a_run_walks_the_tenant(
    core: Core,
    creds: TenantCreds,
    client: TestClient,
    clock: Clock,
    statements: dict[str, Any],
    db_url: str,
) -> None:
    member = "plan-member@example.com"
    add_user(core, creds.tenant_id, member)
    _one_agents_run(client, creds, clock, member)
    path = Path(core.db.engine.url.database or "")
    plans = _plans(path, statements)
    assert len(plans) > 40  # the recording saw the run's statements
    wrong = []
    for line, statement in plans:
        m = PLAN_LINE.match(line)
        if m is None or m.group(2) not in t.metadata.tables or m.group(2) in PER_TENANT:
            continue  # a subquery's rows, or a per-tenant table
        kind, table, columns = m.group(1), m.group(2), m.group(3) or ""
        names_run = re.search(rf"\b{table}\.run_id = \?", statement) is not None
        if kind == "SCAN" or (names_run and columns == "tenant_id=?"):
            wrong.append(f"{line}\n    {' '.join(statement.split())[:400]}")
    assert not wrong, "\n".join(wrong)
