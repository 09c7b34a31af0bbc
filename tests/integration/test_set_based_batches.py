"""Set-based batches (runtime/writer.py ``_read_ahead``, issue 21 item 2), on SQLite and
PostgreSQL.

The writer reads a batch's runs (locked), their open notifications and its events' dedupe
rows in one statement each, and defers outbox rows and digest items to one executemany.
Each read is served once and dropped on any write, so these must hold: a second signal
for a run in the same batch sees the first's result; a unit rolled back to its savepoint
leaves nothing the next unit reads; a duplicate of an event stored earlier — or earlier in
the batch — answers ``duplicate``; a batch spanning two tenants locks and counts each.
Batches are made deterministic by holding the writer until the units have queued.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from runbell.domain.errors import Conflict
from runbell.flows import signals
from runbell.flows.context import Core
from runbell.flows.signals import Signal, SignalResult
from runbell.store import tables as t
from runbell.store.outbox import PENDING_DELIVERY
from runbell.testing import TenantCreds, make_tenant
from tests.integration.test_concurrency import api_source, create_runs
from tests.integration.test_group_commit import HeldWriter, accept_in_thread, count
from tests.timeouts import WAIT


def queued_in_order(core: Core, make: list[Any]) -> list[Future[Any]]:
    """Start each submission only once the one before it has queued (their order in the
    batch: the writer sorts by key, stably)."""
    out = []
    for i, start in enumerate(make):
        out.append(start())
        deadline = time.monotonic() + WAIT
        while core.writer._queue.qsize() < i + 1:
            assert time.monotonic() < deadline, "the unit never queued"
            time.sleep(0.005)
    return out


def signal_in_thread(core: Core, creds: TenantCreds, run_id: str, event_id: str, state: str) -> Any:
    return lambda: accept_in_thread(core, creds, run_id, event_id, state)


@contextmanager
def statements(core: Core) -> Iterator[list[str]]:
    """The SQL the writer sends while the block runs (every statement, one entry each)."""
    sent: list[str] = []

    def seen(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        sent.append(" ".join(sql.split()))

    sa.event.listen(core.db.engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        sa.event.remove(core.db.engine, "before_cursor_execute", seen)


def notes_of(core: Core, tenant_id: str, run_id: str) -> list[dict[str, Any]]:
    with core.db.read() as conn:
        return [
            dict(r._mapping)
            for r in conn.execute(
                sa.select(t.notifications)
                .where(t.notifications.c.tenant_id == tenant_id, t.notifications.c.run_id == run_id)
                .order_by(t.notifications.c.transition_version)
            )
        ]


def run_row(core: Core, tenant_id: str, run_id: str) -> dict[str, Any]:
    with core.db.read() as conn:
        row = conn.execute(
            sa.select(t.runs).where(t.runs.c.tenant_id == tenant_id, t.runs.c.run_id == run_id)
        ).one()
    return dict(row._mapping)


def test_a_batch_reads_each_kind_once_and_writes_outbox_rows_in_one_statement(
    core: Core, creds: TenantCreds
) -> None:
    create_runs(core, creds, [f"r{i}" for i in range(8)])
    held = HeldWriter(core)
    with statements(core) as sent:
        answers = [accept_in_thread(core, creds, f"r{i}", f"e{i}") for i in range(8)]
        held.release_when_queued(8)
        assert [a.result(timeout=WAIT).outcome for a in answers] == ["applied"] * 8

    def kind(prefix: str) -> int:
        return sum(1 for sql in sent if sql.startswith(prefix))

    assert kind("SELECT runs.") == 1  # every run locked in one statement
    assert kind("SELECT inbound_events.") == 1  # every dedupe row read in one
    assert kind("SELECT notifications.") == 1  # every run's open notifications in one
    assert kind("INSERT INTO deliveries") == 1  # the eight inbox rows in one executemany
    assert kind("INSERT INTO inbound_events") == 1
    assert kind("INSERT INTO transitions") == 1
    assert count(core, t.deliveries, creds.tenant_id) == 8
    assert count(core, t.notifications, creds.tenant_id) == 8


@pytest.mark.usefixtures("mailing")
def test_a_second_signal_for_the_same_run_sees_the_first_ones_result(
    core: Core, creds: TenantCreds
) -> None:
    """input_required then completed, then a late working, one batch: the completion
    supersedes the request's notification the first wrote (its deferred outbox rows are
    written before they are cancelled), and the late signal is stale."""
    create_runs(core, creds, ["r0"])
    version = run_row(core, creds.tenant_id, "r0")["version"]
    held = HeldWriter(core)
    before = core.writer.batches
    asked, done, late = queued_in_order(
        core,
        [
            signal_in_thread(core, creds, "r0", "e-ask", "input_required"),
            signal_in_thread(core, creds, "r0", "e-done", "completed"),
            signal_in_thread(core, creds, "r0", "e-late", "working"),
        ],
    )
    held.release_when_queued(0)
    assert asked.result(timeout=WAIT).outcome == "applied"
    finished = done.result(timeout=WAIT)
    assert finished.outcome == "applied"
    assert finished.run["version"] == version + 2  # type: ignore[typeddict-item]
    assert late.result(timeout=WAIT).outcome == "stale"
    # In one transaction, first time: a stale copy of r0 would have failed it (the
    # writer then retries alone, hiding the bug from the outcomes).
    assert core.writer.batches - before == 2
    row = run_row(core, creds.tenant_id, "r0")
    assert (row["state"], row["version"]) == ("completed", version + 2)
    first, second = notes_of(core, creds.tenant_id, "r0")
    assert (first["attention_type"], first["state"]) == ("input_required", "superseded")
    assert (second["attention_type"], second["state"]) == ("completed", "open")
    with core.db.read() as conn:
        statuses = list(
            conn.execute(
                sa.select(t.deliveries.c.status).where(
                    t.deliveries.c.tenant_id == creds.tenant_id,
                    t.deliveries.c.notification_id == first["id"],
                )
            ).scalars()
        )
    assert "cancelled" in statuses  # its email, queued in this batch, never goes
    assert not set(statuses) & set(PENDING_DELIVERY)


def test_a_unit_rolled_back_after_moving_a_run_leaves_the_next_unit_the_stored_run(
    core: Core, creds: TenantCreds
) -> None:
    """The first unit takes the batch's locked copy of r0, completes it, then fails: its
    savepoint goes, and the next unit for r0 reads r0 as stored (working), not the copy
    or the rolled-back move. The others of the batch commit."""
    create_runs(core, creds, ["r0", "r1"])
    source = api_source(core, creds.tenant_id)
    prepared = signals._prepare(
        core,
        creds.tenant_id,
        source,
        "r0",
        signals.checked(Signal(event_id="e-bad", state="completed")),
    )
    assert callable(prepared)

    def completes_then_fails(tx: Any) -> None:
        prepared(tx)
        raise RuntimeError("boom")

    held = HeldWriter(core)
    before = core.writer.batches
    bad, good, other = queued_in_order(
        core,
        [
            lambda: core.writer.submit(
                completes_then_fails,
                key=(creds.tenant_id, "r0"),
                inbound=(creds.tenant_id, source.id, "e-bad"),
            ),
            signal_in_thread(core, creds, "r0", "e-good", "failed"),
            signal_in_thread(core, creds, "r1", "e-r1", "completed"),
        ],
    )
    held.release_when_queued(0)
    with pytest.raises(RuntimeError, match="boom"):
        bad.result(timeout=WAIT)
    assert good.result(timeout=WAIT).outcome == "applied"
    assert other.result(timeout=WAIT).outcome == "applied"
    assert core.writer.batches - before == 2  # the held unit; the batch, one savepoint each
    assert run_row(core, creds.tenant_id, "r0")["state"] == "failed"
    assert [n["attention_type"] for n in notes_of(core, creds.tenant_id, "r0")] == ["failed"]
    with core.db.read() as conn:
        events = set(
            conn.execute(
                sa.select(t.inbound_events.c.event_id).where(
                    t.inbound_events.c.tenant_id == creds.tenant_id
                )
            ).scalars()
        )
    assert events == {"e-good", "e-r1"}  # nothing of the failed unit


def test_duplicates_of_stored_and_same_batch_events(core: Core, creds: TenantCreds) -> None:
    """A retry of an event stored by an earlier batch (the batch's dedupe read finds it),
    a retry of one earlier in the same batch, and an event id reused by another run (a
    conflict, answered alone): the others commit."""
    create_runs(core, creds, ["r0", "r1", "r2"])
    source = api_source(core, creds.tenant_id)
    stored = signals.accept_signal(
        core, creds.tenant_id, source, "r0", Signal(event_id="e0", state="completed")
    )
    assert stored.outcome == "applied"
    held = HeldWriter(core)
    before = core.writer.batches
    retry, first, again, reused = queued_in_order(
        core,
        [
            signal_in_thread(core, creds, "r0", "e0", "completed"),
            signal_in_thread(core, creds, "r1", "e1", "completed"),
            signal_in_thread(core, creds, "r1", "e1", "completed"),
            signal_in_thread(core, creds, "r2", "e1", "completed"),
        ],
    )
    held.release_when_queued(0)
    answered: SignalResult = retry.result(timeout=WAIT)
    assert (answered.outcome, answered.original_outcome) == ("duplicate", "applied")
    assert answered.notifications == stored.notifications
    assert first.result(timeout=WAIT).outcome == "applied"
    assert again.result(timeout=WAIT).outcome == "duplicate"
    with pytest.raises(Conflict):
        reused.result(timeout=WAIT)
    assert core.writer.batches - before == 2
    assert count(core, t.inbound_events, creds.tenant_id) == 2
    assert run_row(core, creds.tenant_id, "r2")["state"] == "working"


def test_a_batch_spanning_two_tenants(core: Core, creds: TenantCreds) -> None:
    other = make_tenant(core, "second")
    create_runs(core, creds, ["a0", "a1"])
    create_runs(core, other, ["a0", "b1"])  # the same run id in both tenants
    held = HeldWriter(core)
    with statements(core) as sent:
        answers = [
            accept_in_thread(core, creds, "a0", "x0"),
            accept_in_thread(core, other, "a0", "x0"),
            accept_in_thread(core, creds, "a1", "x1"),
            accept_in_thread(core, other, "b1", "x1"),
        ]
        held.release_when_queued(4)
        assert [a.result(timeout=WAIT).outcome for a in answers] == ["applied"] * 4
    assert sum(1 for sql in sent if sql.startswith("SELECT runs.")) == 1
    for tenant in (creds, other):
        assert count(core, t.notifications, tenant.tenant_id) == 2
        assert count(core, t.inbound_events, tenant.tenant_id) == 2
        assert run_row(core, tenant.tenant_id, "a0")["state"] == "completed"
        with core.db.read() as conn:
            seqs = list(
                conn.execute(
                    sa.select(t.feed_events.c.seq)
                    .where(t.feed_events.c.tenant_id == tenant.tenant_id)
                    .order_by(t.feed_events.c.seq)
                ).scalars()
            )
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap per tenant


def test_outbox_rows_written_early_and_a_rewound_unit(core: Core, creds: TenantCreds) -> None:
    """Deferred outbox rows written early (another outbox statement in the same
    transaction) and then rolled back with their unit's savepoint: the unit's rows are
    gone whether they were written early or still pending; the earlier unit's stay."""
    from runbell.store import outbox

    def row(n: int) -> Any:
        values = outbox.delivery_row(creds.tenant_id, None, "webhook", f"ep_{n}", "queued", now)
        return {**values, "id": f"dlv_early{n}"}

    now = core.db.clock()
    with core.db.transaction() as tx:
        outbox.add_deliveries(tx.conn, [row(0)])  # an earlier unit's, still pending
        mark = tx.mark()
        savepoint = tx.conn.begin_nested()
        outbox.add_deliveries(tx.conn, [row(1), row(2)])
        outbox.write_deferred(tx.conn)  # e.g. a cancel_pending: rows 0-2 written now
        outbox.add_deliveries(tx.conn, [row(3)])  # pending again
        savepoint.rollback()
        tx.rewind(mark)
        outbox.add_deliveries(tx.conn, [row(4)])  # the next unit's
    with core.db.read() as conn:
        stored = set(
            conn.execute(
                sa.select(t.deliveries.c.id).where(t.deliveries.c.id.like("dlv_early%"))
            ).scalars()
        )
    assert stored == {"dlv_early0", "dlv_early4"}


def test_more_keys_than_one_statement_takes_are_read_in_chunks(
    core: Core, creds: TenantCreds
) -> None:
    """A batch may hold up to 1,000 units (RUNBELL_WRITER_MAX_BATCH); its reads go in
    statements of at most CHUNK keys (an OR chain past ~1,000 terms is too deep for
    SQLite), and every run, open notification list and dedupe row is still read."""
    from runbell.store import notifications, runs

    run_ids = [f"c{i:03d}" for i in range(runs.CHUNK + 6)]
    create_runs(core, creds, run_ids)
    keys = [(creds.tenant_id, run_id) for run_id in run_ids]
    source = api_source(core, creds.tenant_id)
    with statements(core) as sent, core.db.transaction() as tx:
        runs.lock_batch(tx, keys)
        notifications.read_open_batch(tx, keys)
        runs.read_inbound_batch(tx, [(creds.tenant_id, source.id, f"x{r}") for r in run_ids])
        assert set(tx.locked) == set(keys)
        assert set(tx.open_notes) == set(keys)
        assert len(tx.inbound) == len(run_ids) and not any(tx.inbound.values())
    assert sum(1 for sql in sent if sql.startswith("SELECT runs.")) == 2
    assert sum(1 for sql in sent if sql.startswith("SELECT notifications.")) == 2
    assert sum(1 for sql in sent if sql.startswith("SELECT inbound_events.")) == 2
