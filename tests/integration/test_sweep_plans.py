"""The stall and escalation sweeps read only what is due, whatever the history (issue 10:
"index the sweep's query so its cost does not grow with finished history"). PostgreSQL
only: tens of thousands of finished runs and settled escalation steps are seeded and
ANALYZEd, then each sweep's query is EXPLAINed exactly as it is sent; its plan must come
from the sweep's index and scan no table whole."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from runbell.flows.context import Core
from runbell.store import escalations, stalls
from runbell.store import tables as t
from runbell.testing import TenantCreds
from tests.conftest import pg_database
from tests.integration.test_hot_query_plans import assert_indexed, plan

pytestmark = pytest.mark.postgres

HISTORY = 30_000
SEED = [
    """INSERT INTO runs (tenant_id, run_id, owner_user_id, state, version,
                         notify_on_complete, created_at, updated_at, stall_clock_at)
       SELECT :tenant, 'h' || g, :owner, 'completed', 3, false, now(), now(), now()
       FROM generate_series(1, :n) g""",
    """INSERT INTO notifications (id, tenant_id, recipient_user_id, run_id,
           transition_version, attention_type, urgency, decision, rule_id, inputs,
           summary, state, created_at)
       SELECT 'ntf_h' || g, :tenant, :owner, 'h' || g, 2, 'failed', 'normal',
              'push', 'r', '{}', 's', 'acknowledged', now()
       FROM generate_series(1, :n) g""",
    """INSERT INTO escalation_steps (id, tenant_id, notification_id, step_no, channel,
           after_s, due_at, status, created_at, settled_at)
       SELECT 'esc_h' || g, :tenant, 'ntf_h' || g, 1, 'chat', 120,
              now() - (g || ' minutes')::interval,
              CASE WHEN g % 2 = 0 THEN 'fired' ELSE 'cancelled' END, now(), now()
       FROM generate_series(1, :n) g""",
]


@pytest.fixture
def db_url(pg_template: str | None) -> Iterator[str]:
    # A fresh clone: a reused one keeps the dead pages of earlier tests, which the
    # planner counts.
    yield from pg_database(pg_template, fresh=True)


@pytest.fixture
def seeded(core: Core, creds: TenantCreds) -> dict[str, Any]:
    tenant = creds.tenant_id
    with core.db.engine.begin() as conn:
        for sql in SEED:
            conn.execute(sa.text(sql), {"tenant": tenant, "owner": creds.owner_id, "n": HISTORY})
    with core.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE"))
    with core.db.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(t.runs)).scalar_one() >= HISTORY
    return {"tenant": tenant}


def test_the_stall_sweep_reads_its_due_index_not_finished_runs(
    core: Core, seeded: dict[str, Any]
) -> None:
    found = plan(core, stalls.DUE, now=datetime.now(UTC), limit=500)
    assert_indexed(found, "ix_runs_stall_due")


def test_the_escalation_sweep_reads_its_due_index_not_settled_steps(
    core: Core, seeded: dict[str, Any]
) -> None:
    found = plan(core, escalations.DUE, now=datetime.now(UTC), limit=500)
    assert_indexed(found, "ix_escalation_steps_due")
