"""Time-driven sweeps: reconciliation re-checks, notification expiry, stalls, escalation
steps, digest flush, due webhook schedules, retention.

Each sweep is a plain method taking ``now`` (tests drive them with a fixed clock). With
several processes on PostgreSQL, an advisory lock (:func:`runbell.runtime.leader.leading`,
taken through the container) elects one runner per sweep per tick; on SQLite there is one
process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

import structlog

from runbell.flows import digests, escalation, reconcile, retention, schedule_firing, stalls, sweeps
from runbell.flows.context import Core
from runbell.flows.input_requests import expire_requests

log = structlog.get_logger(__name__)

LOCK_IDS = {
    "mismatch": 72_101,
    "retention": 72_102,
    "expiry": 72_103,
    "input_requests": 72_104,
    "stalls": 72_105,
    "escalation": 72_106,
    "digests": 72_107,
    "schedules": 72_120,  # webhook schedules due (flows.schedule_firing)
}


class Scheduler:
    def __init__(self, core: Core, *, interval_s: float | None = None) -> None:
        self.core = core
        self.interval_s = interval_s or core.settings.scheduler_interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_retention: datetime | None = None

    def _leader(self, sweep: str, fn: Callable[[], int]) -> int:
        with self.core.leading(LOCK_IDS[sweep]) as lead:
            return fn() if lead else 0

    def tick(self, now: datetime | None = None) -> dict[str, int]:
        now = now or self.core.db.clock()
        done = {
            "mismatch": self._leader(
                "mismatch", lambda: reconcile.recheck_mismatches(self.core, now)
            ),
            # Before notification expiry, so a request's alerts close saying the request expired.
            "input_requests": self._leader(
                "input_requests", lambda: expire_requests(self.core, now)
            ),
            "expiry": self._leader("expiry", lambda: sweeps.expire_notifications(self.core, now)),
            "stalls": self._leader("stalls", lambda: stalls.sweep(self.core, now)),
            "escalation": self._leader("escalation", lambda: escalation.sweep(self.core, now)),
            # Digest latency: a window's digest goes out within one tick of its close.
            "digests": self._leader("digests", lambda: digests.flush_due(self.core, now)),
            "schedules": self._leader("schedules", lambda: schedule_firing.sweep(self.core, now)),
        }
        if self._last_retention is None or (now - self._last_retention).total_seconds() > 60:
            self._last_retention = now
            done["retention"] = self._leader("retention", lambda: retention.sweep(self.core, now))
        return done

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="runbell-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:
                # A database outage is logged once by Availability; the next tick retries.
                if self.core.db.availability.observe(exc) is None:
                    log.exception("scheduler.tick_failed")
            self._stop.wait(self.interval_s)
