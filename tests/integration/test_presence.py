"""Presence shared through the database (runtime/presence.py), on SQLite and PostgreSQL.

Two :class:`Presence` registries on one database stand for two processes: what one holds,
the other sees after a write; what a dead process held expires; a busy owner costs one
read per cache period, not one per question. The two-process version with real
``runbell api`` children is tests/acceptance/test_scaleout.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from runbell.flows.context import Core
from runbell.runtime.presence import Presence
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds
from tests.timeouts import WAIT

TTL_S = 30.0


@pytest.fixture
def pair(core: Core) -> Iterator[tuple[Presence, Presence]]:
    a = Presence(core.db, ttl_s=TTL_S, cache_s=0)
    b = Presence(core.db, ttl_s=TTL_S, cache_s=0)
    yield a, b
    a.close()
    b.close()


def rows(core: Core) -> list[tuple[str, str, str]]:
    p = t.presence
    with core.db.read() as conn:
        found = conn.execute(sa.select(p.c.tenant_id, p.c.user_id, p.c.holder)).all()
    return sorted((r[0], r[1], r[2]) for r in found)


def test_a_viewer_held_by_one_process_is_seen_by_another(
    core: Core, creds: TenantCreds, pair: tuple[Presence, Presence]
) -> None:
    a, b = pair
    who = (creds.tenant_id, creds.owner_id)
    assert not b.is_present(*who)
    a.enter(*who)
    assert a.is_present(*who), "its own viewers without a write"
    a.flush()
    assert rows(core) == [(*who, a.holder)]
    assert b.is_present(*who)
    a.enter(*who)  # a second tab
    a.leave(*who)
    a.flush()
    assert b.is_present(*who), "one tab is still open"
    a.leave(*who)
    a.flush()
    assert rows(core) == []
    assert not b.is_present(*who)


def test_a_process_that_died_stops_counting_after_the_ttl(
    core: Core, clock: Clock, creds: TenantCreds, pair: tuple[Presence, Presence]
) -> None:
    """No leave, no close (SIGKILL): the row expires, and the next heartbeat anywhere
    deletes it."""
    a, b = pair
    clock.freeze()
    who = (creds.tenant_id, creds.owner_id)
    a.enter(*who)
    a.flush()
    clock.advance(TTL_S - 1)
    assert b.is_present(*who)
    clock.advance(2)
    assert not b.is_present(*who), "expired"
    b.flush(heartbeat=True)
    assert rows(core) == []


def test_the_heartbeat_keeps_a_long_viewer_present(
    core: Core, clock: Clock, creds: TenantCreds, pair: tuple[Presence, Presence]
) -> None:
    a, b = pair
    clock.freeze()
    who = (creds.tenant_id, creds.owner_id)
    a.enter(*who)
    a.flush()
    for _ in range(5):
        clock.advance(TTL_S * 0.9)
        a.flush(heartbeat=True)
        assert b.is_present(*who)


def test_close_deletes_this_process_rows_only(
    core: Core, creds: TenantCreds, pair: tuple[Presence, Presence]
) -> None:
    a, b = pair
    who = (creds.tenant_id, creds.owner_id)
    a.enter(*who)
    b.enter(*who)
    a.flush()
    b.flush()
    a.close()
    assert rows(core) == [(*who, b.holder)]
    b.leave(*who)
    b.flush()
    assert rows(core) == []


def test_answers_are_cached_so_a_busy_owner_is_not_a_read_per_signal(
    core: Core, creds: TenantCreds
) -> None:
    reads: list[str] = []

    def count(_c: object, _cur: object, statement: str, *_: object) -> None:
        if "presence" in statement and statement.lstrip().upper().startswith("SELECT"):
            reads.append(statement)

    viewer = Presence(core.db, cache_s=3600)
    other = Presence(core.db, cache_s=3600)
    event.listen(core.db.engine, "before_cursor_execute", count)
    try:
        for _ in range(50):
            assert not other.is_present(creds.tenant_id, creds.owner_id)
        assert len(reads) == 1
        viewer.enter(creds.tenant_id, creds.owner_id)
        for _ in range(50):
            assert viewer.is_present(creds.tenant_id, creds.owner_id)
        assert len(reads) == 1, "a process never reads to learn about its own viewers"
    finally:
        event.remove(core.db.engine, "before_cursor_execute", count)
        viewer.close()
        other.close()


def test_the_heartbeat_thread_writes_a_new_viewer_at_once(core: Core, creds: TenantCreds) -> None:
    """enter() never writes on the caller's thread; the heartbeat thread does, woken now
    rather than at its next beat."""
    import time

    viewer = Presence(core.db, ttl_s=300)  # next beat in 100 s: only the wake-up can do it
    try:
        viewer.enter(creds.tenant_id, creds.owner_id)
        deadline = time.monotonic() + WAIT
        while not rows(core) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rows(core) == [(creds.tenant_id, creds.owner_id, viewer.holder)]
        viewer.leave(creds.tenant_id, creds.owner_id)
        deadline = time.monotonic() + WAIT
        while rows(core) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rows(core) == []
    finally:
        viewer.close()
