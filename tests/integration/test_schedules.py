"""Scheduled work (issue 18 item 6): a schedule's standing instruction is versioned and
every version kept; a run started under it records the instruction version and the
authority in force; pausing or revoking stops new runs (409) and firing; a run whose
authority was later revoked is flagged in its view and on its page; a webhook schedule
fires each occurrence once, signed, at a real local receiver, however often the sweep
runs. Every test runs on SQLite and PostgreSQL with the test clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from runbell.app import build
from runbell.config import Settings
from runbell.dispatch.scheduler import Scheduler
from runbell.flows import schedule_firing
from runbell.flows.context import Core
from runbell.signatures import verify_signed
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import bearer
from tests.integration.test_web import sign_in
from tests.peers import WebhookReceiver
from tests.timeouts import WAIT

START = datetime(2026, 6, 1, 8, 58, tzinfo=UTC)
NINE = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
INSTRUCTION = "Every weekday at 9: reconcile yesterday's invoices against the ledger"


@pytest.fixture
def frozen(clock: Clock) -> Clock:
    clock.freeze(START)
    return clock


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as rx:
        yield rx


def create(client: TestClient, token: str, **fields: Any) -> httpx.Response:
    body = {
        "name": "invoice reconciliation",
        "instruction": INSTRUCTION,
        "cadence": "0 9 * * 1-5",
        "authority": {"users": ["lead@acme.test"]},
        **fields,
    }
    return client.post("/v1/schedules", json=body, headers=bearer(token))


def start_run(
    client: TestClient, creds: TenantCreds, run_id: str, schedule_id: str, **fields: Any
) -> httpx.Response:
    body = {"state": "working", "schedule": {"id": schedule_id}, **fields}
    return client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))


def act(client: TestClient, token: str, schedule_id: str, action: str) -> httpx.Response:
    return client.post(f"/v1/schedules/{schedule_id}/{action}", headers=bearer(token))


@pytest.fixture(autouse=True)
def lead(core: Core, creds: TenantCreds) -> tuple[str, str]:
    """The person the schedules' authority names."""
    return add_user(core, creds.tenant_id, "lead@acme.test")


# --- versions, and what a run records ----------------------------------------------------


def test_versions_are_kept_and_each_run_records_the_version_in_force(
    client: TestClient, creds: TenantCreds
) -> None:
    made = create(client, creds.owner_token)
    assert made.status_code == 201, made.text
    sched = made.json()
    assert sched["state"] == "active" and sched["mode"] == "record_only"
    assert sched["owner"] == creds.owner_id  # a person creating one owns it
    assert sched["instruction"]["version"] == 1
    assert sched["next_fire_at"] is None  # record only: Runbell fires nothing
    assert "secret" not in sched

    first = start_run(client, creds, "inv-1", sched["id"])
    assert first.status_code == 201, first.text
    run = first.json()
    # The schedule's owner and authority stand in for what the runtime did not name.
    assert run["owner"] == creds.owner_id
    assert run["authority"] == {"users": ["lead@acme.test"]}
    assert run["schedule"]["id"] == sched["id"]
    assert run["schedule"]["instruction_version"] == 1
    assert run["schedule"]["authority_version"] == 1
    assert run["schedule"]["authority"] == {"users": ["lead@acme.test"]}
    assert run["schedule"]["authority_revoked"] is False

    edited = client.patch(
        f"/v1/schedules/{sched['id']}",
        json={"instruction": "Reconcile invoices and flag any over 10k"},
        headers=bearer(creds.owner_token),
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["instruction"]["version"] == 2
    assert [v["version"] for v in edited.json()["versions"]] == [2, 1]
    assert edited.json()["versions"][1]["text"] == INSTRUCTION  # the old text is kept
    assert edited.json()["versions"][0]["created_by"]["user_id"] == creds.owner_id

    second = start_run(client, creds, "inv-2", sched["id"])
    assert second.status_code == 201, second.text
    assert second.json()["schedule"]["instruction_version"] == 2
    # The first run still says what it started under; a new instruction is not a
    # change of authority, so it is not flagged.
    again = client.get("/v1/runs/inv-1", headers=bearer(creds.runtime_key)).json()
    assert again["schedule"]["instruction_version"] == 1
    assert again["schedule"]["authority_revoked"] is False

    # A run that exists keeps its schedule: naming another is refused.
    other = create(client, creds.owner_token, name="other").json()
    moved = start_run(client, creds, "inv-2", other["id"])
    assert moved.status_code == 422 and moved.json()["field"] == "schedule.id", moved.text


def test_bad_cron_is_a_422_naming_the_field(client: TestClient, creds: TenantCreds) -> None:
    for cadence in ("61 * * * *", "every morning", "0 9 * * * *", "* * *", "0 0 31 2 *"):
        r = create(client, creds.admin_key, owner=creds.owner_email, cadence=cadence)
        assert r.status_code == 422, (cadence, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["field"] == "cadence", r.text
    made = create(client, creds.admin_key, owner=creds.owner_email, cadence="@hourly")
    assert made.status_code == 201, made.text
    bad = client.patch(
        f"/v1/schedules/{made.json()['id']}",
        json={"cadence": "0 25 * * *", "instruction": "never stored"},
        headers=bearer(creds.admin_key),
    )
    assert bad.status_code == 422 and bad.json()["field"] == "cadence", bad.text
    kept = client.get(f"/v1/schedules/{made.json()['id']}", headers=bearer(creds.admin_key))
    assert kept.json()["cadence"] == "@hourly"
    assert [v["version"] for v in kept.json()["versions"]] == [1]  # nothing partial
    listed = client.get("/v1/schedules", headers=bearer(creds.admin_key)).json()
    assert [s["id"] for s in listed["schedules"]] == [made.json()["id"]]


def test_modes_and_urls_are_checked_on_create(client: TestClient, creds: TenantCreds) -> None:
    r = create(client, creds.owner_token, url="https://runtime.example.com/start")
    assert r.status_code == 422 and r.json()["field"] == "url", r.text
    r = create(client, creds.owner_token, mode="webhook")
    assert r.status_code == 422 and r.json()["field"] == "url", r.text
    r = create(client, creds.owner_token, mode="webhook", url="http://10.1.2.3/start")
    assert r.status_code == 422 and r.json()["field"] == "url", r.text
    assert "unsafe-destination" in r.json()["type"], r.text
    r = create(client, creds.owner_token, authority={"users": ["stranger@else.test"]})
    assert r.status_code == 422 and r.json()["field"] == "authority.users", r.text
    assert client.get("/v1/schedules", headers=bearer(creds.admin_key)).json()["schedules"] == []


def test_who_may_see_and_change_a_schedule(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    _, member_token = add_user(core, creds.tenant_id, "member@acme.test")
    # A runtime key starts runs under schedules; it does not grant authority.
    refused = create(client, creds.runtime_key, owner=creds.owner_email)
    assert refused.status_code == 403, refused.text
    # A member may not make one for someone else.
    assert create(client, member_token, owner=creds.owner_email).status_code == 403
    mine = create(client, member_token).json()
    theirs = create(client, creds.owner_token).json()
    listed = client.get("/v1/schedules", headers=bearer(member_token)).json()["schedules"]
    assert [s["id"] for s in listed] == [mine["id"]]
    seen = client.get(f"/v1/schedules/{theirs['id']}", headers=bearer(member_token))
    assert seen.status_code == 404
    assert act(client, member_token, theirs["id"], "pause").status_code == 404
    assert act(client, creds.runtime_key, mine["id"], "pause").status_code == 403
    assert act(client, creds.admin_key, mine["id"], "pause").status_code == 200
    # Another tenant's schedule does not exist for this one, not even to start a run.
    other = make_tenant(core, "globex")
    alien = create(client, other.owner_token, authority=None).json()
    assert (
        client.get(f"/v1/schedules/{alien['id']}", headers=bearer(creds.admin_key)).status_code
        == 404
    )
    r = start_run(client, creds, "alien-1", alien["id"])
    assert r.status_code == 422 and r.json()["field"] == "schedule.id", r.text


# --- pause and revoke ---------------------------------------------------------------------


def test_pause_and_revoke_stop_new_runs(client: TestClient, creds: TenantCreds) -> None:
    sched = create(client, creds.owner_token).json()
    paused = act(client, creds.owner_token, sched["id"], "pause")
    assert paused.status_code == 200 and paused.json()["state"] == "paused", paused.text
    assert act(client, creds.owner_token, sched["id"], "pause").status_code == 200  # a retry

    r = start_run(client, creds, "nightly-1", sched["id"])
    assert r.status_code == 409, r.text
    assert "paused" in r.json()["detail"]
    assert client.get("/v1/runs/nightly-1", headers=bearer(creds.runtime_key)).status_code == 404

    assert act(client, creds.owner_token, sched["id"], "resume").json()["state"] == "active"
    assert start_run(client, creds, "nightly-1", sched["id"]).status_code == 201

    revoked = client.post(
        f"/v1/schedules/{sched['id']}/revoke",
        json={"reason": "the ledger moved to another system"},
        headers=bearer(creds.owner_token),
    )
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked", revoked.text
    assert revoked.json()["state_reason"] == "the ledger moved to another system"
    r = start_run(client, creds, "nightly-2", sched["id"])
    assert r.status_code == 409 and "revoked" in r.json()["detail"], r.text
    assert act(client, creds.owner_token, sched["id"], "resume").status_code == 409
    edit = client.patch(
        f"/v1/schedules/{sched['id']}",
        json={"instruction": "too late"},
        headers=bearer(creds.owner_token),
    )
    assert edit.status_code == 409, edit.text


def test_a_schedule_revoked_mid_run_flags_the_running_run(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    sched = create(client, creds.owner_token).json()
    assert start_run(client, creds, "mid-1", sched["id"]).status_code == 201
    assert start_run(client, creds, "mid-2", sched["id"]).status_code == 201

    # The authority changes: runs started under the old one are flagged, new ones are not.
    changed = client.patch(
        f"/v1/schedules/{sched['id']}",
        json={"authority": {"users": [creds.owner_email]}},
        headers=bearer(creds.owner_token),
    )
    assert changed.status_code == 200 and changed.json()["authority_version"] == 2
    view = client.get("/v1/runs/mid-1", headers=bearer(creds.runtime_key)).json()
    assert view["schedule"]["authority_revoked"] is True
    assert "authority changed" in view["schedule"]["authority_notice"]
    assert view["schedule"]["authority"] == {"users": ["lead@acme.test"]}  # as it started
    assert start_run(client, creds, "mid-3", sched["id"]).status_code == 201
    fresh = client.get("/v1/runs/mid-3", headers=bearer(creds.runtime_key)).json()
    assert fresh["schedule"]["authority_revoked"] is False
    assert fresh["schedule"]["authority_version"] == 2

    assert act(client, creds.owner_token, sched["id"], "revoke").status_code == 200
    for run_id in ("mid-2", "mid-3"):
        view = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.runtime_key)).json()
        assert view["state"] == "working"  # revoking stops new runs; it cancels nothing
        assert view["schedule"]["authority_revoked"] is True
        assert view["schedule"]["state"] == "revoked"
        assert "revoked" in view["schedule"]["authority_notice"]

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/runs/mid-3")
    assert page.status_code == 200, page.text
    assert 'id="run-schedule"' in page.text
    assert 'id="schedule-authority-revoked"' in page.text
    assert "the schedule that started this run was revoked" in page.text
    plain = client.put(
        "/v1/runs/plain-1", json={"owner": creds.owner_email}, headers=bearer(creds.runtime_key)
    )
    assert plain.status_code == 201 and plain.json()["schedule"] is None
    assert 'id="run-schedule"' not in client.get("/runs/plain-1").text


# --- firing ---------------------------------------------------------------------------------


def _webhook_schedule(
    client: TestClient, creds: TenantCreds, receiver: WebhookReceiver, **fields: Any
) -> dict[str, Any]:
    made = create(
        client,
        creds.owner_token,
        mode="webhook",
        url=receiver.url("/start"),
        cadence="0 9 * * *",
        **fields,
    )
    assert made.status_code == 201, made.text
    sched = dict(made.json())
    assert sched["secret"].startswith("whsec_")  # shown once
    receiver.secrets = [sched["secret"]]
    return sched


def test_a_webhook_schedule_fires_each_occurrence_once_signed(
    core: Core,
    settings: Settings,
    frozen: Clock,
    client: TestClient,
    creds: TenantCreds,
    receiver: WebhookReceiver,
) -> None:
    sched = _webhook_schedule(client, creds, receiver)
    assert sched["next_fire_at"] == "2026-06-01T09:00:00Z"
    shown = client.get(f"/v1/schedules/{sched['id']}", headers=bearer(creds.admin_key)).json()
    assert "secret" not in shown  # never again after creation

    assert schedule_firing.sweep(core, START + timedelta(minutes=1)) == 0  # not due yet
    assert receiver.requests == []

    now = NINE + timedelta(seconds=30)
    frozen.freeze(now)
    assert Scheduler(core).tick(now)["schedules"] == 1  # the scheduler runs the sweep
    assert schedule_firing.sweep(core, now) == 0  # a second sweep finds nothing due
    # A second process on the same database finds nothing either.
    other = build(settings, clock=frozen, migrate=False)
    try:
        assert schedule_firing.sweep(other, now) == 0
    finally:
        other.db.dispose()

    [request] = receiver.requests
    assert request.path == "/start"
    assert request.status == 200 and request.signed_by == [0]
    verify_signed(request.body, request.headers, [sched["secret"]], now=now)
    assert request.headers["webhook-id"] == f"msg_{sched['id']}_{int(NINE.timestamp())}"
    sent = request.json()
    assert sent["type"] == "schedule.due"
    assert sent["data"]["occurrence"] == "2026-06-01T09:00:00Z"
    assert sent["data"]["instruction"] == {"version": 1, "text": INSTRUCTION}
    assert sent["data"]["authority"]["version"] == 1
    assert sent["data"]["start_with"] == {"schedule": {"id": sched["id"]}}

    after = client.get(f"/v1/schedules/{sched['id']}", headers=bearer(creds.admin_key)).json()
    assert after["next_fire_at"] == "2026-06-02T09:00:00Z"
    [firing] = after["firings"]
    assert firing["status"] == "sent" and firing["status_code"] == 200
    assert firing["webhook_id"] == request.headers["webhook-id"]

    # The runtime does what it was asked: it starts a run naming the schedule.
    started = start_run(client, creds, "inv-0601", sched["id"])
    assert started.status_code == 201 and started.json()["schedule"]["instruction_version"] == 1

    # The next day's occurrence is a new one, under a new id.
    day2 = NINE + timedelta(days=1, seconds=5)
    assert schedule_firing.sweep(core, day2) == 1
    assert len(receiver.requests) == 2
    assert receiver.requests[1].headers["webhook-id"] != request.headers["webhook-id"]


def test_paused_revoked_and_record_only_schedules_fire_nothing(
    core: Core,
    frozen: Clock,
    client: TestClient,
    creds: TenantCreds,
    receiver: WebhookReceiver,
) -> None:
    webhook = _webhook_schedule(client, creds, receiver)
    create(client, creds.owner_token, cadence="* * * * *")  # record only: never fires
    assert act(client, creds.owner_token, webhook["id"], "pause").json()["next_fire_at"] is None
    assert schedule_firing.sweep(core, NINE + timedelta(hours=2)) == 0
    assert receiver.requests == []

    # Resuming fires from the next occurrence after now: nothing missed is sent late.
    frozen.freeze(NINE + timedelta(hours=3))
    resumed = act(client, creds.owner_token, webhook["id"], "resume").json()
    assert resumed["next_fire_at"] == "2026-06-02T09:00:00Z"
    assert schedule_firing.sweep(core, NINE + timedelta(hours=4)) == 0

    assert act(client, creds.owner_token, webhook["id"], "revoke").status_code == 200
    assert schedule_firing.sweep(core, NINE + timedelta(days=3)) == 0
    assert receiver.requests == []


def test_a_missed_stretch_fires_once_and_a_failure_is_recorded(
    core: Core,
    frozen: Clock,
    client: TestClient,
    creds: TenantCreds,
    receiver: WebhookReceiver,
) -> None:
    sched = _webhook_schedule(client, creds, receiver)
    receiver.respond_next(503)
    # Three days with nothing sweeping: one firing, for the latest occurrence.
    late = NINE + timedelta(days=2, hours=1)
    assert schedule_firing.sweep(core, late) == 1
    assert schedule_firing.sweep(core, late) == 0
    [request] = receiver.requests
    assert request.json()["data"]["occurrence"] == "2026-06-03T09:00:00Z"
    shown = client.get(f"/v1/schedules/{sched['id']}", headers=bearer(creds.admin_key)).json()
    [firing] = shown["firings"]
    assert firing["status"] == "failed" and firing["status_code"] == 503
    assert "503" in firing["error"]
    assert shown["next_fire_at"] == "2026-06-04T09:00:00Z"


def test_two_processes_sweeping_at_once_fire_an_occurrence_once(
    core: Core,
    settings: Settings,
    frozen: Clock,
    client: TestClient,
    creds: TenantCreds,
    receiver: WebhookReceiver,
) -> None:
    sched = _webhook_schedule(client, creds, receiver)
    other = build(settings, clock=frozen, migrate=False)
    now = NINE + timedelta(minutes=1)
    start = threading.Barrier(2)
    claimed: list[schedule_firing.Occurrence | None] = []

    def sweeper(c: Core) -> None:
        start.wait(WAIT)
        claimed.append(schedule_firing.claim(c, creds.tenant_id, sched["id"], now))

    try:
        threads = [threading.Thread(target=sweeper, args=(c,)) for c in (core, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
    finally:
        other.db.dispose()
    won = [c for c in claimed if c is not None]
    assert len(claimed) == 2 and len(won) == 1, claimed
    assert won[0].webhook_id == f"msg_{sched['id']}_{int(NINE.timestamp())}"
    shown = client.get(f"/v1/schedules/{sched['id']}", headers=bearer(creds.admin_key)).json()
    assert [f["status"] for f in shown["firings"]] == ["sending"]  # recorded before sending
    assert schedule_firing.send(core, won[0]) == "sent"
    assert len(receiver.requests) == 1


def test_a_create_retried_under_its_key_makes_one_schedule_and_replays_the_secret(
    client: TestClient, creds: TenantCreds, receiver: WebhookReceiver
) -> None:
    body = {
        "instruction": INSTRUCTION,
        "cadence": "0 9 * * *",
        "mode": "webhook",
        "url": receiver.url("/start"),
    }
    headers = {**bearer(creds.owner_token), "Idempotency-Key": "sched-1"}
    first = client.post("/v1/schedules", json=body, headers=headers)
    again = client.post("/v1/schedules", json=body, headers=headers)
    assert first.status_code == again.status_code == 201, again.text
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.content == first.content  # the secret too, byte for byte
    listed = client.get("/v1/schedules", headers=bearer(creds.admin_key)).json()["schedules"]
    assert [s["id"] for s in listed] == [first.json()["id"]]
    other = client.post("/v1/schedules", json={**body, "cadence": "@hourly"}, headers=headers)
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key", other.text
