"""Telling an outage from a bug: which database errors mean "not available right now".

An outage (PostgreSQL restarting, the network gone, SQLite locked beyond its busy timeout)
is a state of the database, not a bug of the request: :func:`unavailable_reason` tells such
errors apart, and :class:`Availability` logs one warning when one starts and one when it
ends, instead of a traceback per failed request, delivery claim or sweep. The HTTP layer
answers them 503 with ``Retry-After``. A process that *starts* during an outage waits it
out with :func:`wait_while_unavailable` (bounded by ``RUNBELL_DB_START_TIMEOUT_S``).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
import structlog

T = TypeVar("T")

log = structlog.get_logger(__name__)

# SQLSTATEs that mean "the server is not there for you right now" (PostgreSQL appendix A):
# class 08 connection exceptions, plus shutdown / start-up / too many connections.
_UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")
# A connection the server refused for good (libpq reports these without a SQLSTATE): no
# such database or role, a wrong password, not allowed by pg_hba.conf. Waiting fixes none.
_REFUSED_FOR_GOOD = (
    "does not exist",
    "authentication failed",
    "no pg_hba.conf entry",
    "permission denied",
)

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
    # No SQLSTATE: the client library failed to connect or lost the socket (psycopg),
    # unless the server answered that it never will let us in.
    if sqlstate is None and any(m in str(orig) for m in _REFUSED_FOR_GOOD):
        return None
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


class StillUnavailable(Exception):
    """The database stayed unavailable for the whole start-up bound."""

    def __init__(self, reason: str, detail: str, attempts: int, waited_s: float) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail
        self.attempts, self.waited_s = attempts, waited_s


#: Seconds between start-up attempts: doubling from the first, never more than the last.
START_BACKOFF_S = (0.5, 5.0)


def wait_while_unavailable(
    start: Callable[[], T],
    *,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``start()`` (open the database, migrate, first writes), tried again with backoff
    while it fails because the database is unavailable (:func:`unavailable_reason`), for
    at most ``timeout_s`` seconds; then :class:`StillUnavailable`. One ``database.waiting``
    warning per failed attempt; any other error (a wrong password, a bug) is raised at
    once: waiting would not fix it. ``start`` must clean up after itself when it fails."""
    began = time.monotonic()
    delay, longest = START_BACKOFF_S
    attempt = 0
    while True:
        attempt += 1
        try:
            return start()
        except Exception as exc:
            reason = unavailable_reason(exc)
            if reason is None:
                raise
            waited = time.monotonic() - began
            left = timeout_s - waited
            if left <= 0:
                raise StillUnavailable(reason, _first_line(exc), attempt, waited) from exc
            pause = min(delay, left)
            log.warning(
                "database.waiting",
                attempt=attempt,
                reason=reason,
                detail=_first_line(exc),
                retry_in_s=round(pause, 1),
                gives_up_in_s=round(left, 1),
            )
            sleep(pause)
            delay = min(delay * 2, longest)
