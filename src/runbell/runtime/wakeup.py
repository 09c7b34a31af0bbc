"""Wake-ups between processes: PostgreSQL LISTEN/NOTIFY feeding the in-process Hub.

:class:`PgBridge` carries the :class:`~runbell.runtime.hub.Hub`'s wake-ups between processes
over LISTEN/NOTIFY: one listening connection per process, and one that sends each NOTIFY
as soon as a commit queues it (after commit, off the hot transaction). Waiters still
re-check on a slow timer, so a lost wake-up costs latency, never an event.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
import structlog

from runbell.runtime.hub import Hub
from runbell.store.db import Database

log = structlog.get_logger(__name__)

CHANNEL = "runbell_feed"


class PgBridge:
    """One LISTEN connection per process, and one connection that sends: a local commit's
    NOTIFY goes out as soon as it is queued (never after a listening poll), and peers'
    NOTIFYs are relayed to the hub as they arrive."""

    def __init__(self, dsn: str, hub: Hub) -> None:
        self.dsn = dsn
        self.hub = hub
        self._outbox: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runbell-pg-bridge", daemon=True)
        self._sender = threading.Thread(
            target=self._send_loop, name="runbell-pg-notify", daemon=True
        )

    def start(self) -> None:
        self.hub.remote_publish = self._outbox
        self._thread.start()
        self._sender.start()

    def stop(self) -> None:
        self._stop.set()
        self._outbox.put(("", -1))
        self._thread.join(timeout=5)
        self._sender.join(timeout=5)

    def _run(self) -> None:
        self._connected(self._pump, listen=True)

    def _send_loop(self) -> None:
        self._connected(self._send, listen=False)

    def _connected(self, work: Callable[[Any], None], *, listen: bool) -> None:
        import psycopg

        failing = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    if listen:
                        conn.execute(f"LISTEN {CHANNEL}")
                    if failing:
                        log.info("feed.bridge_reconnected", listen=listen)
                        failing = False
                    work(conn)
            except Exception as exc:  # reconnect after any connection failure
                # Once per outage, not once a second while the database is down.
                if not failing:
                    log.warning("feed.bridge_reconnect", error=type(exc).__name__, listen=listen)
                failing = True
                self._stop.wait(1.0)

    def _send(self, conn: Any) -> None:
        """Send what committed locally as soon as it is queued, coalesced per tenant."""
        while not self._stop.is_set():
            pending: dict[str, int] = {}
            tenant_id, seq = self._outbox.get()  # blocks until a commit (or stop)
            while True:
                if tenant_id:
                    pending[tenant_id] = max(seq, pending.get(tenant_id, -1))
                try:
                    tenant_id, seq = self._outbox.get_nowait()
                except queue.Empty:
                    break
            for tenant, latest in pending.items():
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{tenant}:{latest}"))

    def _pump(self, conn: Any) -> None:
        """Relay peers' news to the hub as it arrives."""
        while not self._stop.is_set():
            for note in conn.notifies(timeout=1.0, stop_after=100):
                peer_tenant, _, peer_seq = note.payload.rpartition(":")
                with contextlib.suppress(ValueError):
                    self.hub.publish(peer_tenant, int(peer_seq), local=False)


def start_bridge(db: Database, hub: Hub, listen_url: str | None = None) -> PgBridge | None:
    """Start the LISTEN/NOTIFY bridge for ``db`` when it is PostgreSQL, listening on
        ``listen_url`` when given (``RUNBELL_LISTEN_DATABASE_URL``: LISTEN needs a session of
        its own, which PgBouncer in transaction mode does not give), else on ``db``'s URL; peers'
    commits wake ``hub``'s waiters and this process's commits are sent to the peers."""
    if not db.is_postgres:
        return None
    url = sa.make_url(listen_url) if listen_url else db.engine.url
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    bridge = PgBridge(dsn, hub)
    bridge.start()
    return bridge
