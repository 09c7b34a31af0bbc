"""Round trips of a batch (runtime/writer.py, store/fast.py ``pipeline``, store/db.py; issue
21's floor of 4 round trips per signal at 8 writers on PostgreSQL), on SQLite and PostgreSQL.

On PostgreSQL the batch's reads go with its BEGIN in one pipeline, and its writes at
commit (deferred rows, the fan-out hook's reads, outbox rows, the feed as one statement)
in another. These must hold: a statement run through ``conn.execute`` inside a pipeline
reads what the pipeline wrote before it; a row failing at commit inside the pipeline
fails the batch, and each unit tried alone answers for itself; the round trips a batch
of eight signals costs stay within the floor. On SQLite the pipelines do nothing.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa

from runbell.flows.context import Core
from runbell.store import fast, runs
from runbell.store import tables as t
from runbell.store.db import Tx
from runbell.testing import TenantCreds
from tests.integration.test_concurrency import create_runs
from tests.integration.test_group_commit import HeldWriter, accept_in_thread, count
from tests.timeouts import WAIT


def test_a_batch_of_eight_signals_stays_within_four_round_trips_each(
    core: Core, creds: TenantCreds
) -> None:
    create_runs(core, creds, [f"r{i}" for i in range(8)])
    held = HeldWriter(core)
    batches, saved = core.writer.batches, fast.saved_round_trips
    sent: list[str] = []

    def seen(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        if threading.current_thread() is core.writer._thread:  # not the callers' reads
            sent.append(" ".join(sql.split()))

    sa.event.listen(core.db.engine, "before_cursor_execute", seen)
    try:
        answers = [accept_in_thread(core, creds, f"r{i}", f"e{i}") for i in range(8)]
        held.release_when_queued(8)
        assert [a.result(timeout=WAIT).outcome for a in answers] == ["applied"] * 8
    finally:
        sa.event.remove(core.db.engine, "before_cursor_execute", seen)
    assert core.writer.batches - batches == 2  # the held unit's, then the eight together
    piped = fast.saved_round_trips - saved
    if core.db.is_postgres:
        # BEGIN + three reads in one; deferred rows, endpoints, outbox rows, feed in two.
        assert piped >= 3 + 4
        trips = len(sent) + 2 - piped  # + BEGIN and COMMIT of the batch of eight
    else:
        assert piped == 0
        trips = len(sent) + 1  # + COMMIT
    assert trips <= 4 * 8, sent
    assert count(core, t.feed_events, creds.tenant_id) > 0


def test_a_hook_reading_through_sqlalchemy_in_the_commit_pipeline_sees_the_rows_before_it(
    core: Core, creds: TenantCreds
) -> None:
    """The hooks run inside the commit's pipeline: a ``conn.execute`` there must wait for
    the deferred transitions sent before it, and get its own rows (not an empty result)."""
    create_runs(core, creds, [f"r{i}" for i in range(4)])
    seen: list[int] = []

    def hook(tx: Tx) -> None:
        n = tx.conn.execute(
            sa.select(sa.func.count())
            .select_from(t.transitions)
            .where(t.transitions.c.tenant_id == creds.tenant_id)
        ).scalar_one()
        seen.append(int(n))

    core.db.before_flush.append(hook)
    try:
        held = HeldWriter(core)
        answers = [accept_in_thread(core, creds, f"r{i}", f"e{i}") for i in range(4)]
        held.release_when_queued(4)
        assert [a.result(timeout=WAIT).outcome for a in answers] == ["applied"] * 4
    finally:
        core.db.before_flush.remove(hook)
    assert seen[-1] == count(core, t.transitions, creds.tenant_id)


def test_a_row_failing_at_commit_answers_its_own_unit_and_the_others_commit(
    core: Core, creds: TenantCreds
) -> None:
    """A unit defers a history row that clashes with a stored one: the commit's pipeline
    fails, nothing of the batch happened; each unit tried alone, only that one hears the
    error (as SQLAlchemy's IntegrityError, like any other) and the signals commit."""
    create_runs(core, creds, [f"r{i}" for i in range(3)])
    with core.db.read() as conn:
        stored = dict(
            conn.execute(
                sa.select(t.transitions).where(
                    t.transitions.c.tenant_id == creds.tenant_id, t.transitions.c.run_id == "r0"
                )
            )
            .first()
            ._mapping  # type: ignore[union-attr]
        )

    def clash(tx: Tx) -> None:
        tx.defer(runs._ADD_TRANSITION, {name: stored[name] for name in runs.TRANSITION_COLUMNS})

    held = HeldWriter(core)
    answers = [accept_in_thread(core, creds, f"r{i}", f"e{i}") for i in range(3)]
    bad = core.writer.submit(clash, key=(creds.tenant_id, "r0"))
    held.release_when_queued(4)
    assert [a.result(timeout=WAIT).outcome for a in answers] == ["applied"] * 3
    with pytest.raises(sa.exc.IntegrityError):
        bad.result(timeout=WAIT)
    assert count(core, t.inbound_events, creds.tenant_id) == 3
    # The failed attempt left the connection usable: the next batch commits.
    create_runs(core, creds, ["r9"])
    assert accept_in_thread(core, creds, "r9", "e9").result(timeout=WAIT).outcome == "applied"


def test_a_statement_failing_inside_a_pipeline_is_a_dbapi_error_and_rolls_back(
    core: Core, creds: TenantCreds
) -> None:
    """Directly: a failing statement sent in a pipeline surfaces at the block's end (or
    the next read) wrapped as the driver's errors are elsewhere; the transaction fails
    whole, and a later one works."""
    create_runs(core, creds, ["r0"])

    def unit(tx: Tx) -> Any:
        with fast.pipeline(tx.conn):
            rows = runs.send_lock_batch(tx, [(creds.tenant_id, "r0")])
            runs._ADD_TRANSITION.many(tx.conn, [_copy_first_transition(tx, creds)])
            rows()
        raise AssertionError("the clash was not raised")

    with pytest.raises(sa.exc.IntegrityError), core.db.transaction() as tx:
        unit(tx)
    with core.db.transaction() as tx:  # nothing of it stayed; the database is usable
        assert count_in(tx, creds) == 1


def count_in(tx: Tx, creds: TenantCreds) -> int:
    return int(
        tx.conn.execute(
            sa.select(sa.func.count())
            .select_from(t.transitions)
            .where(t.transitions.c.tenant_id == creds.tenant_id)
        ).scalar_one()
    )


def _copy_first_transition(tx: Tx, creds: TenantCreds) -> dict[str, Any]:
    row = tx.conn.execute(
        sa.select(t.transitions).where(t.transitions.c.tenant_id == creds.tenant_id)
    ).first()
    assert row is not None
    return {name: row._mapping[name] for name in runs.TRANSITION_COLUMNS}


def test_a_rowcount_inside_a_pipeline_is_the_real_one(core: Core, creds: TenantCreds) -> None:
    """``Statement.execute`` answers a rowcount: inside a pipeline it waits for it."""
    create_runs(core, creds, ["r0"])
    with core.db.transaction() as tx, fast.pipeline(tx.conn):
        run = runs.get_run(tx.conn, creds.tenant_id, "r0", for_update=True)
        assert run is not None
        assert (
            runs._MOVE_RUN.execute(
                tx.conn,
                k_tenant=creds.tenant_id,
                k_run="r0",
                **{name: getattr(run, name) for name in runs.MOVED},
            )
            == 1
        )


def test_an_error_a_later_unit_reads_is_answered_by_the_unit_that_caused_it(
    core: Core, creds: TenantCreds
) -> None:
    """A unit sends a statement without waiting for it (as ``runs.move_run`` does) and it
    fails on the server: in the writer's pipeline the error surfaces in the next unit's
    read. The batch runs again unit by unit, so the sender hears it and the signals after
    it in the batch commit."""
    create_runs(core, creds, [f"r{i}" for i in range(1, 4)])
    with core.db.read() as conn:
        row = conn.execute(
            sa.select(t.transitions).where(
                t.transitions.c.tenant_id == creds.tenant_id, t.transitions.c.run_id == "r1"
            )
        ).first()
    assert row is not None
    clash = {name: row._mapping[name] for name in runs.TRANSITION_COLUMNS}

    def sender(tx: Tx) -> str:
        runs._ADD_TRANSITION.post(tx.conn, **clash)  # not read: fails unseen
        return "sent"

    held = HeldWriter(core)
    bad = core.writer.submit(sender, key=(creds.tenant_id, "r0"))  # sorts first
    answers = [accept_in_thread(core, creds, f"r{i}", f"e{i}") for i in range(1, 4)]
    held.release_when_queued(4)
    assert [a.result(timeout=WAIT).outcome for a in answers] == ["applied"] * 3
    with pytest.raises(sa.exc.IntegrityError):
        bad.result(timeout=WAIT)
    assert count(core, t.inbound_events, creds.tenant_id) == 3
