"""A conversation's jobs and a proposal's dependents are found through an index, not by
reading history: with tens of thousands of linked runs (ANALYZEd), the statements behind
``GET /v1/runs?link=…`` and the dependents lookup of ``flows.dependencies`` — captured
as sent, then EXPLAINed with the same parameters on PostgreSQL — scan no table whole."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from runbell.domain.principal import Principal
from runbell.flows import runs as run_flows
from runbell.flows.context import Core
from runbell.store import runs as run_store
from runbell.testing import TenantCreds, add_user
from tests.conftest import pg_database
from tests.integration.test_overview_plans import scans

pytestmark = pytest.mark.postgres

HISTORY = 20_000
TABLES = {"runs", "run_links", "run_access"}

SEED = [
    # Runs of many conversations (ten each), every fifth depending on some proposal.
    """INSERT INTO runs (tenant_id, run_id, owner_user_id, state, version,
                         notify_on_complete, created_at, updated_at,
                         depends_on_run, depends_on_request, depends_on_version)
       SELECT :tenant, 'r' || g, :owner, 'completed', 2, false, now(), now(),
              CASE WHEN g % 5 = 0 THEN 'p' || (g / 5) END,
              CASE WHEN g % 5 = 0 THEN 'req-' || (g / 5) END,
              CASE WHEN g % 5 = 0 THEN 1 END
       FROM generate_series(1, :n) g""",
    """INSERT INTO run_access (tenant_id, run_id, user_id)
       SELECT :tenant, 'r' || g, :owner FROM generate_series(1, :n) g""",
    """INSERT INTO run_access (tenant_id, run_id, user_id)
       SELECT :tenant, 'r' || g, :member FROM generate_series(1, :n, 7) g""",
    """INSERT INTO run_links (tenant_id, run_id, kind, link_id, position, created_at)
       SELECT :tenant, 'r' || g, 'conversation', 'c' || (g % 2000), 0, now()
       FROM generate_series(1, :n) g""",
    """INSERT INTO run_links (tenant_id, run_id, kind, link_id, position, created_at)
       SELECT :tenant, 'r' || g, 'message', 'm' || g, 1, now()
       FROM generate_series(1, :n) g""",
]


@pytest.fixture
def db_url(pg_template: str | None) -> Iterator[str]:
    """PostgreSQL only: these are its plans (SQLite runs the same statements elsewhere).
    A fresh clone: a reused one keeps the dead pages of earlier tests, which the planner
    counts."""
    yield from pg_database(pg_template, fresh=True)


@pytest.fixture
def seeded(core: Core, creds: TenantCreds) -> dict[str, str]:
    member, _ = add_user(core, creds.tenant_id, "member@acme.test", "member")
    with core.db.engine.begin() as conn:
        for sql in SEED:
            conn.execute(
                sa.text(sql),
                {
                    "tenant": creds.tenant_id,
                    "owner": creds.owner_id,
                    "member": member,
                    "n": HISTORY,
                },
            )
    with core.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE"))
    return {"tenant": creds.tenant_id, "owner": creds.owner_id, "member": member}


def sent(core: Core, call: Callable[[], Any]) -> tuple[Any, list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, sql: str, params: Any, *args: Any) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            seen.append((sql, params))

    sa.event.listen(core.db.engine, "before_cursor_execute", capture)
    try:
        result = call()
    finally:
        sa.event.remove(core.db.engine, "before_cursor_execute", capture)
    return result, seen


@pytest.mark.parametrize("viewer", ["owner", "member"])
def test_a_conversations_jobs_are_one_indexed_query(
    core: Core, seeded: dict[str, str], viewer: str
) -> None:
    who = Principal(tenant_id=seeded["tenant"], kind="user", role=viewer, user_id=seeded[viewer])
    page, statements = sent(
        core,
        lambda: run_flows.list_runs(
            core, who, states=None, after=None, limit=50, link="conversation:c7"
        ),
    )
    # r7, r2007, … r18007: ten runs, the member sees those of every seventh.
    expected = sorted(f"r{g}" for g in range(7, HISTORY + 1, 2000))
    if viewer == "member":
        expected = [r for r in expected if (int(r[1:]) - 1) % 7 == 0]
    assert [r["run_id"] for r in page["runs"]] == expected
    assert len(statements) == 1
    for sql, params in statements:
        found = scans(core, sql, params)
        assert not [s for s in found if s[0] == "Seq Scan" and s[1] in TABLES], (sql, found)
        assert any(s[2] == "ix_run_links_target" for s in found), found


def test_a_proposals_dependents_are_found_through_an_index(
    core: Core, seeded: dict[str, str]
) -> None:
    def lookup() -> list[str]:
        with core.db.read() as conn:
            return [r.run_id for r in run_store.dependents_of(conn, seeded["tenant"], ["req-9"])]

    found_runs, statements = sent(core, lookup)
    assert found_runs == ["r45"]
    [(sql, params)] = statements
    found = scans(core, sql, params)
    assert not [s for s in found if s[0] == "Seq Scan" and s[1] in TABLES], found
    assert any(s[2] == "ix_runs_depends_on" for s in found), found
