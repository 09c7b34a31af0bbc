"""The SQL that docs/operations.md ("Production topology") tells operators to run, run
here so it stays valid: the vacuum settings for the hot tables (PostgreSQL), and the step
after a restore that turns every old feed cursor into an explicit 410 instead of a silent
gap (invariant 17), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import TenantCreds
from tests.conftest import bearer

OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"


def sql_block(heading: str) -> str:
    """The first ```sql block after ``heading`` in docs/operations.md."""
    text = OPERATIONS.read_text()
    after = text[text.index(heading) :]
    found = re.search(r"```sql\n(.*?)```", after, re.S)
    assert found, f"no sql block under {heading!r}"
    return found.group(1)


def statements(block: str) -> list[str]:
    lines = [line for line in block.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def test_the_vacuum_settings_apply(core: Core) -> None:
    if not core.db.is_postgres:
        pytest.skip("autovacuum and fillfactor are PostgreSQL storage parameters")
    block = statements(sql_block("### Vacuum settings for the hot tables"))
    assert len(block) == 7
    with core.db.engine.begin() as conn:
        for statement in block:
            conn.execute(sa.text(statement))
        options = dict(
            conn.execute(
                sa.text(
                    "SELECT relname, reloptions FROM pg_class WHERE relname IN "
                    "('deliveries', 'tenants', 'presence', 'feed_events')"
                )
            ).all()
        )
    assert "autovacuum_vacuum_scale_factor=0.01" in options["deliveries"]
    assert "fillfactor=50" in options["tenants"] and "fillfactor=50" in options["presence"]
    assert "autovacuum_vacuum_insert_scale_factor=0.05" in options["feed_events"]


def events(client: TestClient, creds: TenantCreds, after: str) -> tuple[int, dict[str, object]]:
    r = client.get("/v1/events", params={"after": after}, headers=bearer(creds.runtime_key))
    return r.status_code, r.json()


def put_run(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    r = client.put(
        f"/v1/runs/{run_id}", json={"owner": creds.owner_email}, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 201, r.text


def restore_to(core: Core, creds: TenantCreds, head: int) -> None:
    """What a dump taken when the feed head was ``head`` brings back."""
    with core.db.transaction() as tx:
        tx.conn.execute(
            sa.delete(t.feed_events).where(
                t.feed_events.c.tenant_id == creds.tenant_id, t.feed_events.c.seq > head
            )
        )
        tx.conn.execute(
            sa.update(t.tenants).where(t.tenants.c.id == creds.tenant_id).values(feed_seq=head)
        )


def test_after_a_restore_old_cursors_get_410_and_a_snapshot_never_a_gap(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    for n in range(6):
        put_run(client, creds, f"before-{n}")
    status, page = events(client, creds, "earliest")
    assert status == 200
    held = str(page["next_cursor"])  # what a client holds when the database is lost
    restore_to(core, creds, int(held) - 3)  # the snapshot is three events older

    (step,) = statements(sql_block("### After a restore"))
    with core.db.engine.begin() as conn:
        conn.execute(sa.text(step))
    for n in range(5):  # new commits after the restore: more than the three lost
        put_run(client, creds, f"after-{n}")

    status, gone = events(client, creds, held)
    assert status == 410, gone
    assert gone["snapshot_url"] and int(str(gone["head_cursor"])) > int(held)
    status, resumed = events(client, creds, str(gone["head_cursor"]))
    assert status == 200 and resumed["events"] == []


def test_without_that_step_the_old_cursor_silently_skips_new_events(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Why the step exists: the restored feed hands the old numbers to new events."""
    for n in range(6):
        put_run(client, creds, f"before-{n}")
    held = str(events(client, creds, "earliest")[1]["next_cursor"])
    restore_to(core, creds, int(held) - 3)
    for n in range(5):
        put_run(client, creds, f"after-{n}")
    status, page = events(client, creds, held)
    assert status == 200
    events_after = page["events"]
    assert isinstance(events_after, list)
    assert len(events_after) < 5, "three of the new events were skipped without a word"
