"""Stall detection (DESIGN §2 inv. 13; issue 10 item 6): a working run that stops
reporting raises one ``stalled`` notification and one ``run.stalled`` webhook per stall
episode, even with two schedulers; progress resolves it; a second stall is a second
episode. Every test runs on SQLite and PostgreSQL under the injectable clock, driving
``Scheduler.tick(now)``; webhooks go to a real local receiver."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.app import build
from runbell.dispatch.scheduler import Scheduler
from runbell.flows import stalls
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds
from tests.conftest import bearer, make_settings
from tests.peers import Dispatcher, WebhookReceiver
from tests.timeouts import WAIT

PENDING = ("queued", "retry_scheduled", "deferred", "delivery_unknown", "sending")


# --- helpers -----------------------------------------------------------------------------


def start(clock: Clock) -> datetime:
    # Near the wall clock: the receiver's Standard Webhooks timestamp tolerance holds.
    return clock.freeze(datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=120))


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def make_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> dict[str, Any]:
    body = {"owner": creds.owner_email, "state": "working", **fields}
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    return dict(r.json())


def progress(client: TestClient, creds: TenantCreds, run_id: str) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/progress",
        json={"message": "still going"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 202, r.text
    return dict(r.json())


def signal(client: TestClient, creds: TenantCreds, run_id: str, state: str) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": f"{run_id}-{state}", "state": state},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "applied", r.text
    return dict(r.json())


def rows(core: Core, table: sa.Table, tenant_id: str, **where: Any) -> list[dict[str, Any]]:
    q = sa.select(table).where(table.c.tenant_id == tenant_id)
    for name, value in where.items():
        q = q.where(table.c[name] == value)
    with core.db.read() as conn:
        return [dict(r._mapping) for r in conn.execute(q).all()]


def stalled_notes(core: Core, creds: TenantCreds, run_id: str) -> list[dict[str, Any]]:
    found = rows(core, t.notifications, creds.tenant_id, run_id=run_id, attention_type="stalled")
    return sorted(found, key=lambda n: n["transition_version"])


def feed_types(core: Core, creds: TenantCreds, run_id: str) -> list[str]:
    found = rows(core, t.feed_events, creds.tenant_id, run_id=run_id)
    return [e["type"] for e in sorted(found, key=lambda e: e["seq"])]


def get_run(client: TestClient, creds: TenantCreds, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    return dict(r.json())


def drain(client: TestClient, creds: TenantCreds, clock: Clock, d: Dispatcher) -> None:
    """Run the real worker until no delivery is pending (following the clock to each)."""
    for _ in range(20):
        r = client.get("/v1/deliveries", headers=bearer(creds.admin_key))
        pending = [x for x in r.json()["deliveries"] if x["status"] in PENDING]
        if not pending:
            return
        due = min(datetime.fromisoformat(x["next_attempt_at"]) for x in pending)
        clock.freeze(max(due, clock()))
        d.tick()
    raise AssertionError("deliveries still pending")


@pytest.fixture
def second_core(tmp_path: Path, db_url: str, clock: Clock) -> Iterator[Core]:
    """Another process's core on the same database (its own engine, writer and caches)."""
    rb = build(make_settings(tmp_path, db_url), clock=clock, migrate=False)
    yield rb
    rb.db.dispose()


# --- one stall, two schedulers ---------------------------------------------------------


def test_a_vanished_worker_stalls_once_with_one_webhook_even_with_two_schedulers(
    core: Core, second_core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """A run that started working and never reported again: past its threshold, exactly
    one stalled notification and one run.stalled webhook, however many schedulers tick."""
    t0 = start(clock)
    with WebhookReceiver() as rx:
        r = client.post(
            "/v1/webhook-endpoints",
            json={"url": rx.url(), "event_types": ["run.stalled", "run.recovered"]},
            headers=bearer(creds.admin_key),
        )
        assert r.status_code == 201, r.text
        rx.secrets.append(r.json()["secret"])
        run = make_run(client, creds, "vanished-1", stall_after_seconds=60)
        assert run["stall_after_seconds"] == 60
        assert run["stall_due_at"] == iso(t0 + timedelta(seconds=60))

        schedulers = [Scheduler(core), Scheduler(second_core)]
        clock.freeze(t0 + timedelta(seconds=59))
        assert [s.tick(clock())["stalls"] for s in schedulers] == [0, 0]

        now = clock.freeze(t0 + timedelta(seconds=61))
        barrier = threading.Barrier(2)
        done: list[int] = []
        errors: list[BaseException] = []

        def tick(s: Scheduler) -> None:
            try:
                barrier.wait(timeout=WAIT)
                done.append(s.tick(now)["stalls"])
            except BaseException as exc:  # surfaced below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=tick, args=(s,)) for s in schedulers]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=WAIT)
        assert errors == []
        assert sorted(done) == [0, 1]
        # Later ticks of either scheduler find the episode already recorded.
        clock.advance(600)
        assert [s.tick(clock())["stalls"] for s in schedulers] == [0, 0]

        (note,) = stalled_notes(core, creds, "vanished-1")
        assert note["state"] == "open" and note["rule_id"] == "stalled.default"
        assert note["decision"] == "push" and note["urgency"] == "normal"
        assert note["transition_version"] == run["version"] + 1
        failed = rows(core, t.notifications, creds.tenant_id, attention_type="failed")
        assert failed == []
        history = rows(core, t.transitions, creds.tenant_id, run_id="vanished-1")
        stall = max(history, key=lambda h: h["version"])
        assert (stall["kind"], stall["from_state"], stall["to_state"]) == (
            "stall",
            "working",
            "working",
        )
        assert stall["decision"]["rule_id"] == "stalled.default"
        after = get_run(client, creds, "vanished-1")
        assert after["state"] == "working" and after["version"] == run["version"] + 1
        assert after["stalled_at"] == iso(now) and after["stall_due_at"] is None
        assert [n["attention_type"] for n in after["open_notifications"]] == ["stalled"]
        assert feed_types(core, creds, "vanished-1").count("run.stalled") == 1

        with Dispatcher(core, clock) as d:
            drain(client, creds, clock, d)
        (message,) = rx.of_type("run.stalled")
        assert message.signed_by == [0]
        data = message.json()["data"]
        assert data["run_id"] == "vanished-1" and data["state"] == "working"
        assert data["stall_after_seconds"] == 60 and data["silent_for_s"] == 61
        assert data["notification_ids"] == [note["id"]]
        assert len(rx.requests) == 1


# --- episodes --------------------------------------------------------------------------


def test_progress_resolves_the_stall_and_a_second_stall_is_a_second_episode(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    t0 = start(clock)
    sched = Scheduler(core)
    make_run(client, creds, "episodes-1", stall_after_seconds=30)
    # Progress keeps pushing the clock out: no stall while the run reports.
    for step in (20, 40, 60):
        clock.freeze(t0 + timedelta(seconds=step))
        assert progress(client, creds, "episodes-1")["accepted"] is True
        assert sched.tick(clock())["stalls"] == 0
    assert stalled_notes(core, creds, "episodes-1") == []

    clock.freeze(t0 + timedelta(seconds=91))
    assert sched.tick(clock())["stalls"] == 1
    (first,) = stalled_notes(core, creds, "episodes-1")
    # The run page says so beside the state (signed in as the owner).
    from tests.integration.test_web import sign_in

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/runs/episodes-1")
    assert page.status_code == 200 and 'id="run-stalled"' in page.text

    clock.freeze(t0 + timedelta(seconds=100))
    answer = progress(client, creds, "episodes-1")
    assert answer["decision"] == "live"  # progress itself still never pushes
    assert answer["run"]["stalled_at"] is None
    assert 'id="run-stalled"' not in client.get("/runs/episodes-1").text
    (resolved,) = stalled_notes(core, creds, "episodes-1")
    assert resolved["state"] == "resolved"
    assert resolved["closed_reason"] == "recovered: progress reported"
    types = feed_types(core, creds, "episodes-1")
    assert types.index("run.recovered") > types.index("run.stalled")
    (recovered,) = [
        e["data"]
        for e in rows(core, t.feed_events, creds.tenant_id, run_id="episodes-1")
        if e["type"] == "run.recovered"
    ]
    assert recovered["notification_ids"] == [first["id"]]
    assert recovered["stalled_for_s"] == 9

    # A new episode clock: 29 s later nothing, 31 s later the second episode.
    clock.freeze(t0 + timedelta(seconds=129))
    assert sched.tick(clock())["stalls"] == 0
    clock.freeze(t0 + timedelta(seconds=131))
    assert sched.tick(clock())["stalls"] == 1
    assert sched.tick(clock())["stalls"] == 0
    one, two = stalled_notes(core, creds, "episodes-1")
    assert (one["state"], two["state"]) == ("resolved", "open")
    assert two["transition_version"] > one["transition_version"]
    kinds = [h["kind"] for h in rows(core, t.transitions, creds.tenant_id, run_id="episodes-1")]
    assert sorted(kinds) == ["create", "recover", "stall", "stall"]


def test_any_accepted_signal_ends_the_episode(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """A stalled run that then fails: the stalled alert is resolved (the failure is its
    own, different attention); the finished run never stalls again."""
    t0 = start(clock)
    sched = Scheduler(core)
    make_run(client, creds, "ends-1", stall_after_seconds=5)
    clock.freeze(t0 + timedelta(seconds=6))
    assert sched.tick(clock())["stalls"] == 1
    answer = signal(client, creds, "ends-1", "failed")
    assert [n["attention_type"] for n in answer["notifications"]] == ["failed"]
    (stalled,) = stalled_notes(core, creds, "ends-1")
    assert stalled["state"] == "resolved"
    assert stalled["closed_reason"] == "recovered: run is now failed"
    assert "run.recovered" in feed_types(core, creds, "ends-1")
    clock.advance(3600)
    assert sched.tick(clock())["stalls"] == 0
    assert get_run(client, creds, "ends-1")["stall_due_at"] is None


def test_only_working_runs_stall_and_the_clock_restarts_on_return_to_working(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    t0 = start(clock)
    sched = Scheduler(core)
    make_run(client, creds, "queued-1", state="queued", stall_after_seconds=5)
    make_run(client, creds, "blocked-1", stall_after_seconds=5)
    signal(client, creds, "blocked-1", "input_required")
    clock.freeze(t0 + timedelta(seconds=3600))
    assert sched.tick(clock())["stalls"] == 0
    # Back to working an hour later: its clock starts now, not when it first started.
    signal(client, creds, "blocked-1", "working")
    clock.freeze(t0 + timedelta(seconds=3604))
    assert sched.tick(clock())["stalls"] == 0
    clock.freeze(t0 + timedelta(seconds=3606))
    assert sched.tick(clock())["stalls"] == 1
    assert stalled_notes(core, creds, "queued-1") == []
    assert len(stalled_notes(core, creds, "blocked-1")) == 1


# --- where the threshold comes from ----------------------------------------------------


def test_threshold_comes_from_the_run_else_the_tenant_policy_and_zero_means_never(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    t0 = start(clock)
    sched = Scheduler(core)
    admin = bearer(creds.admin_key)
    make_run(client, creds, "default-1")  # the built-in default: 900 s
    assert get_run(client, creds, "default-1")["stall_due_at"] == iso(t0 + timedelta(seconds=900))
    make_run(client, creds, "never-1", stall_after_seconds=0)
    make_run(client, creds, "own-1", stall_after_seconds=600)

    # The tenant default changes: runs that follow it are re-timed, the others are not.
    r = client.put("/v1/policy", json={"stall_after_seconds": 10}, headers=admin)
    assert r.status_code == 200, r.text
    assert r.json()["stall_after_seconds"] == 10
    assert get_run(client, creds, "default-1")["stall_due_at"] == iso(t0 + timedelta(seconds=10))
    bad = client.put("/v1/policy", json={"stall_after_seconds": -1}, headers=admin)
    assert bad.status_code == 422 and "stall_after_seconds" in bad.text

    # The run's own setting, changed by PUT, keeps the clock's start.
    r = client.put(
        "/v1/runs/own-1", json={"stall_after_seconds": 20}, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 200, r.text
    assert r.json()["stall_due_at"] == iso(t0 + timedelta(seconds=20))
    bad = client.put(
        "/v1/runs/own-1", json={"stall_after_seconds": -5}, headers=bearer(creds.runtime_key)
    )
    assert bad.status_code == 422 and "stall_after_seconds" in bad.text

    clock.freeze(t0 + timedelta(seconds=11))
    assert sched.tick(clock())["stalls"] == 1  # default-1
    clock.freeze(t0 + timedelta(seconds=21))
    assert sched.tick(clock())["stalls"] == 1  # own-1
    clock.freeze(t0 + timedelta(days=2))
    assert sched.tick(clock())["stalls"] == 0  # never-1 never does
    assert [len(stalled_notes(core, creds, r)) for r in ("default-1", "own-1", "never-1")] == [
        1,
        1,
        0,
    ]


def race(*calls: Callable[[], int]) -> list[int]:
    """Run ``calls`` at once on their own threads; their results, sorted."""
    barrier = threading.Barrier(len(calls))
    done: list[int] = []
    errors: list[BaseException] = []

    def run(call: Callable[[], int]) -> None:
        try:
            barrier.wait(timeout=WAIT)
            done.append(call())
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=WAIT)
    assert errors == []
    return sorted(done)


def test_two_sweeps_without_leader_election_still_record_one_stall(
    core: Core, second_core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """Below the advisory lock: two sweeps that both run (no leader elected) meet at the
    run's row lock, and the one that comes second finds the episode recorded."""
    t0 = start(clock)
    for i in range(5):
        make_run(client, creds, f"raced-{i}", stall_after_seconds=10)
    now = clock.freeze(t0 + timedelta(seconds=11))
    results = race(lambda: stalls.sweep(core, now), lambda: stalls.sweep(second_core, now))
    assert sum(results) == 5
    for i in range(5):
        assert len(stalled_notes(core, creds, f"raced-{i}")) == 1
    history = rows(core, t.transitions, creds.tenant_id, kind="stall")
    assert len(history) == 5


def test_a_ledger_change_is_a_sign_of_life(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """A run busy declaring and moving operations is not silent: each ledger change
    restarts its stall clock, and one on a stalled run recovers it."""
    from tests.integration.test_operations import declare, move, op

    t0 = start(clock)
    sched = Scheduler(core)
    make_run(client, creds, "busy-1", stall_after_seconds=10)
    clock.freeze(t0 + timedelta(seconds=8))
    declare(client, creds, "busy-1", {"operations": [op("b-1"), op("b-2")]})
    clock.freeze(t0 + timedelta(seconds=16))
    move(client, creds, "busy-1", "b-1", "sent")
    clock.freeze(t0 + timedelta(seconds=25))
    assert sched.tick(clock())["stalls"] == 0  # 9 s since the last change
    clock.freeze(t0 + timedelta(seconds=27))
    assert sched.tick(clock())["stalls"] == 1  # 11 s: stalled
    (stalled,) = stalled_notes(core, creds, "busy-1")
    assert stalled["state"] == "open"
    move(client, creds, "busy-1", "b-1", "confirmed", evidence={"receipt_id": "r-1"})
    (stalled,) = stalled_notes(core, creds, "busy-1")
    assert stalled["state"] == "resolved"
    assert "run.recovered" in feed_types(core, creds, "busy-1")
