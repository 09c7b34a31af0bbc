"""Engine set-up and the unit of work: one transaction, its feed events, its wake-ups.

The boundary (one accepted signal, one acknowledgement, one claimed delivery) opens a
:class:`Tx` with :meth:`Database.transaction`; repositories take ``tx.conn`` and never
commit. Feed events are buffered on the Tx and written just before commit, so the
per-tenant counter row is locked for the shortest time and feed order equals commit order.
After a successful commit, :attr:`Database.after_commit` is told which feeds moved (the
process's :class:`runbell.runtime.hub.Hub` registers there: it wakes local waiters and, on
PostgreSQL, sends a NOTIFY outside the transaction). The store knows nothing of who waits.

An outage (PostgreSQL restarting, the network gone, SQLite locked beyond its busy timeout)
is a state of the database, not a bug of the request: :func:`unavailable_reason` tells such
errors apart, and :class:`Availability` logs one warning when one starts and one when it
ends, instead of a traceback per failed request, delivery claim or sweep. The HTTP layer
answers them 503 with ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy import event
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine

from runbell.domain.records import Notification
from runbell.store import fast
from runbell.store import tables as t
from runbell.store.availability import RETRY_AFTER_S, Availability, unavailable_reason
from runbell.store.fast import Statement

log = structlog.get_logger(__name__)

__all__ = [
    "RETRY_AFTER_S",
    "Availability",
    "Database",
    "PendingEvent",
    "Tx",
    "make_engine",
    "unavailable_reason",
]


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
    data: Mapping[str, Any]  # a JSON object (often a flow's TypedDict view)
    run_id: str | None = None
    notification_id: str | None = None
    user_id: str | None = None


@dataclass(frozen=True)
class Mark:
    events: dict[str, int]
    callbacks: int
    wake: bool
    # Per statement: rows written early (:meth:`Tx.flush`) and all rows so far, at the mark.
    deferred: dict[Statement, tuple[int, int]]
    written: int


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
    written: dict[str, Notification] = field(default_factory=dict)
    # Rows nothing reads back inside the transaction (history, dedupe records), written
    # with one multi-row statement each just before the feed: see :meth:`defer`.
    deferred: dict[Statement, list[dict[str, Any]]] = field(default_factory=dict)
    # Rows of ``deferred`` already written early (:meth:`flush`), per statement, in order.
    early: dict[Statement, list[dict[str, Any]]] = field(default_factory=dict)
    # Rows the writer read for its whole batch before the units ran (one statement each,
    # ``runtime.writer``), served once each: a run's locked row, its open notifications,
    # an inbound event's dedupe row (None: not stored). A write to one of them drops it
    # (``store.runs``, ``store.notifications``), so nothing served here is ever stale.
    locked: dict[tuple[str, str], Any] = field(default_factory=dict)
    open_notes: dict[tuple[str, str], list[Notification]] = field(default_factory=dict)
    inbound: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    # The writer's first try of a batch (``runtime.writer``): a row that could only be
    # refused as a duplicate may be sent without waiting to hear whether it was
    # (``store.notifications.insert_once``). A duplicate then fails the whole try, nothing
    # of it happens, and the writer runs those units again with this False, reading.
    optimistic: bool = False

    @staticmethod
    def of(conn: Connection) -> Tx | None:
        """The unit of work ``conn`` is running (None outside :meth:`Database.transaction`):
        how a repository that takes a connection finds the batch's reads and deferred rows."""
        found: Tx | None = conn.info.get(_TX_KEY)
        return found

    def emit(self, tenant_id: str, ev: PendingEvent) -> None:
        self.events.setdefault(tenant_id, []).append(ev)

    def defer(self, stmt: Statement, row: dict[str, Any]) -> None:
        """Write ``row`` with ``stmt`` when the transaction ends, together with every other
        row deferred to it (one ``executemany``). For rows no statement of this transaction
        reads back; a constraint they break fails the commit, so nothing is lost either."""
        self.deferred.setdefault(stmt, []).append(row)

    def pending(self, stmt: Statement) -> list[dict[str, Any]]:
        """The rows deferred to ``stmt`` so far."""
        return self.deferred.get(stmt, [])

    def flush(self, stmt: Statement) -> None:
        """Write the rows deferred to ``stmt`` now: a statement of this transaction is
        about to read or change that table (e.g. cancel a notification's deliveries)."""
        rows = self.deferred.get(stmt)
        if rows:
            stmt.many(self.conn, rows)
            self.early.setdefault(stmt, []).extend(rows)
            rows.clear()

    def flush_deferred(self) -> None:
        for stmt, rows in self.deferred.items():
            stmt.many(self.conn, rows)
        self.deferred.clear()
        self.early.clear()

    def mark(self) -> Mark:
        """Where this unit of work starts (see :meth:`rewind`)."""
        return Mark(
            {k: len(v) for k, v in self.events.items()},
            len(self.after_commit),
            self.wake_outbox,
            {
                k: (len(self.early.get(k, ())), len(self.early.get(k, ())) + len(v))
                for k, v in self.deferred.items()
            },
            len(self.written),
        )

    def rewind(self, mark: Mark) -> None:
        """Forget the feed events, after-commit callbacks, wake-up, deferred rows and
        written notifications a unit of work added since ``mark``: its savepoint was rolled
        back, so none of it happened."""
        for tenant_id in list(self.events):
            del self.events[tenant_id][mark.events.get(tenant_id, 0) :]
        del self.after_commit[mark.callbacks :]
        self.wake_outbox = mark.wake
        for stmt in list(self.deferred):
            # Rows in order: those written before the mark stay written; those pending at
            # the mark (earlier units') are pending again even if written since — the
            # savepoint's rollback took them; those added since are the unit's: gone.
            before, at = mark.deferred.get(stmt, (0, 0))
            early = self.early.get(stmt, [])
            rows = early + self.deferred[stmt]
            self.early[stmt] = early[:before]
            self.deferred[stmt] = rows[before:at]
        for note_id in list(self.written)[mark.written :]:
            del self.written[note_id]

    def flush_events(self) -> dict[str, int]:
        """Write buffered feed events; returns the head sequence per tenant.

        Tenants in id order, so two batches that both touch two tenants lock their
        counter rows in the same order."""
        heads: dict[str, int] = {}
        for tenant_id in sorted(self.events):
            evs = self.events[tenant_id]
            if not evs:
                continue
            if self.dialect == "postgresql":
                heads[tenant_id] = _feed_in_one(self.conn, tenant_id, evs, self.now)
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


_TX_KEY = "runbell.tx"

_BUMP_FEED = Statement(
    lambda: (
        sa.update(t.tenants)
        .where(t.tenants.c.id == sa.bindparam("tenant_id"))
        .values(feed_seq=t.tenants.c.feed_seq + sa.bindparam("n", type_=sa.BigInteger))
        .returning(t.tenants.c.feed_seq)
    )
)
_INSERT_FEED = fast.insert(t.feed_events)

# PostgreSQL: the counter's bump and the tenant's events in one statement (one round trip
# fewer per batch): the events go as arrays, numbered from the bumped counter by their
# position, so feed order is still commit order (the counter row stays locked to COMMIT).
_FEED_IN_ONE = Statement(
    lambda: (
        sa.text(
            "WITH bump AS (UPDATE tenants SET feed_seq = feed_seq + :n WHERE id = :tenant_id"
            " RETURNING feed_seq),"
            " ins AS (INSERT INTO feed_events"
            " (tenant_id, seq, type, run_id, notification_id, user_id, data, created_at)"
            " SELECT :tenant_id, bump.feed_seq - :n + e.ord, e.type, e.run_id,"
            " e.notification_id, e.user_id, CAST(e.data AS JSONB), :created_at"
            " FROM bump, unnest(:types, :run_ids, :notification_ids, :user_ids, :datas)"
            " WITH ORDINALITY AS e(type, run_id, notification_id, user_id, data, ord))"
            " SELECT feed_seq FROM bump"
        )
        .bindparams(
            sa.bindparam("n", type_=sa.BigInteger),
            sa.bindparam("tenant_id", type_=sa.String),
            sa.bindparam("created_at", type_=t.feed_events.c.created_at.type),
            *(
                sa.bindparam(name, type_=postgresql.ARRAY(sa.Text))
                for name in ("types", "run_ids", "notification_ids", "user_ids", "datas")
            ),
        )
        .columns(sa.column("feed_seq", sa.BigInteger))
    )
)


def _feed_in_one(conn: Connection, tenant_id: str, evs: list[PendingEvent], now: datetime) -> int:
    """:data:`_FEED_IN_ONE` for one tenant's events; the tenant's new feed head."""
    row = _FEED_IN_ONE.first(
        conn,
        tenant_id=tenant_id,
        n=len(evs),
        created_at=now,
        types=[ev.type for ev in evs],
        run_ids=[ev.run_id for ev in evs],
        notification_ids=[ev.notification_id for ev in evs],
        user_ids=[ev.user_id for ev in evs],
        datas=[_json(ev.data) for ev in evs],
    )
    assert row is not None, f"no tenant {tenant_id!r}"
    return int(row["feed_seq"])


def _json(data: Mapping[str, Any]) -> str:
    return json.dumps(data)  # what the JSON type's bind processor sends (no serializer set)


#: How long :meth:`Database.dispose` waits for connections still checked out.
DISPOSE_WAIT_S = 2.0


class Database:
    """The engine and the clock, shared by API, worker and scheduler."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime],
        sqlite_busy_timeout_s: float = 30.0,
        writer_max_batch: int = 64,
    ):
        self.url = url
        self.engine = make_engine(url, sqlite_busy_timeout_s=sqlite_busy_timeout_s)
        self.availability = Availability()
        self.dialect = self.engine.dialect.name
        self.clock = clock
        # Run inside the transaction just before feed events are written, e.g. to turn
        # events into tenant-webhook deliveries in the same commit.
        self.before_flush: list[Callable[[Tx], None]] = []
        # Told after each commit: the feed heads it moved per tenant, and whether it made
        # deliveries due (the wake-up hub of runbell.runtime registers here).
        self.after_commit: list[Callable[[dict[str, int], bool], None]] = []
        # Run by dispose(), before the engine goes (e.g. stopping the group committer).
        self.on_dispose: list[Callable[[], None]] = []
        self.writer_max_batch = writer_max_batch

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
                # Taken once: after an outage invalidated the connection, ``conn.info``
                # would try to reconnect in the ``finally``.
                info = conn.info
                info[_TX_KEY] = tx
                try:
                    with conn.begin():
                        yield tx
                        # On PostgreSQL the writes at commit are pipelined (fast.pipeline):
                        # one round trip up to the hooks' first read (the webhook
                        # endpoints), one for the rest.
                        with fast.pipeline(conn):
                            tx.flush_deferred()
                            for before in self.before_flush:
                                before(tx)
                            tx.flush_deferred()  # what those deferred in turn (outbox rows)
                            heads = tx.flush_events()
                finally:
                    info.pop(_TX_KEY, None)
        except Exception as exc:
            self.availability.observe(exc)
            raise
        self.availability.succeeded(started)
        for told in self.after_commit:
            told(heads, tx.wake_outbox)
        for fn in tx.after_commit:
            fn()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only connection: on SQLite a deferred BEGIN, so reads never queue."""
        started = time.monotonic()
        try:
            with self.engine.connect() as conn:
                if conn.dialect.name == "postgresql":
                    # One snapshot for the whole read, as SQLite's deferred BEGIN gives: a
                    # view made of several statements (a run with its pending request)
                    # never mixes two commits. Read-only, so it never fails to serialize.
                    conn.execution_options(isolation_level="REPEATABLE READ")
                conn.execution_options(runbell_readonly=True)
                yield conn
        except Exception as exc:
            self.availability.observe(exc)
            raise
        self.availability.succeeded(started, write=False)

    def dispose(self) -> None:
        for fn in self.on_dispose:
            fn()
        # A connection a background thread still holds (a stream's feed read in flight, a
        # presence heartbeat) would go back to a pool that no longer belongs to the engine
        # and never be closed (psycopg then warns when it is collected): give such a
        # connection a moment to come back, then close everything pooled.
        checked_out = getattr(self.engine.pool, "checkedout", None)
        deadline = time.monotonic() + DISPOSE_WAIT_S
        while checked_out is not None and checked_out() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.engine.dispose()
