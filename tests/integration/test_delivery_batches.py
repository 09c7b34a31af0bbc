"""The delivery worker works in batches: one claim and one result write per batch, and a
crash in between loses nothing (issue 9 P3; DESIGN §2 invariants 12 and 14).

The worker is the real one, sending to a real local receiver
(:class:`tests.acceptance.receivers.Receiver`); statements and commits are counted
with SQLAlchemy event listeners on the core's own engine. Every test runs on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from runbell.app import build
from runbell.channels.base import Outbound, Sent
from runbell.channels.webhook import WebhookChannel
from runbell.dispatch.worker import Worker
from runbell.flows.context import Core
from runbell.outbound import safe_async_client
from runbell.signatures import new_secret
from runbell.store import tables as t
from runbell.testing import Clock
from tests.acceptance.receivers import Receiver
from tests.acceptance.test_worker_processes import attempts, seed, statuses, webhook_rows
from tests.conftest import make_settings
from tests.timeouts import scaled

LEASE_S = 30.0


@pytest.fixture
def lease_core(tmp_path: Path, db_url: str, clock: Clock) -> Iterator[Core]:
    core = build(
        make_settings(tmp_path, db_url, worker_lease_s=LEASE_S), clock=clock, migrate=False
    )
    yield core
    core.db.dispose()


@dataclass
class Counted:
    statements: list[str] = field(default_factory=list)
    commits: int = 0


@contextmanager
def counting(core: Core) -> Iterator[Counted]:
    """Every statement and commit the core's engine sends while the block runs."""
    counted = Counted()

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        counted.statements.append(statement)

    def on_commit(conn: Any) -> None:
        counted.commits += 1

    engine = core.db.engine
    sa.event.listen(engine, "before_cursor_execute", on_execute)
    sa.event.listen(engine, "commit", on_commit)
    try:
        yield counted
    finally:
        sa.event.remove(engine, "before_cursor_execute", on_execute)
        sa.event.remove(engine, "commit", on_commit)


def run_once(core: Core, **channels: Any) -> int:
    """One ``Worker.run_once`` with a fresh SSRF-guarded webhook client."""

    async def main() -> int:
        async with safe_async_client(allow_hosts=core.settings.outbound_allow_hosts) as client:
            chans = {"webhook": WebhookChannel(client), **channels}
            return await Worker(core, chans, rng=random.Random(3)).run_once()

    return asyncio.run(main())


def test_a_batch_of_claims_is_sent_and_recorded_in_one_transaction(
    lease_core: Core,
) -> None:
    """N claimed webhooks: N arrive, N are accepted, and the worker commits twice (the
    claim, the results) with the same statements for 3 rows as for 12."""
    core = lease_core
    secret = new_secret()
    with Receiver(secret) as rx:
        seeded = seed(core, rx.url, secret, runs=15)
        ids = seeded.delivery_ids
        # Park all but 3, so the first batch has 3 rows and the second 12.
        with core.db.transaction() as tx:
            tx.conn.execute(
                sa.update(t.deliveries).where(t.deliveries.c.id.in_(ids[3:])).values(status="x")
            )
        with counting(core) as small:
            assert run_once(core) == 3
        with core.db.transaction() as tx:
            tx.conn.execute(
                sa.update(t.deliveries).where(t.deliveries.c.status == "x").values(status="queued")
            )
        with counting(core) as large:
            assert run_once(core) == 12

    assert rx.ids() == Counter(dict.fromkeys(ids, 1)), "each sent once"
    assert statuses(core) == {"accepted": 15}
    assert all(attempts(core, i) == [(1, "accepted", 200)] for i in ids)
    assert small.commits == large.commits == 2, "one claim, one result write per batch"
    assert len(large.statements) == len(small.statements), (
        "statements per batch do not grow with its size",
        small.statements,
        large.statements,
    )


class SendThenDie:
    """The real webhook send, then the worker 'dies': the call never returns, so nothing
    the worker learned is recorded (like a SIGKILL between the sends and the write)."""

    name = "webhook"

    def __init__(self, inner: WebhookChannel, expected: int) -> None:
        self.inner = inner
        self.expected = expected
        self.sent = 0
        self.all_sent = asyncio.Event()

    async def send(self, msg: Outbound) -> Sent:
        await self.inner.send(msg)
        self.sent += 1
        if self.sent == self.expected:
            self.all_sent.set()
        await asyncio.Event().wait()  # never
        raise AssertionError("unreachable")


def test_a_crash_between_claim_and_record_redelivers_under_the_same_ids(
    lease_core: Core, clock: Clock
) -> None:
    """A worker sends a whole batch and dies before writing any result: after the lease
    every message goes again under the same webhook-id with the same body, and is then
    recorded once (at-least-once delivery, stable identity)."""
    core = lease_core
    secret = new_secret()
    with Receiver(secret) as rx:
        seeded = seed(core, rx.url, secret, runs=5)
        ids = seeded.delivery_ids
        clock.freeze()

        async def first_worker() -> None:
            async with safe_async_client(allow_hosts=core.settings.outbound_allow_hosts) as client:
                dying = SendThenDie(WebhookChannel(client), expected=len(ids))
                task = asyncio.ensure_future(Worker(core, {"webhook": dying}).run_once())
                await asyncio.wait_for(dying.all_sent.wait(), scaled(60))
                task.cancel()  # the process is gone: nothing after the sends ran
                with pytest.raises(asyncio.CancelledError):
                    await task

        asyncio.run(first_worker())
        rows = webhook_rows(core)
        assert {r["status"] for r in rows.values()} == {"sending"}
        assert not any(attempts(core, i) for i in ids), "nothing was recorded"
        assert run_once(core) == 0, "the lease still holds them"

        clock.advance(LEASE_S + 1)
        assert run_once(core) == len(ids), "claimed again once the lease ran out"

    assert rx.ids() == Counter(dict.fromkeys(ids, 2)), "each sent twice, same webhook-id"
    for delivery_id in ids:
        before, after = rx.of(delivery_id)
        assert before.body == after.body and before.verified and after.verified
        assert attempts(core, delivery_id) == [(2, "accepted", 200)]
    assert statuses(core) == {"accepted": len(ids)}


def test_rows_the_rate_limit_has_no_room_for_are_given_back_as_they_were(
    tmp_path: Path, db_url: str, clock: Clock
) -> None:
    """A tenant limit of 1/s and five due retries: the claim keeps what can go within its
    horizon and gives the rest back unsent — same status, same attempt count, no attempt
    row — due again at their turns, one second apart."""
    settings = make_settings(tmp_path, db_url, worker_lease_s=LEASE_S, webhook_rate_per_s=1.0)
    core = build(settings, clock=clock, migrate=False)
    secret = new_secret()
    try:
        with Receiver(secret) as rx:
            ids = seed(core, rx.url, secret, runs=5).delivery_ids
            now = clock.freeze()
            with core.db.transaction() as tx:
                tx.conn.execute(
                    sa.update(t.deliveries)
                    .where(t.deliveries.c.id.in_(ids))
                    .values(status="retry_scheduled", attempt_count=1, next_attempt_at=now)
                )
            sent = run_once(core)
        rows = webhook_rows(core)
        kept = sorted(i for i, r in rows.items() if r["status"] == "accepted")
        back = sorted(i for i, r in rows.items() if r["status"] != "accepted")
        assert sent == len(kept) == 2, "a burst of 1, then one more within the 1 s horizon"
        assert sorted(rx.ids()) == kept
        assert {rows[i]["status"] for i in back} == {"retry_scheduled"}
        assert {rows[i]["attempt_count"] for i in back} == {1}, "not an attempt"
        assert not any(attempts(core, i) for i in back)
        due = sorted((rows[i]["next_attempt_at"] - now).total_seconds() for i in back)
        assert due == [2.0, 3.0, 4.0]
        assert {rows[i]["claimed_by"] for i in back} == {None}
    finally:
        core.db.dispose()
