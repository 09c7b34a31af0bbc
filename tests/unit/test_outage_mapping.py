"""Which database errors are an outage (503 + Retry-After, one log line) and which are not.

Real driver exception classes, no I/O: sqlite3's own OperationalError and psycopg's
SQLSTATE classes, wrapped the way SQLAlchemy wraps them.
"""

from __future__ import annotations

import sqlite3
import time

import psycopg
import psycopg.errors
import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from runbell.store.availability import StillUnavailable, wait_while_unavailable
from runbell.store.db import RETRY_AFTER_S, Availability, unavailable_reason


def wrapped(
    orig: Exception, cls: type[sa.exc.DBAPIError] = sa.exc.OperationalError, **kw: bool
) -> sa.exc.DBAPIError:
    return cls("SELECT 1", {}, orig, **kw)


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        # SQLite: the write lock still held when busy_timeout ran out
        (wrapped(sqlite3.OperationalError("database is locked")), "busy"),
        (wrapped(sqlite3.OperationalError("database table is locked")), "busy"),
        # SQLite: bugs and broken set-ups are not outages
        (wrapped(sqlite3.OperationalError("no such table: runs")), None),
        (wrapped(sqlite3.OperationalError('near "SELEC": syntax error')), None),
        # PostgreSQL: the server going away, restarting, refusing
        (wrapped(psycopg.OperationalError("connection failed: Connection refused")), "unreachable"),
        (wrapped(psycopg.errors.AdminShutdown("terminating connection")), "unreachable"),
        (
            wrapped(psycopg.errors.CannotConnectNow("the database system is starting up")),
            "unreachable",
        ),
        (wrapped(psycopg.errors.CrashShutdown("crash")), "unreachable"),
        (wrapped(psycopg.errors.TooManyConnections("too many clients")), "unreachable"),
        (wrapped(psycopg.errors.ConnectionFailure("connection failure")), "unreachable"),
        # PostgreSQL refusing a connection for good (libpq gives no SQLSTATE): not an outage
        (
            wrapped(psycopg.OperationalError('failed: FATAL:  database "rb" does not exist')),
            None,
        ),
        (
            wrapped(psycopg.OperationalError("FATAL:  password authentication failed for user")),
            None,
        ),
        (
            wrapped(psycopg.OperationalError('FATAL:  no pg_hba.conf entry for host "10.0.0.9"')),
            None,
        ),
        # SQLAlchemy saw a disconnect and invalidated the connection, whatever the class
        (
            wrapped(
                psycopg.InterfaceError("the connection is closed"),
                sa.exc.InterfaceError,
                connection_invalidated=True,
            ),
            "unreachable",
        ),
        (sa.exc.TimeoutError("QueuePool limit of size 16 overflow 16 reached"), "pool_timeout"),
        # PostgreSQL: conflicts and bugs stay what they are
        (wrapped(psycopg.errors.SerializationFailure("could not serialize")), None),
        (wrapped(psycopg.errors.QueryCanceled("statement timeout")), None),
        (wrapped(psycopg.errors.UniqueViolation("duplicate key"), sa.exc.IntegrityError), None),
        (wrapped(psycopg.InterfaceError("cursor already closed"), sa.exc.InterfaceError), None),
        (ValueError("not a database error"), None),
    ],
)
def test_outages_are_told_apart_from_bugs(exc: BaseException, reason: str | None) -> None:
    assert unavailable_reason(exc) == reason
    if reason is not None:
        assert RETRY_AFTER_S[reason] >= 1


def test_one_warning_when_an_outage_starts_and_one_when_it_ends() -> None:
    availability = Availability()
    in_flight = time.monotonic()  # an operation that began before the outage
    with capture_logs() as logs:
        for _ in range(5):
            assert availability.observe(wrapped(psycopg.errors.AdminShutdown("x"))) == "unreachable"
        assert availability.observe(ValueError("a bug")) is None
        availability.succeeded(in_flight)  # finished, but started before the last failure
        assert availability.down
        availability.succeeded(time.monotonic())
        availability.succeeded(time.monotonic())
    assert not availability.down
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("database.unavailable", "warning"),
        ("database.recovered", "warning"),
    ]
    start, end = logs
    assert start["reason"] == "unreachable" and start["error"] == "AdminShutdown"
    assert end["failed_operations"] == 5


def test_an_error_seen_by_two_layers_counts_once() -> None:
    availability = Availability()
    exc = wrapped(sqlite3.OperationalError("database is locked"))
    with capture_logs() as logs:
        availability.observe(exc)  # the unit of work
        availability.observe(exc)  # the HTTP handler
        availability.succeeded(time.monotonic())
    assert logs[-1]["failed_operations"] == 1


def test_a_busy_sqlite_is_back_only_when_a_write_goes_through() -> None:
    """SQLite readers never wait for the write lock, so a read proves nothing."""
    availability = Availability()
    with capture_logs() as logs:
        availability.observe(wrapped(sqlite3.OperationalError("database is locked")))
        availability.succeeded(time.monotonic(), write=False)
        assert availability.down
        availability.succeeded(time.monotonic(), write=True)
    assert not availability.down
    assert [e["event"] for e in logs] == ["database.unavailable", "database.recovered"]


def test_a_start_waits_out_an_outage_with_one_warning_per_failed_attempt() -> None:
    """Two refused connections, then the start goes through: two ``database.waiting``
    warnings numbered 1 and 2, with growing pauses; the start's result is returned."""
    refused = wrapped(psycopg.OperationalError("connection failed: Connection refused"))
    tries: list[int] = []
    pauses: list[float] = []

    def start() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise refused
        return "up"

    with capture_logs() as logs:
        assert wait_while_unavailable(start, timeout_s=600, sleep=pauses.append) == "up"
    waiting = [e for e in logs if e["event"] == "database.waiting"]
    assert [e["attempt"] for e in waiting] == [1, 2]
    assert {e["reason"] for e in waiting} == {"unreachable"}
    assert pauses[0] < pauses[1]


def test_a_start_gives_up_after_its_bound_and_never_waits_for_a_bug() -> None:
    refused = wrapped(psycopg.OperationalError("connection failed: Connection refused"))

    def down() -> None:
        raise refused

    with pytest.raises(StillUnavailable) as gave_up:
        wait_while_unavailable(down, timeout_s=0, sleep=lambda _: None)
    assert (gave_up.value.reason, gave_up.value.attempts) == ("unreachable", 1)

    calls: list[int] = []
    missing = wrapped(psycopg.OperationalError('FATAL:  database "rb" does not exist'))

    def broken() -> None:
        calls.append(1)
        raise missing

    with pytest.raises(sa.exc.OperationalError):
        wait_while_unavailable(broken, timeout_s=600, sleep=lambda _: None)
    assert calls == [1]  # waiting would not make the database exist
