"""Group commit (runtime/writer.py): signals committed together, each still its own unit.

Issue 9 §2: a failing signal inside a batch answers its own error and the others commit;
a caller is never told ``applied`` before its commit is durable; a crash with a batch
half built commits nothing of it. On SQLite and PostgreSQL. Batches are made
deterministic by holding the writer on a first unit until the others have queued.
"""

from __future__ import annotations

import os
import signal as signals_os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from runbell.config import Settings
from runbell.domain.errors import NotFound
from runbell.flows import signals
from runbell.flows.context import Core
from runbell.flows.signals import Signal, SignalResult
from runbell.store import tables as t
from runbell.testing import TenantCreds
from tests.integration.test_concurrency import api_source, create_runs
from tests.timeouts import WAIT, scaled


def count(core: Core, table: sa.Table, tenant_id: str) -> int:
    with core.db.read() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(table).where(table.c.tenant_id == tenant_id)
            ).scalar_one()
        )


class HeldWriter:
    """Hold the writer on a first unit until ``n`` more have queued behind it, so those
    ``n`` are taken as one batch."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.gate = threading.Event()
        started = threading.Event()

        def hold(tx: Any) -> None:
            started.set()
            self.gate.wait(WAIT)

        self.held: Future[Any] = core.writer.submit(hold)
        assert started.wait(WAIT), "the writer never started"

    def release_when_queued(self, n: int) -> None:
        deadline = time.monotonic() + WAIT
        while self.core.writer._queue.qsize() < n:
            assert time.monotonic() < deadline, "the units never queued"
            time.sleep(0.01)
        self.gate.set()
        self.held.result(timeout=WAIT)


def accept_in_thread(
    core: Core, creds: TenantCreds, run_id: str, event_id: str, state: str = "completed"
) -> Future[SignalResult]:
    out: Future[SignalResult] = Future()
    source = api_source(core, creds.tenant_id)

    def go() -> None:
        try:
            out.set_result(
                signals.accept_signal(
                    core, creds.tenant_id, source, run_id, Signal(event_id=event_id, state=state)
                )
            )
        except BaseException as exc:
            out.set_exception(exc)

    threading.Thread(target=go, daemon=True).start()
    return out


def test_signals_waiting_together_commit_in_one_batch(core: Core, creds: TenantCreds) -> None:
    create_runs(core, creds, [f"r{i}" for i in range(8)])
    held = HeldWriter(core)
    before = core.writer.batches
    answers = [accept_in_thread(core, creds, f"r{i}", f"e{i}") for i in range(8)]
    held.release_when_queued(8)
    assert [a.result(timeout=WAIT).outcome for a in answers] == ["applied"] * 8
    # One batch for the held unit, one for the eight.
    assert core.writer.batches - before == 2
    assert count(core, t.inbound_events, creds.tenant_id) == 8
    assert count(core, t.notifications, creds.tenant_id) == 8


def test_a_failing_signal_in_a_batch_answers_its_own_error_and_the_others_commit(
    core: Core, creds: TenantCreds
) -> None:
    create_runs(core, creds, ["r0", "r1", "r3", "r4"])
    held = HeldWriter(core)
    answers = {
        run_id: accept_in_thread(core, creds, run_id, f"e-{run_id}")
        for run_id in ["r0", "r1", "missing", "r3", "r4"]
    }
    held.release_when_queued(5)
    with pytest.raises(NotFound):
        answers.pop("missing").result(timeout=WAIT)
    assert {r: a.result(timeout=WAIT).outcome for r, a in answers.items()} == dict.fromkeys(
        answers, "applied"
    )
    with core.db.read() as conn:
        stored = {
            r.run_id
            for r in conn.execute(
                sa.select(t.inbound_events.c.run_id).where(
                    t.inbound_events.c.tenant_id == creds.tenant_id
                )
            )
        }
    assert stored == {"r0", "r1", "r3", "r4"}


def test_a_unit_that_raises_after_writing_leaves_nothing_of_itself(
    core: Core, creds: TenantCreds
) -> None:
    """The savepoint is the unit's boundary: its rows, feed events and wake-ups go."""
    create_runs(core, creds, ["r0", "r1"])
    feed_before = count(core, t.feed_events, creds.tenant_id)

    def writes_then_fails(tx: Any) -> None:
        tx.conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.tenant_id == creds.tenant_id, t.runs.c.run_id == "r1")
            .values(title="must not stay")
        )
        from runbell.store.db import PendingEvent

        tx.emit(creds.tenant_id, PendingEvent("run.updated", {"run_id": "r1"}, run_id="r1"))
        raise RuntimeError("boom")

    held = HeldWriter(core)
    good = accept_in_thread(core, creds, "r0", "e0")
    bad = core.writer.submit(writes_then_fails)
    held.release_when_queued(2)
    assert good.result(timeout=WAIT).outcome == "applied"
    with pytest.raises(RuntimeError, match="boom"):
        bad.result(timeout=WAIT)
    with core.db.read() as conn:
        summary = conn.execute(
            sa.select(t.runs.c.title).where(
                t.runs.c.tenant_id == creds.tenant_id, t.runs.c.run_id == "r1"
            )
        ).scalar()
    assert summary != "must not stay"  # the title it had
    # r0's transition and notification events only; nothing of the failed unit.
    new_events = count(core, t.feed_events, creds.tenant_id) - feed_before
    with core.db.read() as conn:
        types = [
            r.type
            for r in conn.execute(
                sa.select(t.feed_events.c.type, t.feed_events.c.run_id).where(
                    t.feed_events.c.tenant_id == creds.tenant_id,
                    t.feed_events.c.run_id == "r1",
                    t.feed_events.c.type == "run.updated",
                )
            )
        ]
    assert types == []
    assert new_events >= 2


def test_the_same_event_twice_in_one_batch_is_one_signal(core: Core, creds: TenantCreds) -> None:
    create_runs(core, creds, ["r0"])
    held = HeldWriter(core)
    first = accept_in_thread(core, creds, "r0", "e0")
    again = accept_in_thread(core, creds, "r0", "e0")
    held.release_when_queued(2)
    outcomes = sorted([first.result(timeout=WAIT).outcome, again.result(timeout=WAIT).outcome])
    assert outcomes == ["applied", "duplicate"]
    results = [first.result(), again.result()]
    assert results[0].notifications == results[1].notifications
    assert count(core, t.notifications, creds.tenant_id) == 1
    assert count(core, t.transitions, creds.tenant_id) == 2  # created + completed


def test_nobody_hears_applied_before_the_commit_and_a_failed_commit_answers_everyone(
    core: Core, creds: TenantCreds
) -> None:
    """Each answer is checked against a fresh connection the moment it arrives; then a
    batch whose commit fails answers every caller with that error and stores nothing."""
    create_runs(core, creds, [f"r{i}" for i in range(6)])
    seen_durable: list[bool] = []

    def check(run_id: str, event_id: str) -> None:
        result = signals.accept_signal(
            core,
            creds.tenant_id,
            api_source(core, creds.tenant_id),
            run_id,
            Signal(event_id=event_id, state="completed"),
        )
        assert result.outcome == "applied"
        with core.db.engine.connect() as conn:  # a separate connection: committed only
            seen_durable.append(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(t.inbound_events)
                    .where(
                        t.inbound_events.c.tenant_id == creds.tenant_id,
                        t.inbound_events.c.event_id == event_id,
                    )
                ).scalar_one()
                == 1
            )

    threads = [threading.Thread(target=check, args=(f"r{i}", f"e{i}")) for i in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=scaled(60))
    assert seen_durable == [True, True, True]

    # Now make the next commit fail (a hook that runs inside the transaction, last).
    def fail(tx: Any) -> None:
        if any(ev.run_id in {"r3", "r4", "r5"} for evs in tx.events.values() for ev in evs):
            raise sa.exc.OperationalError("COMMIT", None, ConnectionResetError("gone"))

    core.db.before_flush.append(fail)
    try:
        held = HeldWriter(core)
        answers = [accept_in_thread(core, creds, f"r{i}", f"e{i}") for i in (3, 4, 5)]
        held.release_when_queued(3)
        for a in answers:
            with pytest.raises(sa.exc.OperationalError):
                a.result(timeout=WAIT)
    finally:
        core.db.before_flush.remove(fail)
    assert count(core, t.inbound_events, creds.tenant_id) == 3


CRASH_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from runbell.app import build
    from runbell.config import Settings
    from runbell.flows import signals
    from runbell.flows.signals import Signal
    from runbell.store import accounts

    settings = Settings(**{k: v for k, v in (a.split("=", 1) for a in sys.argv[1:])})
    core = build(settings, migrate=False)
    tenant_id = os.environ["TENANT"]
    WAIT = float(os.environ["WAIT"])  # the suite's scaled bound (tests/timeouts.py)
    with core.db.read() as conn:
        source = accounts.get_source(conn, tenant_id, accounts.api_source_id(conn, tenant_id))
    gate, started = threading.Event(), threading.Event()
    held = core.writer.submit(lambda tx: (started.set(), gate.wait(WAIT)))
    started.wait(WAIT)
    for i in range(4):
        threading.Thread(
            target=signals.accept_signal,
            args=(core, tenant_id, source, f"r{i}", Signal(event_id=f"e{i}", state="completed")),
            daemon=True,
        ).start()

    def crash(tx):
        print("crashing", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # mid-batch: four signals written, no commit
        time.sleep(30)

    while core.writer._queue.qsize() < 4:
        time.sleep(0.01)
    core.writer.submit(crash, key=('~',))  # sorts after every tenant: runs last
    gate.set()
    time.sleep(30)
    """
)


def test_a_crash_with_a_batch_half_built_commits_nothing_of_it(
    core: Core, creds: TenantCreds, settings: Settings, tmp_path: Path
) -> None:
    create_runs(core, creds, [f"r{i}" for i in range(4)])
    args = [
        f"{name}={getattr(settings, name)}"
        for name in ("database_url", "secret_key", "data_dir", "public_url")
    ]
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, *args],
        env={**os.environ, "TENANT": creds.tenant_id, "WAIT": str(WAIT)},
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert proc.returncode == -signals_os.SIGKILL, proc.stderr[-2000:]
    assert "crashing" in proc.stdout
    assert count(core, t.inbound_events, creds.tenant_id) == 0
    assert count(core, t.notifications, creds.tenant_id) == 0
    with core.db.read() as conn:
        states = {
            r.state
            for r in conn.execute(
                sa.select(t.runs.c.state).where(t.runs.c.tenant_id == creds.tenant_id)
            )
        }
    assert states == {"working"}
    # And the database is whole: the same signals now go through.
    source = api_source(core, creds.tenant_id)
    for i in range(4):
        assert (
            signals.accept_signal(
                core, creds.tenant_id, source, f"r{i}", Signal(event_id=f"e{i}", state="completed")
            ).outcome
            == "applied"
        )


def test_a_batch_counts_its_own_recent_completions(core: Core, creds: TenantCreds) -> None:
    """recent_completions is read once per batch and then counted in memory: five quiet
    completions for one owner in one batch decide exactly as five one at a time would
    (the default rule makes the fourth and later a digest)."""
    create_runs(core, creds, [f"r{i}" for i in range(5)])
    held = HeldWriter(core)
    answers = [accept_in_thread(core, creds, f"r{i}", f"e{i}") for i in range(5)]
    held.release_when_queued(5)
    decided = sorted(
        (n["rule_id"], n["decision"]) for a in answers for n in a.result(timeout=WAIT).notifications
    )
    assert decided == sorted(
        [("completed.default", "inbox")] * 3 + [("completed.many_quiet", "digest")] * 2
    )
    with core.db.read() as conn:
        counted = sorted(
            r.inputs["recent_completions"]
            for r in conn.execute(
                sa.select(t.notifications.c.inputs).where(
                    t.notifications.c.tenant_id == creds.tenant_id
                )
            )
        )
    assert counted == [0, 1, 2, 3, 4]


def test_a_caller_that_stops_waiting_leaves_the_others_their_answers(core: Core) -> None:
    """An awaiting request cancelled while its unit is queued (its client gone, a timeout
    around it): its unit still runs and commits with the batch — a signal the writer took
    is recorded whether or not anyone hears the answer — and the other callers of that
    batch get their own answers, not an error from a caller that left."""
    import asyncio

    held = HeldWriter(core)
    ran: list[str] = []

    def unit(name: str) -> Any:
        def run(tx: Any) -> str:
            ran.append(name)
            return name

        return run

    async def scenario() -> tuple[str, str]:
        left = asyncio.ensure_future(core.writer.run_async(unit("left")))
        stays = asyncio.ensure_future(core.writer.run_async(unit("stays")))
        await asyncio.sleep(0)  # both submitted
        left.cancel()
        await asyncio.to_thread(held.release_when_queued, 2)
        with pytest.raises(asyncio.CancelledError):
            await left
        also = await core.writer.run_async(unit("after"))
        return await asyncio.wait_for(stays, WAIT), also

    assert asyncio.run(scenario()) == ("stays", "after")
    assert ran == ["left", "stays", "after"]


def _plant_next_notification(core: Core, creds: TenantCreds, run_id: str) -> None:
    """A notification for ``run_id``'s next version, as if something had raised it already
    (a copy of the ``seed`` run's)."""
    notes = t.notifications
    with core.db.transaction() as tx:
        seed = dict(
            tx.conn.execute(
                sa.select(notes).where(
                    notes.c.tenant_id == creds.tenant_id, notes.c.run_id == "seed"
                )
            )
            .one()
            ._mapping
        )
        version = tx.conn.execute(
            sa.select(t.runs.c.version).where(
                t.runs.c.tenant_id == creds.tenant_id, t.runs.c.run_id == run_id
            )
        ).scalar_one()
        planted = {
            **seed,
            "id": f"ntf_0planted{run_id}",
            "run_id": run_id,
            "transition_version": version + 1,
        }
        tx.conn.execute(notes.insert().values(**planted))


def _notifications_by_run(core: Core, creds: TenantCreds) -> dict[str, list[str]]:
    notes = t.notifications
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(notes.c.id, notes.c.run_id).where(
                notes.c.tenant_id == creds.tenant_id, notes.c.run_id != "seed"
            )
        ).all()
    by_run: dict[str, list[str]] = {}
    for row in rows:
        by_run.setdefault(row.run_id, []).append(row.id)
    return by_run


def _deliveries_of(core: Core, notification_id: str) -> int:
    with core.db.read() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(t.deliveries)
                .where(t.deliveries.c.notification_id == notification_id)
            ).scalar_one()
        )


class NotificationInserts:
    """The ``INSERT INTO notifications`` statements sent, while in use."""

    def __init__(self, core: Core) -> None:
        self.engine = core.db.engine
        self.sent: list[str] = []

    def _record(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().startswith("INSERT INTO notifications"):
            self.sent.append(statement)

    def __enter__(self) -> NotificationInserts:
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *_: Any) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._record)

    def check_the_optimistic_try_was_refused_then_asked(self) -> None:
        optimistic = [s for s in self.sent if "ON CONFLICT" not in s]
        if self.engine.dialect.name == "postgresql":
            assert optimistic and len(self.sent) > len(optimistic), self.sent
        else:
            assert not optimistic, self.sent  # SQLite has no round trips to save: it asks


def test_a_notification_that_exists_already_is_not_made_twice_by_an_optimistic_batch(
    core: Core, creds: TenantCreds
) -> None:
    """Invariant 1 when the writer's first try is optimistic (``Tx.optimistic``: on
    PostgreSQL a transition's notification is sent without waiting to hear whether it was
    a duplicate). A notification for r1's next version is planted first, as if something
    had already raised it: in a batch of four ``completed`` signals, r1's is refused by
    the unique constraint, the try is undone whole, and the careful retry finds the
    planted one and adds nothing to it — one notification for (r1, that version,
    completed), no outbox rows of its own — while r0, r2 and r3 each get theirs."""
    create_runs(core, creds, ["seed", "r0", "r1", "r2", "r3"])
    assert accept_in_thread(core, creds, "seed", "e-seed").result(timeout=WAIT).outcome == "applied"
    _plant_next_notification(core, creds, "r1")
    with NotificationInserts(core) as inserts:
        held = HeldWriter(core)
        answers = {r: accept_in_thread(core, creds, r, f"e-{r}") for r in ("r0", "r1", "r2", "r3")}
        held.release_when_queued(4)
        outcomes = {r: a.result(timeout=WAIT).outcome for r, a in answers.items()}
    assert outcomes == dict.fromkeys(outcomes, "applied")
    by_run = _notifications_by_run(core, creds)
    assert sorted(by_run) == ["r0", "r1", "r2", "r3"]
    assert all(len(ids) == 1 for ids in by_run.values()), by_run
    assert by_run["r1"] == ["ntf_0plantedr1"]
    assert _deliveries_of(core, "ntf_0plantedr1") == 0
    assert all(_deliveries_of(core, by_run[r][0]) > 0 for r in ("r0", "r2", "r3"))
    inserts.check_the_optimistic_try_was_refused_then_asked()


def test_a_lone_signal_whose_notification_exists_is_applied_without_a_second_one(
    core: Core, creds: TenantCreds
) -> None:
    """The same with a batch of one: the refused optimistic try is run again carefully,
    not answered with the duplicate's error."""
    create_runs(core, creds, ["seed", "r1"])
    assert accept_in_thread(core, creds, "seed", "e-seed").result(timeout=WAIT).outcome == "applied"
    _plant_next_notification(core, creds, "r1")
    with NotificationInserts(core) as inserts:
        assert accept_in_thread(core, creds, "r1", "e-r1").result(timeout=WAIT).outcome == "applied"
    assert _notifications_by_run(core, creds) == {"r1": ["ntf_0plantedr1"]}
    assert _deliveries_of(core, "ntf_0plantedr1") == 0
    inserts.check_the_optimistic_try_was_refused_then_asked()
