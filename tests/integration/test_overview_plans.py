"""The runs overview reads indexes, not history: with tens of thousands of finished runs
and old notifications (ANALYZEd), every statement the overview sends — captured as sent,
then EXPLAINed with the same parameters on PostgreSQL — scans no history table whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from runbell.domain.principal import Principal
from runbell.flows import overview
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import TenantCreds, add_user
from tests.conftest import pg_database

pytestmark = pytest.mark.postgres

HISTORY = 20_000
HISTORY_TABLES = {"runs", "notifications", "run_access", "input_requests", "transitions"}


@pytest.fixture
def db_url(pg_template: str | None) -> Iterator[str]:
    """PostgreSQL only: these are its plans (SQLite runs the same statements elsewhere).
    A fresh clone: a reused one keeps the dead pages of earlier tests, which the planner
    counts."""
    yield from pg_database(pg_template, fresh=True)


SEED = [
    # Finished runs, one a minute back in time, and a few active ones.
    """INSERT INTO runs (tenant_id, run_id, owner_user_id, state, version,
                         notify_on_complete, created_at, updated_at, finished_at)
       SELECT :tenant, 'h' || g, :owner, 'completed', 2, false,
              now() - (g || ' minutes')::interval, now() - (g || ' minutes')::interval,
              now() - (g || ' minutes')::interval
       FROM generate_series(1, :n) g""",
    """INSERT INTO runs (tenant_id, run_id, owner_user_id, state, version,
                         notify_on_complete, created_at, updated_at)
       SELECT :tenant, 'a' || g, :owner,
              CASE WHEN g % 2 = 0 THEN 'working' ELSE 'input_required' END, 3, false,
              now(), now()
       FROM generate_series(1, 50) g""",
    """INSERT INTO run_access (tenant_id, run_id, user_id)
       SELECT :tenant, 'h' || g, :owner FROM generate_series(1, :n) g""",
    """INSERT INTO run_access (tenant_id, run_id, user_id)
       SELECT :tenant, 'h' || g, :member FROM generate_series(1, :n, 7) g""",
    # Their notifications: mostly closed completions, some acknowledged reviews.
    """INSERT INTO notifications (id, tenant_id, recipient_user_id, run_id,
           transition_version, attention_type, urgency, decision, rule_id, inputs,
           summary, state, created_at, closed_at)
       SELECT 'ntf_h' || g, :tenant, :owner, 'h' || g, 2,
              CASE WHEN g % 50 = 0 THEN 'needs_review' ELSE 'completed' END,
              'low', 'inbox', 'r', '{}', 's',
              CASE WHEN g % 100 = 0 THEN 'open' WHEN g % 3 = 0 THEN 'resolved'
                   ELSE 'acknowledged' END,
              now() - (g || ' minutes')::interval, now()
       FROM generate_series(1, :n) g""",
    """INSERT INTO input_requests (tenant_id, id, run_id, kind, summary, version,
           run_version, state, request_hash, created_at)
       SELECT :tenant, 'req_' || g, 'h' || g, 'approval', 'ok?', 1, 1, 'answered', 'x',
              now() - (g || ' minutes')::interval
       FROM generate_series(1, :n) g""",
    """INSERT INTO input_requests (tenant_id, id, run_id, kind, summary, version,
           run_version, state, request_hash, created_at)
       SELECT :tenant, 'req_a' || g, 'a' || g, 'approval', 'ok?', 1, 3, 'pending', 'x', now()
       FROM generate_series(1, 50, 2) g""",
]


@pytest.fixture
def seeded(core: Core, creds: TenantCreds) -> dict[str, Any]:
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


def sent(core: Core, who: Principal, **kw: Any) -> list[tuple[str, Any]]:
    """The statements ``overview.overview`` sends, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, sql: str, params: Any, *args: Any) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            seen.append((sql, params))

    sa.event.listen(core.db.engine, "before_cursor_execute", capture)
    try:
        overview.overview(core, who, **kw)
    finally:
        sa.event.remove(core.db.engine, "before_cursor_execute", capture)
    return seen


def scans(core: Core, sql: str, params: Any) -> list[tuple[str, str | None, str | None]]:
    with core.db.engine.connect() as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        raw = cursor.fetchone()[0]
        cursor.close()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    out = []
    stack = [plan]
    while stack:
        node = stack.pop()
        out.append((node["Node Type"], node.get("Relation Name"), node.get("Index Name")))
        stack += node.get("Plans", [])
    return out


@pytest.mark.parametrize("viewer", ["owner", "member"])
def test_every_overview_statement_reads_an_index(
    core: Core, seeded: dict[str, Any], viewer: str
) -> None:
    role = "owner" if viewer == "owner" else "member"
    who = Principal(tenant_id=seeded["tenant"], kind="user", role=role, user_id=seeded[viewer])
    statements = sent(core, who)
    assert len(statements) == 7  # the feed head, one per group, the page's ledger counts
    # The next page of finished runs too.
    shown = overview.overview(core, who, groups=["finished"])
    assert shown["next_cursor"]
    statements += sent(core, who, groups=["finished"], after=shown["next_cursor"])
    for sql, params in statements:
        found = scans(core, sql, params)
        whole = [s for s in found if s[0] == "Seq Scan" and s[1] in HISTORY_TABLES]
        assert not whole, (sql, found)


def test_the_groups_hold_what_the_history_says(core: Core, seeded: dict[str, Any]) -> None:
    who = Principal(tenant_id=seeded["tenant"], kind="user", role="owner", user_id=seeded["owner"])
    shown = overview.overview(core, who)["groups"]
    # Pending requests on runs the owner owns: runs a1, a3, … a49 (state input_required).
    assert len(shown["needs_you"]["runs"]) == 25
    assert len(shown["working"]["runs"]) == 25
    # Reviews still to do: every 50th run, open (g % 100 == 0) or acknowledged, not resolved.
    reviews = [int(r["run_id"][1:]) for r in shown["needs_review"]["runs"]]
    assert reviews[:4] == [50, 100, 200, 250]  # 150 was resolved
    assert all(g % 50 == 0 and (g % 100 == 0 or g % 3 != 0) for g in reviews)
    finished = [r["run_id"] for r in shown["finished"]["runs"]]
    assert finished[:3] == ["h1", "h2", "h3"] and "h50" not in finished
    assert shown["finished"]["more"] is True
    with core.db.read() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(t.runs)).scalar_one()
    assert total == HISTORY + 50
