"""Group commit: one writer thread per process commits concurrent units of work together.

A signal's transaction is a dozen small statements and one commit. Committed one at a
time, SQLite's single writer lock and PostgreSQL's flush per commit are the limit (the
issue measured ~100 signals/s); committed together, 64 signals cost one lock, one flush,
one feed-counter update per tenant and one fan-out query per event type.

:meth:`GroupCommitter.run` hands a *unit* (a function of a :class:`~runbell.store.db.Tx`)
to the writer thread and waits for its answer. The writer takes every unit that is
queued (up to ``max_batch``), orders them by their lock key (so two processes' batches
lock runs in the same order and cannot deadlock each other), and runs them in one
transaction, each inside its own SAVEPOINT:

- a unit that raises is rolled back to its savepoint — its rows, feed events, after-commit
  callbacks and wake-ups are dropped — and its caller gets its own exception; the others
  go on (a deadlock or serialization failure is retried in the next batch, at most
  ``RETRIES`` times);
- the batch commits once; only then is each caller answered. Nobody hears ``applied``
  before the commit is durable, and a crash before the commit loses the whole batch and
  answers nobody (their clients retry; dedupe makes the retry safe);
- when the commit itself fails, nothing of the batch happened: during an outage every
  caller gets that error; otherwise each unit is tried again alone, so only the one whose
  rows made the commit fail hears about it.

Before the units run, the batch reads what they would each read first, one statement per
kind (:meth:`GroupCommitter._read_ahead`): every run named by a job's ``key`` ``(tenant,
run)``, locked in key order (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's BEGIN
IMMEDIATE already holds the lock), those runs' open notifications, and the dedupe rows of
the jobs' ``inbound`` events. Each is served once, to the first unit that asks, and
dropped as soon as anything writes it; a unit rolled back to its savepoint has used or
dropped them, so the next reads the database again. The rows nothing reads back (history,
dedupe, outbox rows, digest items) are deferred to one ``executemany`` each at commit.

On PostgreSQL the reads ahead and the units run in one pipeline (``store.fast.pipeline``):
statements go without waiting, the first read of an answer waits for everything sent
before it, so the BEGIN and the reads ahead are one round trip and a statement nobody
reads (the run's UPDATE) rides with the next read. An error may surface in a later unit
than its cause; the fallback below (rolled back whole, then unit by unit with savepoints
and no pipeline) answers it to the right unit.

Invariants kept here (DESIGN §2): 12 (a unit's rows, events and outbox rows commit
together or not at all — the savepoint is the unit's boundary, the batch's commit is its
durability), and the feed's order equals commit order (the counter is bumped once per
batch, in the same commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
import structlog

from runbell.store import fast, notifications, runs
from runbell.store.availability import unavailable_reason
from runbell.store.db import Database, Tx

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: PostgreSQL SQLSTATEs worth a second try in the next batch: deadlock, serialization.
_TRANSIENT = frozenset({"40P01", "40001"})
RETRIES = 3


@dataclass
class _Job(Generic[T]):
    unit: Callable[[Tx], T]
    key: tuple[str, ...]
    inbound: tuple[str, str, str] | None = None  # (tenant, source, event id) it dedupes on
    future: Future[T] | None = None  # a thread waits on it (GroupCommitter.submit) …
    waiter: asyncio.Future[T] | None = None  # … or an event loop (run_async)
    tries: int = 0
    answered: bool = False


def _refused(exc: BaseException) -> bool:
    """The server refused a row (a constraint): an optimistic try's duplicate among them."""
    return isinstance(exc, sa.exc.IntegrityError)


def _transient(exc: BaseException) -> bool:
    if not isinstance(exc, sa.exc.DBAPIError):
        return False
    return getattr(exc.orig, "sqlstate", None) in _TRANSIENT


class GroupCommitter:
    """The process's writer thread (see the module docstring)."""

    def __init__(self, db: Database, *, max_batch: int = 64) -> None:
        self.db = db
        self.max_batch = max(1, max_batch)
        self._queue: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.batches = 0  # committed batches, for tests and /metrics
        self.units = 0

    # --- callers ---------------------------------------------------------------------

    def submit(
        self,
        unit: Callable[[Tx], T],
        *,
        key: tuple[str, ...] = (),
        inbound: tuple[str, str, str] | None = None,
    ) -> Future[T]:
        """Queue ``unit``. ``key``: its lock key; a ``(tenant_id, run_id)`` key has the
        run locked and read with the batch's others. ``inbound``: the event it dedupes on,
        read with the batch's others."""
        future: Future[T] = Future()
        self._put(_Job(unit, key, inbound, future=future))
        return future

    def _put(self, job: _Job[Any]) -> None:
        self._ensure_thread()
        self._queue.put(job)

    def run(
        self,
        unit: Callable[[Tx], T],
        *,
        key: tuple[str, ...] = (),
        inbound: tuple[str, str, str] | None = None,
    ) -> T:
        """Run ``unit`` in the next batch; its answer once the batch has committed."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a unit of work may not wait for the writer it runs on")
        return self.submit(unit, key=key, inbound=inbound).result()

    async def run_async(
        self,
        unit: Callable[[Tx], T],
        *,
        key: tuple[str, ...] = (),
        inbound: tuple[str, str, str] | None = None,
    ) -> T:
        # The writer answers an event loop's callers of a batch with one wake-up of that
        # loop (``_answer``), not one ``call_soon_threadsafe`` per caller as a wrapped
        # thread future would. A caller cancelled while it waits (its client gone) leaves
        # its unit to run and commit with the batch; the answer is then dropped.
        waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._put(_Job(unit, key, inbound, waiter=waiter))
        return await waiter

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout=10)

    # --- the writer thread -----------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._stopped:
                raise RuntimeError("the database is closed")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="runbell-writer", daemon=True
                )
                self._thread.start()

    def _take(self) -> list[_Job[Any]] | None:
        first = self._queue.get()
        if first is None:
            return None
        # Give up the GIL once before draining the queue: the callers the last batch just
        # answered are runnable but waiting for it, and each, let run, submits its next
        # unit before it blocks. Without this the writer took what was queued at once and
        # P1 at 8 writers committed half of them per batch (4.0 units, then the other 4
        # woke); with it, 7.5, for one commit and one BEGIN per 7.5 signals instead of 4,
        # and 7-15 % less CPU per signal (bench/profile/p1-p2-write-path.md).
        time.sleep(0)
        jobs = [first]
        while len(jobs) < self.max_batch:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self._queue.put(None)  # stop after this batch
                break
            jobs.append(job)
        return jobs

    def _loop(self) -> None:
        retry: list[_Job[Any]] = []
        while True:
            if retry:
                jobs, retry = retry, []
                with contextlib.suppress(queue.Empty):
                    while len(jobs) < self.max_batch:
                        job = self._queue.get_nowait()
                        if job is None:
                            self._queue.put(None)
                            break
                        jobs.append(job)
            else:
                taken = self._take()
                if taken is None:
                    return
                jobs = taken
            jobs.sort(key=lambda j: j.key)
            try:
                retry = self._batch(jobs)
            except BaseException as exc:  # pragma: no cover - a bug in the writer itself
                log.exception("writer.crashed")
                _answer([(job, False, exc) for job in jobs if not job.answered])

    def _batch(self, jobs: list[_Job[Any]], *, careful: bool = False) -> list[_Job[Any]]:
        """Run ``jobs`` in one transaction and answer them after it commits; returns the
        jobs to run again (transient failures).

        First all together, without savepoints (two round trips fewer per unit), and
        optimistic (``Tx.optimistic``) unless ``careful``. If one of them fails, that
        transaction is rolled back whole — nothing of it happened — and the batch runs
        again with a savepoint per unit and nothing optimistic, so the failing one answers
        its own error and the others commit. A lone unit refused a row (a duplicate the
        optimistic try did not ask about) runs again that careful way too."""
        try:
            values = self._together(jobs, optimistic=not careful)
        except _UnitFailed as failed:
            if len(jobs) > 1 or (not careful and _refused(failed.exc)):
                return self._one_by_one(jobs)
            return self._settle([(jobs[0], False, failed.exc)])
        except Exception as exc:
            return self._failed_commit(jobs, exc, careful=careful)
        return self._settle([(job, True, value) for job, value in zip(jobs, values, strict=True)])

    def _together(self, jobs: list[_Job[Any]], *, optimistic: bool) -> list[Any]:
        values = []
        # PostgreSQL: the whole run of units in one pipeline (store.fast.pipeline), so a
        # statement whose answer nobody reads (the run's UPDATE) rides with the next one
        # that is read. A server error may then surface in a later unit than the one that
        # caused it: any failure here rolls everything back and the batch runs again unit
        # by unit (_one_by_one, no pipeline), where each answers for itself.
        with self.db.transaction() as tx, fast.pipeline(tx.conn):
            tx.optimistic = optimistic
            self._read_ahead(tx, jobs)
            for job in jobs:
                try:
                    values.append(job.unit(tx))
                except Exception as exc:
                    raise _UnitFailed(exc) from exc
        return values

    @staticmethod
    def _read_ahead(tx: Tx, jobs: list[_Job[Any]]) -> None:
        """One statement per kind for the whole batch (the module docstring): the runs
        locked in key order, their open notifications, the events' dedupe rows. On
        PostgreSQL the three are pipelined with the transaction's BEGIN: one round trip.
        The server runs them in order, so the notifications are read once the runs are
        locked (each statement sees what was committed before it started); a key with no
        run reads no notifications."""
        keys = [(job.key[0], job.key[1]) for job in jobs if len(job.key) == 2]
        inbound = [job.inbound for job in jobs if job.inbound is not None]
        with fast.pipeline(tx.conn):
            kept = [
                runs.send_lock_batch(tx, keys),
                notifications.send_open_batch(tx, keys),
                runs.send_inbound_batch(tx, inbound),
            ]
            for keep in kept:
                keep()

    def _one_by_one(self, jobs: list[_Job[Any]]) -> list[_Job[Any]]:
        answers: list[tuple[_Job[Any], bool, Any]] = []
        try:
            with self.db.transaction() as tx:
                self._read_ahead(tx, jobs)
                for job in jobs:
                    mark = tx.mark()
                    savepoint = tx.conn.begin_nested()
                    try:
                        value = job.unit(tx)
                        savepoint.commit()
                    except Exception as exc:
                        if savepoint.is_active:
                            savepoint.rollback()
                        tx.rewind(mark)
                        answers.append((job, False, exc))
                        continue
                    answers.append((job, True, value))
        except Exception as exc:
            return self._failed_commit(jobs, exc)
        return self._settle(answers)

    def _failed_commit(
        self, jobs: list[_Job[Any]], exc: Exception, *, careful: bool = False
    ) -> list[_Job[Any]]:
        """The batch's own commit failed (its feed flush, fan-out or COMMIT): nothing of
        it happened. An outage fails everyone — they would fail alone too; anything else
        may belong to one unit's rows, so each is tried again in a transaction of its own,
        carefully (nothing optimistic), and only the one at fault hears the error."""
        # An IntegrityError is the server refusing a row, never an outage, even when the
        # connection was invalidated to leave an aborted pipeline (store.fast._unusable).
        outage = unavailable_reason(exc) is not None and not _refused(exc)
        if outage or (len(jobs) == 1 and (careful or not _refused(exc))):
            _answer([(job, False, exc) for job in jobs])
            return []
        retry: list[_Job[Any]] = []
        for job in jobs:
            retry += self._batch([job], careful=True)
        return retry

    def _settle(self, answers: list[tuple[_Job[Any], bool, Any]]) -> list[_Job[Any]]:
        """Answer each caller (their commit is durable, or their unit failed); a transient
        failure (deadlock, serialization) goes round again instead, a few times."""
        retry = []
        answered = []
        for job, ok, value in answers:
            if not ok and _transient(value) and job.tries < RETRIES:
                job.tries += 1
                retry.append(job)
                continue
            self.units += ok
            answered.append((job, ok, value))
        self.batches += 1
        _answer(answered)
        return retry


def _answer(answers: list[tuple[_Job[Any], bool, Any]]) -> None:
    """Give each caller its value (``ok``) or its exception: a waiting thread through its
    future, an event loop's callers through one call on that loop for all of them. A
    caller that stopped waiting (cancelled) is skipped; so is a loop that has closed."""
    loops: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for job, ok, value in answers:
        job.answered = True
        if job.waiter is not None:
            loops.setdefault(job.waiter.get_loop(), []).append((job.waiter, ok, value))
        elif job.future is not None:
            with contextlib.suppress(InvalidStateError):  # its caller cancelled it
                if ok:
                    job.future.set_result(value)
                else:
                    job.future.set_exception(value)
    for loop, waiters in loops.items():
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(_wake, waiters)


def _wake(waiters: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """On the callers' event loop: settle each waiter still waiting."""
    for waiter, ok, value in waiters:
        if waiter.done():
            continue  # cancelled: its caller left
        if ok:
            waiter.set_result(value)
        else:
            waiter.set_exception(value)


class _UnitFailed(Exception):
    def __init__(self, exc: Exception) -> None:
        super().__init__(str(exc))
        self.exc = exc
