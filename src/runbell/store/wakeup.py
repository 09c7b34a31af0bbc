"""Wake-ups between processes: PostgreSQL LISTEN/NOTIFY feeding the in-process Hub.

:class:`PgBridge` carries the :class:`~runbell.store.hub.Hub`'s wake-ups between processes
over LISTEN/NOTIFY on one dedicated connection per process; NOTIFY is sent after commit,
off the hot transaction. Waiters still re-check on a slow timer, so a lost wake-up costs
latency, never an event.
"""

from __future__ import annotations

import contextlib
import queue
import threading

import sqlalchemy as sa
import structlog

from runbell.store.db import Database
from runbell.store.hub import Hub

log = structlog.get_logger(__name__)

CHANNEL = "runbell_feed"


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


def start_bridge(db: Database, listen_url: str | None = None) -> PgBridge | None:
    """Start the LISTEN/NOTIFY bridge for ``db`` when it is PostgreSQL, listening on
    ``listen_url`` when given (``RUNBELL_LISTEN_DATABASE_URL``: LISTEN needs a session of
    its own, which PgBouncer in transaction mode does not give), else on ``db``'s URL."""
    if not db.is_postgres:
        return None
    url = sa.make_url(listen_url) if listen_url else db.engine.url
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    bridge = PgBridge(dsn, db.hub)
    bridge.start()
    return bridge
