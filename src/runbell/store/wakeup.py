"""Wake-ups for long-polls and SSE streams when feed events commit.

:class:`Hub` is in-process and thread-safe: the committing thread calls
:meth:`Hub.publish`, waiting coroutines (on any event loop) wake at once.
:class:`PgBridge` carries the same wake-ups between processes over PostgreSQL
LISTEN/NOTIFY on one dedicated connection per process; NOTIFY is sent after commit, off
the hot transaction. Waiters still re-check on a slow timer, so a lost wake-up costs
latency, never an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import defaultdict
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from runbell.store.db import Database

log = structlog.get_logger(__name__)

CHANNEL = "runbell_feed"


class Hub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heads: dict[str, int] = {}
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = (
            defaultdict(set)
        )
        self.remote_publish: queue.SimpleQueue[tuple[str, int]] | None = None

    def head(self, tenant_id: str) -> int | None:
        return self._heads.get(tenant_id)

    def publish(self, tenant_id: str, seq: int, *, local: bool = True) -> None:
        with self._lock:
            if seq > self._heads.get(tenant_id, -1):
                self._heads[tenant_id] = seq
            waiters = list(self._waiters.get(tenant_id, ()))
        for loop, ev in waiters:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(ev.set)
        if local and self.remote_publish is not None:
            self.remote_publish.put((tenant_id, seq))

    def listen(self, tenant_id: str) -> Listener:
        """Register interest *before* reading, so a commit between the read and the wait
        still wakes us (no lost wake-up window)."""
        return Listener(self, tenant_id)

    def _add(self, tenant_id: str, key: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._lock:
            self._waiters[tenant_id].add(key)

    def _remove(self, tenant_id: str, key: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._lock:
            self._waiters[tenant_id].discard(key)
            if not self._waiters[tenant_id]:
                del self._waiters[tenant_id]

    def waiter_count(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._waiters.values())


class Listener:
    """A registered waiter for one tenant's commits; use as a context manager."""

    def __init__(self, hub: Hub, tenant_id: str) -> None:
        self.hub = hub
        self.tenant_id = tenant_id
        self.event = asyncio.Event()
        self._key = (asyncio.get_running_loop(), self.event)

    def __enter__(self) -> Listener:
        self.hub._add(self.tenant_id, self._key)
        return self

    def __exit__(self, *exc: object) -> None:
        self.hub._remove(self.tenant_id, self._key)

    async def wait(self, timeout: float) -> bool:
        """True if a commit arrived since registration (or arrives within ``timeout``)."""
        try:
            async with asyncio.timeout(timeout):
                await self.event.wait()
        except TimeoutError:
            return False
        self.event.clear()
        return True


class PgBridge:
    """One LISTEN connection per process; relays local commits to peers and back."""

    def __init__(self, dsn: str, hub: Hub) -> None:
        self.dsn = dsn
        self.hub = hub
        self._outbox: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runbell-pg-bridge", daemon=True)

    def start(self) -> None:
        self.hub.remote_publish = self._outbox
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._outbox.put(("", -1))
        self._thread.join(timeout=5)

    def _run(self) -> None:
        import psycopg

        failing = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if failing:
                        log.info("feed.bridge_reconnected")
                        failing = False
                    self._pump(conn)
            except Exception as exc:  # reconnect after any connection failure
                # Once per outage, not once a second while the database is down.
                if not failing:
                    log.warning("feed.bridge_reconnect", error=type(exc).__name__)
                failing = True
                self._stop.wait(1.0)

    def _pump(self, conn: object) -> None:
        import psycopg

        assert isinstance(conn, psycopg.Connection)
        while not self._stop.is_set():
            # Send what committed locally (coalesced per tenant), then read peers' news.
            pending: dict[str, int] = {}
            while True:
                try:
                    tenant_id, seq = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if tenant_id:
                    pending[tenant_id] = max(seq, pending.get(tenant_id, -1))
            for tenant_id, seq in pending.items():
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{tenant_id}:{seq}"))
            for note in conn.notifies(timeout=0.05, stop_after=100):
                peer_tenant, _, peer_seq = note.payload.rpartition(":")
                with contextlib.suppress(ValueError):
                    self.hub.publish(peer_tenant, int(peer_seq), local=False)


def start_bridge(db: Database) -> PgBridge | None:
    """Start the LISTEN/NOTIFY bridge for ``db`` when it is PostgreSQL."""
    if not db.is_postgres:
        return None
    dsn = db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    bridge = PgBridge(dsn, db.hub)
    bridge.start()
    return bridge
