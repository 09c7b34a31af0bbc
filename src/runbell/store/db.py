"""Engine set-up and the unit of work: one transaction, its feed events, its wake-ups.

The boundary (one accepted signal, one acknowledgement, one claimed delivery) opens a
:class:`Tx` with :meth:`Database.transaction`; repositories take ``tx.conn`` and never
commit. Feed events are buffered on the Tx and written just before commit, so the
per-tenant counter row is locked for the shortest time and feed order equals commit order.
After a successful commit, the process-local :class:`runbell.store.wakeup.Hub` is told, and
(on PostgreSQL) a NOTIFY is sent outside the transaction.

An outage (PostgreSQL restarting, the network gone, SQLite locked beyond its busy timeout)
is a state of the database, not a bug of the request: :func:`unavailable_reason` tells such
errors apart, and :class:`Availability` logs one warning when one starts and one when it
ends, instead of a traceback per failed request, delivery claim or sweep. The HTTP layer
answers them 503 with ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import structlog
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from runbell.store import fast
from runbell.store import tables as t
from runbell.store.fast import Statement
from runbell.store.hub import Hub

if TYPE_CHECKING:
    from runbell.store.writer import GroupCommitter

log = structlog.get_logger(__name__)

# SQLSTATEs that mean "the server is not there for you right now" (PostgreSQL appendix A):
# class 08 connection exceptions, plus shutdown / start-up / too many connections.
_UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")

#: Seconds a client should wait before retrying, per reason (the ``Retry-After`` header).
RETRY_AFTER_S = {"busy": 1, "pool_timeout": 2, "unreachable": 5}


def unavailable_reason(exc: BaseException) -> str | None:
    """Why ``exc`` means the database cannot serve right now, or None if it does not.

    ``"unreachable"``: a connection could not be made or was lost (PostgreSQL restarting
    or shutting down, refused, reset, too many connections; SQLAlchemy invalidated it);
    ``"busy"``: SQLite's write lock was still held when ``busy_timeout`` ran out;
    ``"pool_timeout"``: no pooled connection became free in time. Anything else (a
    constraint, a syntax error, a missing table, a serialization failure) is not an
    outage and stays the bug or conflict it is.
    """
    if isinstance(exc, sa.exc.TimeoutError):  # QueuePool limit reached, wait timed out
        return "pool_timeout"
    if not isinstance(exc, sa.exc.DBAPIError):
        return None
    if exc.connection_invalidated:
        return "unreachable"
    if not isinstance(exc, sa.exc.OperationalError):
        return None
    orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError):
        message = str(orig).lower()
        return "busy" if any(m in message for m in _SQLITE_BUSY) else None
    sqlstate = getattr(orig, "sqlstate", None)
    # No SQLSTATE: the client library failed to connect or lost the socket (psycopg).
    if sqlstate is None or sqlstate.startswith("08") or sqlstate in _UNAVAILABLE_SQLSTATES:
        return "unreachable"
    return None


def _first_line(exc: BaseException) -> str:
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    text = str(orig).strip().splitlines()
    return text[0][:200] if text else type(orig).__name__


class Availability:
    """Whether the database is answering, as this process sees it; logs the transitions.

    ``observe(exc)`` after a failure (a no-op unless ``unavailable_reason`` says it is an
    outage), ``succeeded(started, write=...)`` after an operation that began at
    ``started`` (``time.monotonic()``) went through. One ``database.unavailable`` warning
    marks the start of an outage; one ``database.recovered`` warning its end, written only
    for an operation that *started* after the last failure (so work in flight when the
    database went away, and finishing just before it did, does not end the outage early),
    and, when SQLite was busy, only for a write (its readers never wait for the lock).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._reason: str | None = None
        self._last_failure = 0.0
        self._failures = 0

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def observe(self, exc: BaseException) -> str | None:
        """Record ``exc`` if it is an outage; returns its reason (or None)."""
        reason = unavailable_reason(exc)
        if reason is None or getattr(exc, "_runbell_observed", False):
            return reason  # not an outage, or already counted (it passed two layers)
        with contextlib.suppress(AttributeError):
            exc._runbell_observed = True  # type: ignore[attr-defined]
        now = time.monotonic()
        with self._lock:
            self._last_failure = now
            self._failures += 1
            if self._down_since is not None:
                return reason
            self._down_since, self._reason = now, reason
        orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
        log.warning(
            "database.unavailable",
            reason=reason,
            error=type(orig).__name__,
            detail=_first_line(exc),
            hint="answering 503 with Retry-After until it is back; "
            "workers and sweeps retry on their own",
        )
        return reason

    def succeeded(self, started: float, *, write: bool = True) -> None:
        if self._down_since is None:  # the hot path: no lock
            return
        with self._lock:
            if self._down_since is None or started <= self._last_failure:
                return
            if self._reason == "busy" and not write:
                return
            down_for = time.monotonic() - self._down_since
            failures = self._failures
            self._down_since, self._failures = None, 0
        log.warning("database.recovered", down_for_s=round(down_for, 1), failed_operations=failures)


def private_sqlite_files(url: str) -> None:
    """Create the SQLite database file 0600 before SQLite opens it (SQLite's own default is
    0644): it holds run and request details in clear. SQLite gives the -wal and -shm files
    the database file's mode. Files an older version created world-readable are tightened."""
    path = sa.make_url(url).database
    if not path or path == ":memory:" or path.startswith("file:"):
        return
    with contextlib.suppress(FileExistsError):  # an empty file is an empty database
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    for name in (path, f"{path}-wal", f"{path}-shm", f"{path}-journal"):
        # Missing, or someone else's file we may not change: SQLite decides what follows.
        with contextlib.suppress(FileNotFoundError, PermissionError):
            if os.stat(name).st_mode & 0o077:
                os.chmod(name, 0o600)


def make_engine(url: str, *, sqlite_busy_timeout_s: float = 30.0) -> Engine:
    if url.startswith("sqlite"):
        private_sqlite_files(url)
        busy_ms = int(sqlite_busy_timeout_s * 1000)
        engine = sa.create_engine(
            url,
            hide_parameters=True,  # errors never echo bound values (tokens, details)
            connect_args={"check_same_thread": False, "timeout": sqlite_busy_timeout_s},
            pool_size=16,
            max_overflow=16,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
            # Let us issue BEGIN ourselves (pysqlite's own BEGIN is deferred and lazy).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Connection) -> None:
            if conn.get_execution_options().get("runbell_readonly"):
                conn.exec_driver_sql("BEGIN")
                return
            # IMMEDIATE takes the write lock up front: concurrent writers queue on
            # busy_timeout instead of failing with a lock upgrade deadlock mid-transaction.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return sa.create_engine(
        url, pool_size=16, max_overflow=16, pool_pre_ping=True, hide_parameters=True
    )


@dataclass
class PendingEvent:
    type: str
    data: dict[str, Any]
    run_id: str | None = None
    notification_id: str | None = None
    user_id: str | None = None


@dataclass
class Tx:
    conn: Connection
    now: datetime
    events: dict[str, list[PendingEvent]] = field(default_factory=dict)
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    dialect: str = "sqlite"
    wake_outbox: bool = False  # set when deliveries became due: wake the workers
    # Facts read once per transaction (a tenant's policy, a member's role and consent, the
    # endpoints subscribed to an event type): with group commit one transaction serves a
    # batch of signals, so each is read once per batch. Only facts no unit of work in the
    # transaction changes belong here.
    cache: dict[Any, Any] = field(default_factory=dict)
    # Notifications written in this transaction, by id, as written (answers need no re-read).
    written: dict[str, dict[str, Any]] = field(default_factory=dict)

    def emit(self, tenant_id: str, ev: PendingEvent) -> None:
        self.events.setdefault(tenant_id, []).append(ev)

    def mark(self) -> tuple[dict[str, int], int, bool]:
        """Where this unit of work starts (see :meth:`rewind`)."""
        return (
            {k: len(v) for k, v in self.events.items()},
            len(self.after_commit),
            self.wake_outbox,
        )

    def rewind(self, mark: tuple[dict[str, int], int, bool]) -> None:
        """Forget the feed events, after-commit callbacks and wake-up a unit of work added
        since ``mark``: its savepoint was rolled back, so none of it happened."""
        lengths, callbacks, wake = mark
        for tenant_id in list(self.events):
            del self.events[tenant_id][lengths.get(tenant_id, 0) :]
        del self.after_commit[callbacks:]
        self.wake_outbox = wake

    def flush_events(self) -> dict[str, int]:
        """Write buffered feed events; returns the head sequence per tenant.

        Tenants in id order, so two batches that both touch two tenants lock their
        counter rows in the same order."""
        heads: dict[str, int] = {}
        for tenant_id in sorted(self.events):
            evs = self.events[tenant_id]
            if not evs:
                continue
            row = _BUMP_FEED.first(self.conn, tenant_id=tenant_id, n=len(evs))
            assert row is not None, f"no tenant {tenant_id!r}"
            head = int(row["feed_seq"])
            first = head - len(evs) + 1
            _INSERT_FEED.many(
                self.conn,
                [
                    {
                        "tenant_id": tenant_id,
                        "seq": first + i,
                        "type": ev.type,
                        "run_id": ev.run_id,
                        "notification_id": ev.notification_id,
                        "user_id": ev.user_id,
                        "data": ev.data,
                        "created_at": self.now,
                    }
                    for i, ev in enumerate(evs)
                ],
            )
            heads[tenant_id] = head
        self.events.clear()
        return heads


_BUMP_FEED = Statement(
    lambda: (
        sa.update(t.tenants)
        .where(t.tenants.c.id == sa.bindparam("tenant_id"))
        .values(feed_seq=t.tenants.c.feed_seq + sa.bindparam("n", type_=sa.BigInteger))
        .returning(t.tenants.c.feed_seq)
    )
)
_INSERT_FEED = fast.insert(t.feed_events)

OUTBOX_KEY = "*outbox"  # a hub channel no tenant id can collide with


class Database:
    """The engine, the clock and the wake-up hub, shared by API, worker and scheduler."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime],
        hub: Hub | None = None,
        sqlite_busy_timeout_s: float = 30.0,
        writer_max_batch: int = 64,
    ):
        self.url = url
        self.engine = make_engine(url, sqlite_busy_timeout_s=sqlite_busy_timeout_s)
        self.availability = Availability()
        self.dialect = self.engine.dialect.name
        self.clock = clock
        self.hub = hub or Hub()
        # Run inside the transaction just before feed events are written, e.g. to turn
        # events into tenant-webhook deliveries in the same commit.
        self.before_flush: list[Callable[[Tx], None]] = []
        self._outbox_ticks = itertools.count(1)
        self.writer_max_batch = writer_max_batch
        self._writer: GroupCommitter | None = None
        self._writer_lock = threading.Lock()

    @property
    def writer(self) -> GroupCommitter:
        """The process's group committer (:mod:`runbell.store.writer`), started on first use."""
        if self._writer is None:
            from runbell.store.writer import GroupCommitter

            with self._writer_lock:
                if self._writer is None:
                    self._writer = GroupCommitter(self, max_batch=self.writer_max_batch)
        return self._writer

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @contextmanager
    def transaction(self, *, now: datetime | None = None) -> Iterator[Tx]:
        """One atomic unit. Everything inside commits together or not at all."""
        started = time.monotonic()
        try:
            with self.engine.connect() as conn:
                tx = Tx(conn=conn, now=now or self.clock(), dialect=self.dialect)
                with conn.begin():
                    yield tx
                    for before in self.before_flush:
                        before(tx)
                    heads = tx.flush_events()
        except Exception as exc:
            self.availability.observe(exc)
            raise
        self.availability.succeeded(started)
        for tenant_id, head in heads.items():
            self.hub.publish(tenant_id, head)
        if tx.wake_outbox:
            self.hub.publish(OUTBOX_KEY, next(self._outbox_ticks))
        for fn in tx.after_commit:
            fn()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only connection: on SQLite a deferred BEGIN, so reads never queue."""
        started = time.monotonic()
        try:
            with self.engine.connect() as conn:
                conn.execution_options(runbell_readonly=True)
                yield conn
        except Exception as exc:
            self.availability.observe(exc)
            raise
        self.availability.succeeded(started, write=False)

    def dispose(self) -> None:
        if self._writer is not None:
            self._writer.stop()
        self.engine.dispose()
