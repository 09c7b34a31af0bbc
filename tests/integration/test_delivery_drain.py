"""The worker as it runs in ``runbell worker``: its own channels (the webhook client is
``KeepAliveLanes``), batches that mix endpoints, outcomes and rate limits (issue 21, P3).

Every test runs on SQLite and PostgreSQL, against real local receivers.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from runbell.app import build
from runbell.channels.webhook_http import KeepAliveLanes
from runbell.dispatch.wiring import build_channels
from runbell.dispatch.worker import Worker
from runbell.flows.context import Core
from runbell.signatures import new_secret
from runbell.store import endpoints
from runbell.store import tables as t
from runbell.testing import Clock
from tests.acceptance.receivers import Receiver
from tests.acceptance.test_worker_processes import Seeded, attempts, seed, webhook_rows
from tests.conftest import make_settings

LEASE_S = 30.0


def run_once(core: Core) -> int:
    """One ``Worker.run_once`` with the channels ``runbell worker`` builds."""

    async def main() -> int:
        channels = build_channels(core, only={"webhook"})
        lanes = channels["webhook"]._client  # type: ignore[attr-defined]
        assert isinstance(lanes, KeepAliveLanes)
        try:
            return await Worker(core, channels, rng=random.Random(5)).run_once()
        finally:
            await lanes.aclose()

    return asyncio.run(main())


def add_endpoint(seeded: Seeded, url: str, rate_limit_per_s: float | None) -> str:
    core = seeded.core
    with core.db.transaction() as tx:
        return endpoints.create(
            tx.conn,
            seeded.tenant_id,
            tx.now,
            url=url,
            description="second receiver",
            event_types=["run.finished"],
            sealed_secret=core.box.seal(seeded.secret),
            rate_limit_per_s=rate_limit_per_s,
        )


def by_endpoint(core: Core) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for delivery_id, row in sorted(webhook_rows(core).items()):
        found.setdefault(row["destination"], []).append(delivery_id)
    return found


@pytest.fixture
def lease_core(tmp_path: Path, db_url: str, clock: Clock) -> Iterator[Core]:
    core = build(
        make_settings(tmp_path, db_url, worker_lease_s=LEASE_S), clock=clock, migrate=False
    )
    yield core
    core.db.dispose()


def test_one_batch_records_each_outcome_on_its_own(lease_core: Core) -> None:
    """One claim holding deliveries to a receiver that accepts and to one that answers
    503: each gets exactly one attempt row with its own outcome; the accepted are
    settled, the failed are scheduled for a retry under the same id — one result write
    for the whole batch does not blur them."""
    core = lease_core
    secret = new_secret()
    with Receiver(secret) as ok, Receiver(secret, status=503) as failing:
        seeded = seed(core, ok.url, secret, runs=0)
        add_endpoint(seeded, failing.url, None)
        seeded.complete(range(4))  # each run.finished goes to both endpoints
        rows = webhook_rows(core)
        assert len(rows) == 8
        assert run_once(core) == 8, "one batch"
    rows = webhook_rows(core)
    ok_ids = sorted(i for i, r in rows.items() if r["destination"] == seeded.endpoint_id)
    failed_ids = sorted(set(rows) - set(ok_ids))
    assert sorted(ok.ids()) == ok_ids and sorted(failing.ids()) == failed_ids
    assert {rows[i]["status"] for i in ok_ids} == {"accepted"}
    assert all(attempts(core, i) == [(1, "accepted", 200)] for i in ok_ids)
    assert {rows[i]["status"] for i in failed_ids} == {"retry_scheduled"}
    assert all(attempts(core, i) == [(1, "transient", 503)] for i in failed_ids)
    assert {rows[i]["attempt_count"] for i in rows} == {1}
    assert {rows[i]["claimed_by"] for i in rows} == {None}
    assert all(rows[i]["next_attempt_at"] is not None for i in failed_ids)


def test_a_claim_across_endpoints_keeps_each_endpoints_rate_limit(
    tmp_path: Path, db_url: str, clock: Clock
) -> None:
    """Four due messages to an endpoint limited to 1/s and four to one without a limit,
    claimed together: the unlimited four all go; of the limited ones the claim keeps
    what fits its 1 s horizon and gives the rest back unsent, due at their turns."""
    settings = make_settings(tmp_path, db_url, worker_lease_s=LEASE_S)
    core = build(settings, clock=clock, migrate=False)
    secret = new_secret()
    try:
        with Receiver(secret) as free, Receiver(secret) as slow:
            seeded = seed(core, free.url, secret, runs=0)
            limited = add_endpoint(seeded, slow.url, 1.0)
            seeded.complete(range(4))
            now = clock.freeze()
            with core.db.transaction() as tx:
                tx.conn.execute(sa.update(t.deliveries).values(next_attempt_at=now))
            sent = run_once(core)
            rows = webhook_rows(core)
            groups = by_endpoint(core)
            unlimited, capped = groups[seeded.endpoint_id], groups[limited]
            assert sorted(free.ids()) == unlimited
            kept = sorted(i for i in capped if rows[i]["status"] == "accepted")
            back = sorted(i for i in capped if rows[i]["status"] != "accepted")
            assert sorted(slow.ids()) == kept
        assert sent == 4 + len(kept)
        assert len(kept) == 2, "a burst of 1, then one more within the 1 s horizon"
        assert {rows[i]["status"] for i in unlimited} == {"accepted"}
        assert {rows[i]["status"] for i in back} == {"queued"}
        assert {rows[i]["attempt_count"] for i in back} == {0}, "not an attempt"
        assert not any(attempts(core, i) for i in back)
        due = sorted((rows[i]["next_attempt_at"] - now).total_seconds() for i in back)
        assert due == [2.0, 3.0]
    finally:
        core.db.dispose()
