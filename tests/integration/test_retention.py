"""Retention (issue 9 §3; DESIGN §2 inv. 1, 6, 9, 12, 17): history past its period is
pruned in bounded batches by the scheduler's leader; what is still live is never pruned;
a tenant's override wins for that tenant only; the feed answers 410 with a snapshot for
cursors older than what is kept. Every test runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.app import build, create_app
from runbell.dispatch.scheduler import LOCK_IDS, Scheduler
from runbell.flows import retention, schedule_firing
from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, make_tenant
from tests.conftest import bearer, free_port, make_settings
from tests.peers import Dispatcher, WebhookReceiver

DAY = timedelta(days=1)
HISTORY = (
    "transitions",
    "notifications",
    "deliveries",
    "delivery_attempts",
    "receipts",
    "feed_events",
    "inbound_events",
    "idempotency_keys",
)


# --- helpers -------------------------------------------------------------------------


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def rows(core: Core, table: str, tenant_id: str, run_id: str | None = None) -> int:
    """Rows of ``table`` for one tenant (and one run, for tables that name it)."""
    where = "tenant_id = :t" + ("" if run_id is None else " AND run_id = :r")
    with core.db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE {where}"),
                {"t": tenant_id, "r": run_id},
            ).scalar_one()
        )


def history(core: Core, tenant_id: str) -> dict[str, int]:
    return {table: rows(core, table, tenant_id) for table in HISTORY}


def start_run(client: TestClient, creds: TenantCreds, run_id: str, **body: Any) -> None:
    ok(
        client.put(
            f"/v1/runs/{run_id}",
            json={"owner": creds.owner_email, "state": "working", **body},
            headers=bearer(creds.runtime_key),
        ),
        201,
    )


def signal(client: TestClient, creds: TenantCreds, run_id: str, event_id: str, state: str) -> Any:
    return ok(
        client.post(
            f"/v1/runs/{run_id}/signals",
            json={"event_id": event_id, "state": state},
            headers=bearer(creds.runtime_key),
        )
    )


def finished(client: TestClient, creds: TenantCreds, run_id: str) -> str:
    """A run created working that completes with a notification; returns its id."""
    start_run(client, creds, run_id, notify_on_complete=True)
    answer = signal(client, creds, run_id, f"{run_id}-done", "completed")
    assert answer["outcome"] == "applied", answer
    (note,) = answer["notifications"]
    return str(note["id"])


def ack(client: TestClient, creds: TenantCreds, note_id: str) -> None:
    headers = {**bearer(creds.owner_token), "Idempotency-Key": f"ack-{note_id}"}
    ok(client.post(f"/v1/notifications/{note_id}/ack", headers=headers))


def receipt(client: TestClient, creds: TenantCreds, note_id: str) -> None:
    ok(
        client.post(
            f"/v1/notifications/{note_id}/receipts",
            json={"kind": "opened", "channel": "inbox"},
            headers=bearer(creds.owner_token),
        ),
        201,
    )


def drain(core: Core, clock: Clock) -> None:
    """Send everything due now with the real worker (no sleeping: the clock is frozen)."""
    with Dispatcher(core, clock) as d:
        while d.tick():
            pass


def closed_history(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds, run_id: str
) -> str:
    """A finished run whose notification was delivered, opened and acknowledged: every
    history table gets rows, and none of them is still needed."""
    note = finished(client, creds, run_id)
    drain(core, clock)
    receipt(client, creds, note)
    ack(client, creds, note)
    return note


def done_runs(client: TestClient, creds: TenantCreds, clock: Clock, n: int) -> None:
    """``n`` finished runs, alerts acknowledged, each transition a second after the last
    (a batch ends at an instant, so distinct ages make batch sizes exact)."""
    for i in range(n):
        start_run(client, creds, f"r{i}", notify_on_complete=True)
        clock.advance(1)
        (note,) = signal(client, creds, f"r{i}", f"r{i}-end", "completed")["notifications"]
        ack(client, creds, note["id"])
        clock.advance(1)


@pytest.fixture
def receiver(client: TestClient, creds: TenantCreds) -> Iterator[WebhookReceiver]:
    """A tenant webhook endpoint on a real local receiver: deliveries with attempts."""
    with WebhookReceiver() as rx:
        body = ok(
            client.post(
                "/v1/webhook-endpoints",
                json={"url": rx.url(), "event_types": ["run.finished"]},
                headers=bearer(creds.admin_key),
            ),
            201,
        )
        rx.secrets = [body["secret"]]
        yield rx


class Statements:
    """Counts the DELETE statements an engine runs on one table, and their row counts."""

    def __init__(self, engine: sa.Engine, table: str) -> None:
        self.engine, self.prefix, self.rowcounts = engine, f"DELETE FROM {table} ", []
        sa.event.listen(engine, "after_cursor_execute", self._seen)

    def _seen(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(self.prefix):
            self.rowcounts.append(cursor.rowcount)

    def close(self) -> None:
        sa.event.remove(self.engine, "after_cursor_execute", self._seen)


# --- what goes and what stays ------------------------------------------------------------


def test_history_past_its_period_is_pruned_and_recent_history_kept(
    client: TestClient,
    core: Core,
    clock: Clock,
    creds: TenantCreds,
    receiver: WebhookReceiver,
) -> None:
    """Every history table loses the rows past retention, keeps the recent ones, and the
    run rows themselves stay (their versions keep later signals in order)."""
    clock.freeze()
    closed_history(client, core, clock, creds, "old")
    old = history(core, creds.tenant_id)
    assert all(old.values()), old  # every table has something to prune
    clock.advance(100 * DAY.total_seconds())  # past every default period
    closed_history(client, core, clock, creds, "new")
    both = history(core, creds.tenant_id)

    report = retention.run(core, clock())

    after = history(core, creds.tenant_id)
    assert after == {table: both[table] - old[table] for table in HISTORY}
    assert all(after.values()), after  # the new run's history is all still there
    assert {t: report.counts[t] for t in HISTORY} == old
    assert rows(core, "transitions", creds.tenant_id, "old") == 0
    run = ok(client.get("/v1/runs/old", headers=bearer(creds.runtime_key)))
    assert run["state"] == "completed"
    # Nothing left to do: a second pass prunes nothing.
    assert retention.run(core, clock()).total == 0


def test_dry_run_counts_without_deleting(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    clock.freeze()
    closed_history(client, core, clock, creds, "old")
    clock.advance(100 * DAY.total_seconds())
    before = history(core, creds.tenant_id)
    report = retention.run(core, clock(), dry_run=True)
    assert report.dry_run and report.counts["transitions"] == 2  # created, completed
    assert report.counts["feed_events"] == before["feed_events"]
    assert history(core, creds.tenant_id) == before


def test_an_open_notification_keeps_itself_its_deliveries_receipts_and_run_history(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """Invariant 6: an unacknowledged, unexpired notification is live, whatever its age."""
    clock.freeze()
    note = finished(client, creds, "unread")
    drain(core, clock)
    receipt(client, creds, note)
    clock.advance(100 * DAY.total_seconds())
    kept = {t: rows(core, t, creds.tenant_id) for t in ("notifications", "deliveries", "receipts")}
    assert all(kept.values())

    retention.run(core, clock())

    for table, count in kept.items():
        assert rows(core, table, creds.tenant_id) == count, table
    assert rows(core, "transitions", creds.tenant_id, "unread") == 2
    got = ok(client.get(f"/v1/notifications/{note}", headers=bearer(creds.owner_token)))
    assert got["state"] == "open"
    # Once acknowledged it ages out like any other.
    ack(client, creds, note)
    clock.advance(100 * DAY.total_seconds())
    retention.run(core, clock())
    assert rows(core, "notifications", creds.tenant_id) == 0


def test_a_pending_delivery_and_its_attempts_are_kept(
    client: TestClient,
    core: Core,
    clock: Clock,
    creds: TenantCreds,
    receiver: WebhookReceiver,
) -> None:
    """A message still being retried is never pruned, nor the attempts it has made."""
    clock.freeze()
    receiver.default_status = 503
    note = finished(client, creds, "failing-hook")
    drain(core, clock)  # the webhook answers 503: retry_scheduled, one attempt
    ack(client, creds, note)
    clock.advance(100 * DAY.total_seconds())

    retention.run(core, clock())

    with core.db.engine.connect() as conn:
        left = conn.execute(
            sa.text("SELECT status, channel FROM deliveries WHERE tenant_id = :t"),
            {"t": creds.tenant_id},
        ).all()
    assert [tuple(r) for r in left] == [("retry_scheduled", "webhook")]
    assert rows(core, "delivery_attempts", creds.tenant_id) == 1
    assert rows(core, "notifications", creds.tenant_id) == 0  # its alert went: acknowledged


def test_a_message_never_tried_yet_is_kept(
    client: TestClient,
    core: Core,
    clock: Clock,
    creds: TenantCreds,
    receiver: WebhookReceiver,
) -> None:
    """A queued tenant-webhook message (no worker ran: no attempt) is never pruned."""
    clock.freeze()
    ack(client, creds, finished(client, creds, "queued-hook"))
    clock.advance(100 * DAY.total_seconds())

    retention.run(core, clock())

    with core.db.engine.connect() as conn:
        left = conn.execute(
            sa.text("SELECT status, channel FROM deliveries WHERE tenant_id = :t"),
            {"t": creds.tenant_id},
        ).all()
    assert [tuple(r) for r in left] == [("queued", "webhook")]


def test_a_pending_input_request_keeps_its_notification(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """Invariant 9: an open request still answerable keeps the alert it links to, even
    once that alert was acknowledged, and the run's history (the run is not terminal)."""
    clock.freeze()
    start_run(client, creds, "asks")
    opened = ok(
        client.post(
            "/v1/runs/asks/input-requests",
            json={"input_request_id": "q1", "kind": "approval", "summary": "Ship it?"},
            headers=bearer(creds.runtime_key),
        ),
        201,
    )
    (note,) = opened["notifications"]
    ack(client, creds, note["id"])
    clock.advance(100 * DAY.total_seconds())

    retention.run(core, clock())

    assert rows(core, "notifications", creds.tenant_id) == 1
    assert rows(core, "transitions", creds.tenant_id, "asks") >= 2
    r = ok(client.get("/v1/input-requests/q1", headers=bearer(creds.owner_token)))
    assert r["input_request"]["state"] == "pending"


def test_a_run_that_is_not_terminal_keeps_its_transitions(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """Only a finished run's history goes; a long-running one keeps all of its own."""
    clock.freeze()
    start_run(client, creds, "long")
    note = finished(client, creds, "done")
    ack(client, creds, note)  # an open alert would keep the run's history (tested above)
    clock.advance(100 * DAY.total_seconds())

    retention.run(core, clock())

    assert rows(core, "transitions", creds.tenant_id, "long") == 1
    assert rows(core, "transitions", creds.tenant_id, "done") == 0


def test_inbound_dedupe_holds_for_its_whole_window(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """A retried signal within RUNBELL_INBOUND_RETENTION_S is still a duplicate (inv. 1)
    after pruning; only past it is the event id forgotten."""
    clock.freeze()
    start_run(client, creds, "r")
    signal(client, creds, "r", "e1", "working")
    window = core.settings.inbound_retention_s
    clock.advance(window - 3600)
    retention.run(core, clock())
    assert signal(client, creds, "r", "e1", "working")["outcome"] == "duplicate"
    clock.advance(2 * 3600)
    assert retention.run(core, clock()).counts["inbound_events"] == 1
    assert signal(client, creds, "r", "e1", "working")["outcome"] != "duplicate"


def test_an_open_mismatch_is_kept(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """Invariant 3: an advisory claim still being re-checked stays, whatever its age."""
    from tests.integration.test_reconcile import advisory_source, claim
    from tests.integration.test_reconcile import start_run as start_advised

    clock.freeze()
    closed = f"http://127.0.0.1:{free_port()}/runs/{{run_id}}"  # the runtime is down
    _, auth = advisory_source(client, core, creds, closed)
    start_advised(client, auth, creds)
    assert claim(client, auth, "e1", "completed")["outcome"] == "mismatch"
    clock.advance(100 * DAY.total_seconds())

    retention.run(core, clock())

    assert rows(core, "mismatches", creds.tenant_id) == 1


# --- batches ------------------------------------------------------------------------------


def test_pruning_goes_in_bounded_batches(tmp_path: Path, db_url: str, clock: Clock) -> None:
    """With 3 rows per batch, 10 old transitions go in 4 statements of at most 3 rows."""
    core = build(make_settings(tmp_path, db_url, retention_batch=3), clock=clock, migrate=False)
    try:
        creds = make_tenant(core)
        with TestClient(create_app(core, bridge=False)) as client:
            clock.freeze()
            for i in range(5):  # distinct ages: a batch ends at an instant
                start_run(client, creds, f"r{i}", notify_on_complete=True)
                clock.advance(1)
                (note,) = signal(client, creds, f"r{i}", f"r{i}-end", "completed")["notifications"]
                ack(client, creds, note["id"])
                clock.advance(1)
        clock.advance(100 * DAY.total_seconds())
        seen = Statements(core.db.engine, "transitions")
        try:
            report = retention.run(core, clock())
        finally:
            seen.close()
        assert report.counts["transitions"] == 10
        assert seen.rowcounts == [3, 3, 3, 1]
        assert rows(core, "transitions", creds.tenant_id) == 0
    finally:
        core.db.dispose()


def test_the_scheduler_sweep_stops_after_its_batch_budget(
    tmp_path: Path, db_url: str, clock: Clock
) -> None:
    """A sweep does at most ``max_batches`` per table; the next one carries on."""
    core = build(make_settings(tmp_path, db_url, retention_batch=2), clock=clock, migrate=False)
    try:
        creds = make_tenant(core)
        with TestClient(create_app(core, bridge=False)) as client:
            clock.freeze()
            done_runs(client, creds, clock, 3)
        now = clock.advance(100 * DAY.total_seconds())
        retention.sweep(core, now, max_batches=1)
        assert rows(core, "transitions", creds.tenant_id) == 4
        later = now + timedelta(seconds=core.settings.retention_interval_s)
        retention.sweep(core, later, max_batches=1)
        assert rows(core, "transitions", creds.tenant_id) == 2
    finally:
        core.db.dispose()


# --- tenants ------------------------------------------------------------------------------


def test_a_tenant_override_wins_for_that_tenant_only(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """acme keeps notifications longer and its feed shorter than the defaults; beta, with
    the defaults, is pruned by the defaults — neither tenant's rows move the other's."""
    beta = make_tenant(core, "beta")
    retention.set_override(core, creds.tenant_id, {"notifications": 200, "feed_events": 1})
    clock.freeze()
    closed_history(client, core, clock, creds, "a-old")
    closed_history(client, core, clock, beta, "b-old")

    clock.advance(2 * DAY.total_seconds())  # past acme's 1-day feed, inside the 7-day default
    retention.run(core, clock())
    assert rows(core, "feed_events", creds.tenant_id) == 0
    assert rows(core, "feed_events", beta.tenant_id) > 0

    clock.advance(98 * DAY.total_seconds())  # past the 90-day default, inside acme's 200
    retention.run(core, clock())
    assert rows(core, "notifications", creds.tenant_id) == 1
    assert rows(core, "notifications", beta.tenant_id) == 0
    periods = retention.periods(core, creds.tenant_id)
    assert periods["notifications"] == (200, "tenant")
    assert periods["deliveries"] == (30, "default")


def test_a_one_tenant_run_touches_no_other_tenant(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    beta = make_tenant(core, "beta")
    clock.freeze()
    closed_history(client, core, clock, creds, "a")
    closed_history(client, core, clock, beta, "b")
    clock.advance(100 * DAY.total_seconds())
    untouched = history(core, beta.tenant_id)
    retention.run(core, clock(), tenant_id=creds.tenant_id)
    assert history(core, beta.tenant_id) == untouched
    assert rows(core, "notifications", creds.tenant_id) == 0


def test_the_policy_api_reads_and_overrides_retention(
    client: TestClient, creds: TenantCreds
) -> None:
    """PATCH /v1/policy/retention: days per table, null drops one; bad input is a 422
    problem naming the table, and nothing is stored."""
    admin = bearer(creds.admin_key)
    got = ok(client.get("/v1/policy/retention", headers=admin))
    assert got["tables"]["notifications"] == {"days": 90, "source": "default"}
    set_ = ok(client.patch("/v1/policy/retention", json={"notifications": 180}, headers=admin))
    assert set_["tables"]["notifications"] == {"days": 180, "source": "tenant"}
    for bad, field in (
        ({"inbound_events": 1}, "inbound_events"),  # under the dedupe window
        ({"nonsense": 5}, "nonsense"),
        ({"operator_events": 5}, "operator_events"),  # the operator's, not a tenant's
        ({"receipts": 0}, "receipts"),
    ):
        r = client.patch("/v1/policy/retention", json=bad, headers=admin)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["field"] == field
    r = client.patch("/v1/policy/retention", json={"receipts": "ten"}, headers=admin)
    assert r.status_code == 422
    cleared = ok(client.patch("/v1/policy/retention", json={"notifications": None}, headers=admin))
    assert cleared["tables"]["notifications"] == {"days": 90, "source": "default"}
    r = client.patch(
        "/v1/policy/retention", json={"notifications": 5}, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 403


# --- the feed ----------------------------------------------------------------------------


def test_a_pruned_cursor_answers_410_with_a_snapshot_and_the_rest_is_whole(
    tmp_path: Path, db_url: str, clock: Clock
) -> None:
    """Invariant 17 after batched pruning: an old cursor is a 410 whose
    oldest_available_cursor resumes with every retained event; nothing younger than
    retention went, even in the batch that crossed the boundary."""
    core = build(make_settings(tmp_path, db_url, retention_batch=3), clock=clock, migrate=False)
    try:
        creds = make_tenant(core)
        admin = bearer(creds.admin_key)
        with TestClient(create_app(core, bridge=False)) as client:
            clock.freeze()
            for i in range(3):
                finished(client, creds, f"old{i}")
            old = ok(client.get("/v1/events", params={"after": "earliest"}, headers=admin))
            clock.advance(core.settings.feed_retention_s + 60)
            finished(client, creds, "new")
            start_run(client, creds, "active")
            everything = ok(client.get("/v1/events", params={"after": "earliest"}, headers=admin))
            kept = everything["events"][len(old["events"]) :]

            assert retention.run(core, clock()).counts["feed_events"] == len(old["events"])

            r = client.get("/v1/events", params={"after": old["events"][0]["id"]}, headers=admin)
            assert r.status_code == 410
            assert r.headers["content-type"].startswith("application/problem+json")
            problem = r.json()
            assert problem["oldest_available_cursor"] == old["events"][-1]["id"]
            assert problem["head_cursor"] == everything["events"][-1]["id"]
            resumed = ok(
                client.get(
                    "/v1/events",
                    params={"after": problem["oldest_available_cursor"]},
                    headers=admin,
                )
            )
            assert resumed["events"] == kept
            snap = ok(client.get(problem["snapshot_url"], headers=bearer(creds.owner_token)))
            assert snap["head_cursor"] == problem["head_cursor"]
            assert [run["run_id"] for run in snap["runs"]] == ["active"]
            assert {n["run_id"] for n in snap["notifications"]} >= {"new"}
    finally:
        core.db.dispose()


# --- the scheduler -------------------------------------------------------------------------


def test_two_schedulers_prune_once(
    tmp_path: Path,
    db_url: str,
    clock: Clock,
    core: Core,
    creds: TenantCreds,
    client: TestClient,
) -> None:
    """Two processes' schedulers ticking together: one sweep prunes, the other runs no
    prune statement at all (the leader records when it last ran)."""
    other = build(make_settings(tmp_path, db_url), clock=clock, migrate=False)
    try:
        clock.freeze()
        closed_history(client, core, clock, creds, "old")
        now = clock.advance(100 * DAY.total_seconds())
        first = Statements(core.db.engine, "transitions")
        second = Statements(other.db.engine, "transitions")
        try:
            a = Scheduler(core).tick(now)
            b = Scheduler(other).tick(now + timedelta(seconds=1))
        finally:
            first.close()
            second.close()
        assert a["retention"] > 0 and b["retention"] == 0
        assert first.rowcounts == [2] and second.rowcounts == []
    finally:
        other.db.dispose()


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_scheduler_that_is_not_the_leader_skips_retention(
    core: Core, clock: Clock, client: TestClient, creds: TenantCreds
) -> None:
    """While another process holds the retention lock (mid-sweep), this one prunes nothing."""
    clock.freeze()
    closed_history(client, core, clock, creds, "old")
    now = clock.advance(100 * DAY.total_seconds())
    with core.db.engine.connect() as holder:
        assert holder.execute(
            sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": LOCK_IDS["retention"]}
        ).scalar()
        seen = Statements(core.db.engine, "transitions")
        try:
            done = Scheduler(core).tick(now)
        finally:
            seen.close()
        holder.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_IDS["retention"]})
    assert done["retention"] == 0 and seen.rowcounts == []
    assert rows(core, "transitions", creds.tenant_id) == 2


def test_fired_occurrences_of_a_schedule_past_their_period_are_pruned(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """A webhook schedule's firings (schedule_firings) go with the tenant's period, like
    any other history: an old occurrence is pruned, the recent one and the schedule stay;
    a tenant that keeps them longer keeps them, and another tenant's are never touched."""
    beta = make_tenant(core, "beta")
    nine = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
    clock.freeze(nine - timedelta(minutes=2))
    with WebhookReceiver() as rx:
        made = {}
        for who in (creds, beta):
            body = {
                "instruction": "Reconcile yesterday's invoices",
                "cadence": "0 9 * * *",
                "mode": "webhook",
                "url": rx.url("/start"),
            }
            made[who.tenant_id] = ok(
                client.post("/v1/schedules", json=body, headers=bearer(who.owner_token)), 201
            )
        rx.secrets = [m["secret"] for m in made.values()]
        clock.freeze(nine + timedelta(seconds=30))
        assert schedule_firing.sweep(core, clock()) == 2  # one occurrence each
        clock.advance(100 * DAY.total_seconds())  # past the 90-day default
        assert schedule_firing.sweep(core, clock()) == 2  # the latest missed one, each
    assert rows(core, "schedule_firings", creds.tenant_id) == 2

    # acme keeps its firings 200 days: nothing of its goes; beta's old one does.
    retention.set_override(core, creds.tenant_id, {"schedule_firings": 200})
    assert retention.run(core, clock()).counts["schedule_firings"] == 1
    assert rows(core, "schedule_firings", creds.tenant_id) == 2
    assert rows(core, "schedule_firings", beta.tenant_id) == 1
    assert retention.periods(core, creds.tenant_id)["schedule_firings"] == (200, "tenant")

    # Back to the default: acme's old occurrence goes, its recent one and the schedule stay.
    retention.set_override(core, creds.tenant_id, {"schedule_firings": None})
    assert retention.run(core, clock(), dry_run=True).counts["schedule_firings"] == 1
    assert retention.run(core, clock()).counts["schedule_firings"] == 1
    sched_id = made[creds.tenant_id]["id"]
    shown = ok(client.get(f"/v1/schedules/{sched_id}", headers=bearer(creds.owner_token)))
    assert [f["due_at"] for f in shown["firings"]] == [
        (nine + timedelta(days=100)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ]
    assert retention.run(core, clock()).counts["schedule_firings"] == 0


# --- plans --------------------------------------------------------------------------------

PRUNE_INDEX = {
    "inbound_events": "ix_inbound_events_tenant_received",
    "idempotency_keys": "ix_idempotency_keys_tenant_created",
    "receipts": "ix_receipts_tenant_at",
    "delivery_attempts": "ix_delivery_attempts_tenant_started",
    "deliveries": "ix_deliveries_tenant_updated",
    "notifications": "ix_notifications_tenant_closed",
    "transitions": "ix_transitions_tenant_at",
    "mismatches": "ix_mismatches_tenant_created",
    "schedule_firings": "ix_schedule_firings_tenant_created",
    "operator_events": "ix_operator_events_created",
}
HISTORY_ROWS = 20_000
# Old, finished history (i seconds before now), shaped as the code writes it.
SEED = (
    """INSERT INTO runs (tenant_id, run_id, owner_user_id, state, version, created_at,
         updated_at) SELECT :t, 'r' || i, :u, 'completed', 2, now() - i * :s, now() - i * :s""",
    """INSERT INTO transitions (tenant_id, run_id, version, kind, to_state, at)
         SELECT :t, 'r' || i, 2, 'state', 'completed', now() - i * :s""",
    """INSERT INTO notifications (id, tenant_id, recipient_user_id, run_id,
         transition_version, attention_type, urgency, decision, rule_id, inputs, summary,
         state, closed_at, created_at) SELECT 'n' || i, :t, :u, 'r' || i, 2, 'completed',
         'low', 'inbox', 'x', '{}', 'done', 'acknowledged', now() - i * :s, now() - i * :s""",
    """INSERT INTO deliveries (id, tenant_id, notification_id, channel, destination, status,
         created_at, updated_at) SELECT 'd' || i, :t, 'n' || i, 'inbox', :u, 'accepted',
         now() - i * :s, now() - i * :s""",
    """INSERT INTO delivery_attempts (id, tenant_id, delivery_id, attempt_no, started_at,
         outcome) SELECT 'a' || i, :t, 'd' || i, 1, now() - i * :s, 'accepted'""",
    """INSERT INTO receipts (id, tenant_id, notification_id, kind, at)
         SELECT 'c' || i, :t, 'n' || i, 'opened', now() - i * :s""",
    """INSERT INTO inbound_events (tenant_id, source_id, event_id, run_id, claimed_state,
         outcome, received_at) SELECT :t, 's', 'e' || i, 'r' || i, 'completed', 'applied',
         now() - i * :s""",
    """INSERT INTO idempotency_keys (tenant_id, principal, key, request_hash, status_code,
         response, created_at) SELECT :t, 'p', 'k' || i, 'h', 200, '{}', now() - i * :s""",
    """INSERT INTO mismatches (id, tenant_id, run_id, source_id, event_id, claimed, status,
         created_at) SELECT 'm' || i, :t, 'r' || i, 's', 'e' || i, '{}', 'resolved',
         now() - i * :s""",
    """INSERT INTO operator_events (id, tenant_id, kind, detail, created_at)
         SELECT 'o' || i, :t, 'k', '{}', now() - i * :s""",
    """INSERT INTO schedule_firings (tenant_id, schedule_id, due_at, webhook_id,
         instruction_version, authority_version, status, status_code, created_at,
         settled_at) SELECT :t, 'sch', now() - i * :s, 'w' || i, 1, 1, 'sent', 200,
         now() - i * :s, now() - i * :s""",
    """INSERT INTO feed_events (tenant_id, seq, type, data, created_at)
         SELECT :t, i, 'run.transitioned', '{}', now() - (:n - i) * :s""",
    """INSERT INTO input_requests (tenant_id, id, run_id, kind, summary, version,
         run_version, state, request_hash, created_at) SELECT :t, 'q' || i, 'r' || i,
         'approval', 'ok?', 1, 1, 'answered', 'h', now() - i * :s""",
)


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_every_prune_batch_walks_an_index_on_postgres(core: Core, creds: TenantCreds) -> None:
    """With 20,000 rows of old history in every table (analyzed), each batch's two
    statements walk the table's (tenant, age) index and reach every guard through an
    index: no sequential scan of any history table, so a batch costs the same at any
    history size."""
    from runbell.store import retention as store

    with core.db.engine.begin() as conn:
        for statement in SEED:
            conn.execute(
                sa.text(statement + f" FROM generate_series(1, {HISTORY_ROWS}) AS g(i)"),
                {
                    "t": creds.tenant_id,
                    "u": creds.owner_id,
                    "s": timedelta(seconds=1),
                    "n": HISTORY_ROWS,
                },
            )
    with core.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE")
        conn.execute(
            sa.text("UPDATE tenants SET feed_seq = :n WHERE id = :t"),
            {"n": HISTORY_ROWS, "t": creds.tenant_id},
        )
    seeded = {"runs", "input_requests", "feed_events", *PRUNE_INDEX}

    def plan(conn: sa.Connection, stmt: Any) -> str:
        compiled = stmt.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
        found = conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params)
        return "\n".join(r[0] for r in found)

    cutoff = core.db.clock()  # all of it is old: the first sweep over a long history
    wrong: list[str] = []
    with core.db.engine.connect() as conn:
        for table, index in PRUNE_INDEX.items():
            tenant = None if table == "operator_events" else creds.tenant_id
            boundary = store.boundary_statement(table, tenant, None, cutoff, 1000)
            through = conn.execute(boundary).scalar()
            assert through is not None
            for shown in (
                plan(conn, boundary),
                plan(conn, store.prune_statement(table, tenant, cutoff, None, through)),
            ):
                scanned = [t for t in seeded if f"Seq Scan on {t} " in shown]
                if index not in shown or scanned:
                    wrong.append(f"{table} (scans {scanned}):\n{shown}")
        shown = plan(conn, store.feed_batch_statement(creds.tenant_id, 0, 1000))
        if "pk_feed_events" not in shown or "Seq Scan" in shown:
            wrong.append(f"feed_events:\n{shown}")
    assert not wrong, "\n\n".join(wrong)
