"""Stall detection across real processes (DESIGN §2 inv. 13, §4 "exactly one leader runs
each sweep"; issue 10 item 6): two `runbell worker --scheduler` children on one
PostgreSQL, ticking every 0.1 s, over runs that started working and never reported again
(their worker vanished). Each run stalls once — one `stalled` notification, one `stall`
transition — and its `run.stalled` webhook reaches the tenant's receiver once, signed,
however many ticks of either process looked at it."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.app import build, create_app
from runbell.flows.context import Core
from runbell.signatures import new_secret
from runbell.store import endpoints
from runbell.store import tables as t
from runbell.testing import make_tenant
from tests.acceptance.processes import SchedulerProc, start_all
from tests.acceptance.receivers import Receiver
from tests.acceptance.test_worker_processes import child_env, clean, wait_for
from tests.conftest import bearer, make_settings, pg_database

pytestmark = pytest.mark.postgres

RUNS = 6


@pytest.fixture
def pg_url(pg_template: str | None) -> Iterator[str]:
    yield from pg_database(pg_template)


@pytest.fixture
def core(tmp_path: Path, pg_url: str) -> Iterator[Core]:
    rb = build(make_settings(tmp_path, pg_url), migrate=False)
    yield rb
    rb.db.dispose()


def counted(core: Core, table: sa.Table, **where: str) -> Counter[str]:
    q = sa.select(table.c.run_id)
    for name, value in where.items():
        q = q.where(table.c[name] == value)
    with core.db.read() as conn:
        return Counter(conn.execute(q).scalars())


def test_two_scheduler_processes_record_each_stall_once(
    tmp_path: Path, pg_url: str, core: Core
) -> None:
    secret = new_secret()
    creds = make_tenant(core)
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        with core.db.transaction() as tx:
            endpoints.create(
                tx.conn,
                creds.tenant_id,
                tx.now,
                url=rx.url,
                description="stall receiver",
                event_types=["run.stalled"],
                sealed_secret=core.box.seal(secret),
                rate_limit_per_s=None,
            )
        env = child_env(tmp_path, pg_url, RUNBELL_SCHEDULER_INTERVAL_S="0.1")
        schedulers = [SchedulerProc(env, tmp_path / f"scheduler{n}.log") for n in (1, 2)]
        start_all(stack, list(schedulers))
        client = stack.enter_context(TestClient(create_app(core, bridge=False)))
        for n in range(RUNS):
            r = client.put(
                f"/v1/runs/gone-{n}",
                json={"owner": creds.owner_email, "state": "working", "stall_after_seconds": 1},
                headers=bearer(creds.runtime_key),
            )
            assert r.status_code == 201, r.text

        wait_for(lambda: len(rx.ids()) == RUNS, "a run.stalled webhook per run", schedulers)
        time.sleep(1.5)  # fifteen more ticks of each process: nothing further may happen
        for proc in schedulers:
            assert proc.stop() == 0
            clean(proc.output)

        stalled = counted(core, t.notifications, attention_type="stalled")
        stalls = counted(core, t.transitions, kind="stall")
        arrivals = list(rx.arrivals)

    expected = Counter({f"gone-{n}": 1 for n in range(RUNS)})
    assert stalled == expected
    assert stalls == expected
    assert Counter(a.webhook_id for a in arrivals).most_common(1)[0][1] == 1
    bodies = [json.loads(a.body) for a in arrivals]
    assert all(a.verified for a in arrivals)
    assert {b["type"] for b in bodies} == {"run.stalled"}
    assert Counter(b["data"]["run_id"] for b in bodies) == expected
