"""Cancellation as a request with an outcome (DESIGN §2 inv. 16, §6 ``POST …/cancel``):
``stopping`` while in-flight work settles, then ``cancelled`` with what was kept; who may
ask; the Idempotency-Key; the ``run.cancel_requested`` event on the feed and to a real
tenant webhook receiver. Every test runs on SQLite and on PostgreSQL, with the test clock.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import LiveServer, bearer
from tests.integration.test_input_requests import race, rows
from tests.peers import Dispatcher, WebhookReceiver
from tests.timeouts import scaled

# --- helpers -----------------------------------------------------------------------------


def make_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> dict[str, Any]:
    body = {"owner": creds.owner_email, "state": "working", **fields}
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    return dict(r.json())


def cancel(
    client: TestClient,
    token: str,
    run_id: str,
    *,
    key: str | None = None,
    reason: str | None = None,
) -> httpx.Response:
    headers = bearer(token)
    if key is not None:
        headers["Idempotency-Key"] = key
    body = {"reason": reason} if reason is not None else None
    return client.post(f"/v1/runs/{run_id}/cancel", json=body, headers=headers)


def signal(
    client: TestClient, creds: TenantCreds, run_id: str, event_id: str, state: str, **extra: Any
) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": event_id, "state": state, **extra},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return dict(r.json())


def get_run(client: TestClient, token: str, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def feed(client: TestClient, token: str) -> list[dict[str, Any]]:
    r = client.get("/v1/events?after=earliest&limit=500", headers=bearer(token))
    assert r.status_code == 200, r.text
    return list(r.json()["events"])


# --- the request and its outcome -----------------------------------------------------------


def test_cancel_while_work_is_in_flight_stops_then_settles_with_what_was_kept(
    client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """The owner asks: 202 and ``stopping`` (not cancelled: work is still settling); a retry
    under the same key is the same answer byte for byte; the runtime sees the request in
    the snapshot and on the feed; its ``cancelled`` report reaches the owner through
    ``cancelled.by_owner`` with what was kept, and never claims anything was undone."""
    clock.freeze()
    make_run(client, creds, "deploy-1", title="Deploy")
    client.post(
        "/v1/runs/deploy-1/progress",
        json={"message": "pushing 4 of 5 files"},
        headers=bearer(creds.runtime_key),
    )

    first = cancel(client, creds.owner_token, "deploy-1", key="stop-1", reason="wrong branch")
    assert first.status_code == 202, first.text
    body = first.json()
    assert body["outcome"] == "requested"
    run = body["run"]
    assert (run["state"], run["terminal"], run["mcp_status"]) == ("stopping", False, "working")
    assert run["cancel_requested"] == {
        "at": run["updated_at"],
        "by": creds.owner_id,
        "by_kind": "user",
        "reason": "wrong branch",
    }
    assert run["cancellation"] is None  # no outcome yet: in-flight work is still settling

    again = cancel(client, creds.owner_token, "deploy-1", key="stop-1", reason="wrong branch")
    assert again.status_code == 202
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"

    # Without a key, asking again while it stops changes nothing: the first request stands.
    clock.advance(5)
    third = cancel(client, creds.owner_token, "deploy-1", reason="changed my mind")
    assert third.status_code == 200, third.text
    assert third.json()["outcome"] == "already_stopping"
    assert third.json()["run"]["version"] == run["version"]
    assert third.json()["run"]["cancel_requested"]["reason"] == "wrong branch"

    # What the runtime sees: the snapshot and the feed, cause before effect.
    seen = get_run(client, creds.runtime_key, "deploy-1")
    assert seen["state"] == "stopping"
    assert seen["cancel_requested"]["by"] == creds.owner_id
    events = [e for e in feed(client, creds.runtime_key) if e["run_id"] == "deploy-1"]
    types = [e["type"] for e in events]
    assert types.count("run.cancel_requested") == 1
    assert types.index("run.cancel_requested") > types.index("run.transitioned")
    [requested] = [e for e in events if e["type"] == "run.cancel_requested"]
    assert requested["data"]["version"] == run["version"]
    assert requested["data"]["cancel_requested"]["reason"] == "wrong branch"
    [moved] = [
        e for e in events if e["type"] == "run.transitioned" and e["data"]["state"] == "stopping"
    ]
    assert moved["data"]["from"] == "working"

    # A late "working" from the runtime does not take the run back.
    assert signal(client, creds, "deploy-1", "w-late", "working")["outcome"] == "stale"

    # In-flight work settled: the runtime reports cancelled with what it kept.
    settled = signal(
        client,
        creds,
        "deploy-1",
        "c-1",
        "cancelled",
        reason="stopped after file 4",
        report={"summary": "4 of 5 files pushed to the release branch"},
    )
    assert settled["outcome"] == "applied"
    [note] = settled["notifications"]
    assert note["attention_type"] == "cancelled"
    assert note["rule_id"] == "cancelled.by_owner"
    assert (note["decision"], note["urgency"]) == ("inbox", "low")
    assert "Kept: 4 of 5 files pushed to the release branch." in note["reason"]
    assert "does not undo" in note["reason"]
    assert "undone" not in note["reason"].replace("not undo", "")
    assert "may or may not have landed" in note["reason"]  # no ledger: uncertainty is said

    final = get_run(client, creds.owner_token, "deploy-1")
    assert final["state"] == "cancelled" and final["terminal"] is True
    assert final["cancellation"]["kept"] == "4 of 5 files pushed to the release branch"
    assert final["cancellation"]["text"] == note["reason"]
    assert final["cancellation"]["tracked"] is False
    assert final["cancel_requested"]["reason"] == "wrong branch"  # history stays

    # Finished: cancelling again is a 409 that says what is true now.
    refused = problem(cancel(client, creds.owner_token, "deploy-1", key="stop-2"), 409)
    assert refused["current"]["run"]["state"] == "cancelled"


def test_a_runtime_initiated_cancel_is_decided_by_cancelled_default(
    client: TestClient, creds: TenantCreds
) -> None:
    """The runtime may stop its own run through the same endpoint (with its API key): the
    owner did not ask, so the outcome alerts them through ``cancelled.default``. A run
    cancelled without any request is decided the same way."""
    make_run(client, creds, "self-stop")
    r = cancel(client, creds.runtime_key, "self-stop", reason="budget exhausted")
    assert r.status_code == 202, r.text
    assert r.json()["run"]["cancel_requested"]["by_kind"] == "runtime"
    assert r.json()["run"]["cancel_requested"]["by"] is None
    [note] = signal(client, creds, "self-stop", "c-1", "cancelled")["notifications"]
    assert note["rule_id"] == "cancelled.default"
    assert (note["decision"], note["urgency"]) == ("push", "normal")
    assert "The runtime did not say what it had done." in note["reason"]

    make_run(client, creds, "abrupt")
    [note] = signal(client, creds, "abrupt", "c-2", "cancelled")["notifications"]
    assert note["rule_id"] == "cancelled.default"


def test_stopping_also_accepts_completed_and_failed(client: TestClient, creds: TenantCreds) -> None:
    """The work may finish before it can stop: ``completed`` (or ``failed``) from stopping is
    the truth and is applied as such, with the request kept on the run."""
    make_run(client, creds, "race-1")
    assert cancel(client, creds.owner_token, "race-1").status_code == 202
    done = signal(client, creds, "race-1", "d-1", "completed")
    assert done["outcome"] == "applied"
    assert done["run"]["state"] == "completed"
    assert done["run"]["cancel_requested"]["by"] == creds.owner_id
    assert done["run"]["cancellation"] is None

    make_run(client, creds, "race-2")
    assert cancel(client, creds.owner_token, "race-2").status_code == 202
    assert signal(client, creds, "race-2", "f-1", "failed")["run"]["state"] == "failed"


def test_a_run_the_runtime_put_in_stopping_records_the_request(
    client: TestClient, creds: TenantCreds
) -> None:
    """Already stopping on the runtime's own: 200, same state and version, and the request
    is recorded (and announced) so the outcome is the owner's cancellation."""
    make_run(client, creds, "stop-own")
    version = signal(client, creds, "stop-own", "s-1", "stopping")["run"]["version"]
    r = cancel(client, creds.owner_token, "stop-own", reason="yes, stop")
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "already_stopping"
    assert r.json()["run"]["version"] == version
    assert r.json()["run"]["cancel_requested"]["reason"] == "yes, stop"
    types = [e["type"] for e in feed(client, creds.runtime_key) if e["run_id"] == "stop-own"]
    assert types.count("run.cancel_requested") == 1
    [note] = signal(client, creds, "stop-own", "c-1", "cancelled")["notifications"]
    assert note["rule_id"] == "cancelled.by_owner"


def test_cancelling_a_waiting_run_cancels_its_pending_request(
    client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """input_required → stopping: nobody can answer the pending request any more."""
    clock.freeze()
    make_run(client, creds, "wait-1")
    opened = client.post(
        "/v1/runs/wait-1/input-requests",
        json={"input_request_id": "ask-1", "kind": "approval", "summary": "Merge?"},
        headers=bearer(creds.runtime_key),
    ).json()
    version = opened["run"]["version"]
    assert cancel(client, creds.owner_token, "wait-1", key="k").status_code == 202
    r = client.get("/v1/input-requests/ask-1", headers=bearer(creds.owner_token))
    assert r.json()["input_request"]["state"] == "cancelled"
    assert r.json()["actionable"] is False
    answer = client.post(
        "/v1/input-requests/ask-1/responses",
        json={
            "decision": "approve",
            "expected_run_version": version,
            "expected_request_version": 1,
        },
        headers={**bearer(creds.owner_token), "Idempotency-Key": "a-1"},
    )
    assert problem(answer, 409)["current"]["input_request"]["state"] == "cancelled"
    types = [e["type"] for e in feed(client, creds.runtime_key)]
    assert "input_request.cancelled" in types
    # Its notification was superseded by the move to stopping.
    [note] = [n for n in opened["notifications"] if n["attention_type"] == "input_required"]
    shown = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token))
    assert shown.json()["state"] == "superseded"


# --- who may ask -------------------------------------------------------------------------


def test_owner_and_authority_may_cancel_others_get_403_or_404(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    """The authority (the owner, named users, members of named roles) may; a tenant admin
    who sees every run but is not named gets 403; a member who cannot see the run and
    another tenant get 404. Nothing moves on a refusal."""
    _, named = add_user(core, creds.tenant_id, "named@acme.test")
    _, admin = add_user(core, creds.tenant_id, "admin@acme.test", role="admin")
    _, outsider = add_user(core, creds.tenant_id, "outsider@acme.test")
    other = make_tenant(core, "globex")

    make_run(client, creds, "auth-1", authority={"users": ["named@acme.test"]})
    problem(cancel(client, admin, "auth-1"), 403)
    problem(cancel(client, outsider, "auth-1"), 404)
    problem(cancel(client, other.owner_token, "auth-1"), 404)
    problem(cancel(client, other.runtime_key, "auth-1"), 404)
    problem(cancel(client, creds.owner_token, "no-such-run"), 404)
    assert get_run(client, creds.owner_token, "auth-1")["state"] == "working"

    r = cancel(client, named, "auth-1", key="n-1")
    assert r.status_code == 202, r.text
    assert r.json()["run"]["cancel_requested"]["by_kind"] == "user"
    [note] = signal(client, creds, "auth-1", "c-1", "cancelled")["notifications"]
    assert note["rule_id"] == "cancelled.by_owner"  # the authority asked

    make_run(client, creds, "auth-2", authority={"roles": ["admin"]})
    assert cancel(client, admin, "auth-2").status_code == 202


def test_a_bad_reason_is_422_naming_the_field(client: TestClient, creds: TenantCreds) -> None:
    make_run(client, creds, "bad-1")
    r = client.post("/v1/runs/bad-1/cancel", json={"reason": 7}, headers=bearer(creds.owner_token))
    assert problem(r, 422)["field"].endswith("reason")
    r = client.post("/v1/runs/bad-1/cancel", json={"why": "x"}, headers=bearer(creds.owner_token))
    problem(r, 422)
    assert get_run(client, creds.owner_token, "bad-1")["state"] == "working"


# --- the webhook -------------------------------------------------------------------------


@pytest.mark.usefixtures("mailing")
def test_run_cancel_requested_is_delivered_to_a_real_receiver(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """A tenant endpoint subscribed to ``run.cancel_requested`` receives it once, signed
    (Standard Webhooks, checked by the reference library), with thin data."""
    clock.freeze()
    with WebhookReceiver() as rx:
        created = client.post(
            "/v1/webhook-endpoints",
            json={"url": rx.url(), "event_types": ["run.cancel_requested"]},
            headers=bearer(creds.admin_key),
        )
        assert created.status_code == 201, created.text
        rx.secrets = [created.json()["secret"]]
        make_run(client, creds, "hook-1")
        assert cancel(client, creds.owner_token, "hook-1", reason="not needed").status_code == 202
        with Dispatcher(core, clock) as d:
            for _ in range(5):
                if not d.tick():
                    break
        [arrived] = rx.of_type("run.cancel_requested")
        assert arrived.signed_by == [0]
        data = arrived.json()["data"]
        assert data["run_id"] == "hook-1"
        assert data["tenant_id"] == creds.tenant_id
        assert data["state"] == "stopping"
        assert data["cancel_requested"]["reason"] == "not needed"
        assert data["cancel_requested"]["by"] == creds.owner_id
        assert len(rx.requests) == 1  # only the subscribed type


# --- races -------------------------------------------------------------------------------


def test_six_devices_cancelling_at_once_make_one_request(core: Core, creds: TenantCreds) -> None:
    """Six real concurrent cancels under different keys (the owner on every device): one
    202, five 200 ``already_stopping``, one ``cancel`` transition, one event."""
    with LiveServer(core, bridge=False) as server:
        with httpx.Client(base_url=server.url, timeout=scaled(60)) as c:
            c.put(
                "/v1/runs/race-c",
                json={"owner": creds.owner_email, "state": "working"},
                headers=bearer(creds.runtime_key),
            ).raise_for_status()

        def post(i: int) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=scaled(60)) as c:
                return c.post(
                    "/v1/runs/race-c/cancel",
                    json={"reason": f"device {i}"},
                    headers={**bearer(creds.owner_token), "Idempotency-Key": f"dev-{i}"},
                )

        answers = race(6, post)
    assert Counter(r.status_code for r in answers) == Counter({202: 1, 200: 5}), [
        r.text for r in answers
    ]
    [first] = [r.json() for r in answers if r.status_code == 202]
    reason = first["run"]["cancel_requested"]["reason"]
    assert all(
        r.json()["run"]["cancel_requested"]["reason"] == reason
        for r in answers
        if r.status_code == 200
    )
    kinds = [tr["kind"] for tr in rows(core, t.transitions, creds.tenant_id, run_id="race-c")]
    assert kinds.count("cancel") == 1
    events = rows(core, t.feed_events, creds.tenant_id, run_id="race-c")
    assert [e["type"] for e in events].count("run.cancel_requested") == 1


def test_a_runtime_long_polling_the_feed_hears_the_request(core: Core, creds: TenantCreds) -> None:
    """The runtime's long-poll (waiting after the feed's head) is answered with the
    request: the transition to stopping and ``run.cancel_requested``."""
    with LiveServer(core) as server, httpx.Client(base_url=server.url, timeout=scaled(60)) as c:
        rt = bearer(creds.runtime_key)
        c.put(
            "/v1/runs/poll-1",
            json={"owner": creds.owner_email, "state": "working"},
            headers=rt,
        ).raise_for_status()
        head = c.get("/v1/events?after=latest", headers=rt).json()["next_cursor"]

        def job(i: int) -> httpx.Response:
            if i == 0:  # the runtime, waiting
                with httpx.Client(base_url=server.url, timeout=scaled(60)) as poller:
                    return poller.get(f"/v1/events?after={head}&wait=25", headers=rt)
            with httpx.Client(base_url=server.url, timeout=scaled(60)) as owner:
                return owner.post(
                    "/v1/runs/poll-1/cancel",
                    json={"reason": "enough"},
                    headers=bearer(creds.owner_token),
                )

        polled, asked = race(2, job)
        assert asked.status_code == 202, asked.text
        # One commit carries both events, so the one answer has both, cause first.
        seen = polled.json()["events"]
        assert [e["type"] for e in seen] == ["run.transitioned", "run.cancel_requested"]
        requested = [e for e in seen if e["type"] == "run.cancel_requested"]
        assert len(requested) == 1
        assert requested[0]["data"]["cancel_requested"]["reason"] == "enough"
        assert requested[0]["data"]["state"] == "stopping"


# --- with an operations ledger (issue 10's cancellation test) ------------------------------


def test_cancel_while_operation_four_is_in_flight_keeps_what_landed_and_skips_five(
    client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """Five declared operations; three confirmed, four sent (its reply not back yet), five
    still planned. The owner cancels: ``stopping``, and five is marked ``not_started`` at
    once (it will never begin). Four then settles ``confirmed``; the runtime reports
    ``cancelled``; the summary says what was kept and that nothing is uncertain, and never
    that anything was undone. The same key asks again: the same answer."""
    from tests.integration.test_operations import declare, move, op

    clock.freeze()
    make_run(client, creds, "sync-c", title="Sync invoices")
    declare(client, creds, "sync-c", {"operations": [op(f"inv-{i}") for i in range(1, 6)]})
    for i in range(1, 4):
        move(client, creds, "sync-c", f"inv-{i}", "sent")
        move(client, creds, "sync-c", f"inv-{i}", "confirmed", evidence={"receipt_id": f"r{i}"})
    move(client, creds, "sync-c", "inv-4", "sent")

    first = cancel(client, creds.owner_token, "sync-c", key="stop-sync", reason="wrong month")
    assert first.status_code == 202, first.text
    assert first.json()["run"]["state"] == "stopping"
    again = cancel(client, creds.owner_token, "sync-c", key="stop-sync", reason="wrong month")
    assert again.status_code == 202 and again.content == first.content

    ledger = {
        o["operation_id"]: o["state"]
        for o in client.get("/v1/runs/sync-c/operations", headers=bearer(creds.owner_token)).json()[
            "operations"
        ]
    }
    assert ledger == {
        "inv-1": "confirmed",
        "inv-2": "confirmed",
        "inv-3": "confirmed",
        "inv-4": "sent",  # in flight: it settles as the runtime reports it
        "inv-5": "not_started",  # planned when cancellation was asked: it never starts
    }
    assert get_run(client, creds.owner_token, "sync-c")["operations"]["text"] == (
        "3 confirmed, 1 sent without a reply yet, 1 not started"
    )
    # Five cannot be started after the request.
    move(client, creds, "sync-c", "inv-5", "sent", status=409)

    move(client, creds, "sync-c", "inv-4", "confirmed", evidence={"receipt_id": "r4"})
    settled = signal(client, creds, "sync-c", "c-sync", "cancelled", reason="stopped")
    assert settled["outcome"] == "applied"
    [note] = settled["notifications"]
    assert (note["attention_type"], note["rule_id"]) == ("cancelled", "cancelled.by_owner")
    assert "4 confirmed, 1 not started." in note["reason"]
    assert "Nothing is uncertain." in note["reason"]
    assert "does not undo" in note["reason"]
    assert "undone" not in note["reason"].replace("not undo", "")
    final = get_run(client, creds.owner_token, "sync-c")
    assert final["state"] == "cancelled"
    assert final["cancellation"]["tracked"] is True
    assert final["cancellation"]["uncertain"] is None
    assert final["cancellation"]["counts"]["confirmed"] == 4
    assert final["cancellation"]["text"] == note["reason"]


def test_a_cancelled_run_names_what_stays_uncertain(
    client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """A reply lost while the run stopped: the summary names it, and the one still in
    flight, as uncertain — never "nothing is uncertain"."""
    from tests.integration.test_operations import declare, move, op

    clock.freeze()
    make_run(client, creds, "sync-u")
    declare(client, creds, "sync-u", {"operations": [op(f"u-{i}") for i in range(1, 4)]})
    for i in range(1, 4):
        move(client, creds, "sync-u", f"u-{i}", "sent")
    move(client, creds, "sync-u", "u-1", "confirmed", evidence={"receipt_id": "r1"})
    move(client, creds, "sync-u", "u-2", "uncertain", evidence={"error": "timeout"})
    assert cancel(client, creds.owner_token, "sync-u", key="k-u").status_code == 202
    [note] = signal(client, creds, "sync-u", "c-u", "cancelled")["notifications"]
    assert "Still uncertain: u-2, u-3." in note["reason"]
    assert "Nothing is uncertain" not in note["reason"]
    assert get_run(client, creds.owner_token, "sync-u")["cancellation"]["uncertain"] == "u-2, u-3"
