"""Who is watching the live UI right now (open SSE streams), shared by every process.

Presence is a policy fact: a completion for an owner who is looking goes live + inbox
instead of interrupting them with a push. With several ``runbell api`` processes the
viewer's stream and the signal may land on different processes, so presence lives in the
``presence`` table: one row per (tenant, user, holding process) with an expiry.

- The process holding streams counts them in memory (answering its own questions without a
  read) and a heartbeat thread upserts its rows every ``ttl_s / 3`` seconds, at once when a
  first stream for a user opens, and deletes them when the last one closes. A process that
  dies without saying so stops refreshing: its rows expire after ``ttl_s``.
- Any other process reads the table, at most once per (tenant, user) per ``cache_s``
  seconds: a viewer who just opened a page is seen elsewhere within about ``cache_s``, and
  a busy owner costs one indexed lookup per ``cache_s``, not one per signal.

Without a database (``Presence()``), presence is what this process holds, as before.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections import Counter
from datetime import timedelta

import structlog
from sqlalchemy.engine import Connection

from runbell.store import presence as rows
from runbell.store.db import Database

log = structlog.get_logger(__name__)

Key = tuple[str, str]  # (tenant id, user id)


def _holder() -> str:
    """This process, as operators can recognise it in the table (host:pid:random)."""
    return f"{socket.gethostname()[:36]}:{os.getpid()}:{secrets.token_hex(4)}"


class Presence:
    """Open live-UI streams per (tenant, user); shared through ``db`` when given."""

    def __init__(
        self, db: Database | None = None, *, ttl_s: float = 30.0, cache_s: float = 2.0
    ) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self.cache_s = cache_s
        self.holder = _holder()
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._count: Counter[Key] = Counter()
        self._dirty: set[Key] = set()  # changed here since the last write
        self._seen: dict[Key, tuple[bool, float]] = {}  # others' rows: (present, until)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    # --- this process's viewers ----------------------------------------------------------

    def enter(self, tenant_id: str, user_id: str) -> None:
        """A stream for ``user_id`` opened here. Never blocks on the database."""
        key = (tenant_id, user_id)
        with self._lock:
            self._count[key] += 1
            if self._count[key] == 1:
                self._dirty.add(key)
                self._ensure_thread()
                self._wake.set()

    def leave(self, tenant_id: str, user_id: str) -> None:
        key = (tenant_id, user_id)
        with self._lock:
            self._count[key] -= 1
            if self._count[key] <= 0:
                del self._count[key]
                self._dirty.add(key)
                self._wake.set()

    # --- the question policy asks ----------------------------------------------------------

    def is_present(self, tenant_id: str, user_id: str, conn: Connection | None = None) -> bool:
        """Whether ``user_id`` has a live stream open on any process. ``conn`` (the
        caller's transaction) saves taking a second pooled connection for the read."""
        key = (tenant_id, user_id)
        now = time.monotonic()
        with self._lock:
            if self._count.get(key, 0) > 0:
                return True
            cached = self._seen.get(key)
            if cached is not None and cached[1] > now:
                return cached[0]
        if self.db is None:
            return False
        if conn is not None:
            present = rows.seen(conn, tenant_id, user_id, self.db.clock())
        else:
            with self.db.read() as own:
                present = rows.seen(own, tenant_id, user_id, self.db.clock())
        with self._lock:
            if len(self._seen) > 10_000:  # many owners: forget the stale answers
                self._seen = {k: v for k, v in self._seen.items() if v[1] > now}
            self._seen[key] = (present, now + self.cache_s)
        return present

    # --- the heartbeat ---------------------------------------------------------------------

    def flush(self, *, heartbeat: bool = False) -> None:
        """Write what changed here (and, on a ``heartbeat``, refresh every row this process
        holds and delete everyone's expired rows). On failure the changes are kept for the
        next try."""
        assert self.db is not None
        with self._writing:  # one write at a time: when flush() returns, all is written
            self._flush(heartbeat)

    def _flush(self, heartbeat: bool) -> None:
        assert self.db is not None
        with self._lock:
            changed = set(self._dirty)
            self._dirty.clear()
            keys = changed | (set(self._count) if heartbeat else set())
            held = {k for k in keys if self._count.get(k, 0) > 0}
        gone = keys - held
        try:
            with self.db.transaction() as tx:
                expires = tx.now + timedelta(seconds=self.ttl_s)
                rows.hold(tx.conn, held, self.holder, expires)
                rows.drop(tx.conn, gone, self.holder)
        except Exception:
            with self._lock:
                self._dirty |= changed
            raise
        if heartbeat:
            # Apart from the upsert: a transaction holding its own rows while it waits on
            # another process's could deadlock with that process doing the same.
            with self.db.transaction() as tx:
                rows.expire(tx.conn, tx.now)

    def _ensure_thread(self) -> None:
        if self.db is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="runbell-presence", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = self.ttl_s / 3
        next_beat = time.monotonic() + interval
        while not self._stop.is_set():
            self._wake.wait(max(0.0, next_beat - time.monotonic()))
            self._wake.clear()
            beat = time.monotonic() >= next_beat
            if beat:
                next_beat = time.monotonic() + interval
            try:
                self.flush(heartbeat=beat)
                self._failing = False
            except Exception as exc:
                assert self.db is not None
                if self.db.availability.observe(exc) is None and not self._failing:
                    log.exception("presence.write_failed")
                self._failing = True
                self._stop.wait(1.0)  # then retry what is still pending
                self._wake.set()

    def close(self) -> None:
        """Stop the heartbeat and delete this process's rows (best effort: a row left
        behind expires on its own)."""
        self._stop.set()
        self._wake.set()
        if self._thread is None:
            return
        self._thread.join(timeout=5)
        with self._lock:
            self._dirty |= set(self._count)
            self._count.clear()
            self._thread, self._stop = None, threading.Event()  # a later enter() restarts
        try:
            self.flush()
        except Exception as exc:
            assert self.db is not None
            self.db.availability.observe(exc)
