"""The metrics the attention seed lists, each moved through its real path: an HTTP call
(or a real worker tick against a real SMTP peer, or a scheduler sweep) → scrape
``/metrics`` → the sample moved. SQLite and PostgreSQL.

Counters are per process and shared by every test in it, so each test reads a sample
before and after what it does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runbell.dispatch.scheduler import Scheduler
from runbell.testing import Clock
from tests.conftest import Env
from tests.integration.test_web import sign_in
from tests.peers import Dispatcher, SmtpPeer


@pytest.fixture
def smtp() -> Iterator[SmtpPeer]:
    with SmtpPeer() as peer:
        yield peer


@pytest.fixture
def env(make_env: Callable[..., Env], smtp: SmtpPeer, clock: Clock) -> Env:
    """The app on the parametrized database, with a real SMTP peer as its relay."""
    clock.freeze()
    return make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)


def sample(env: Env, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when absent)."""
    r = env.client.get("/metrics")
    assert r.status_code == 200, r.text
    total = 0.0
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def finish(env: Env, run_id: str, state: str = "completed", **signal: Any) -> dict[str, Any]:
    """A run that asked to be told, finished: a pushed notification (email consented)."""
    body = {"owner": env.creds.owner_email, "state": "working", "notify_on_complete": True}
    ok(env.client.put(f"/v1/runs/{run_id}", json=body, headers=env.runtime), 201)
    answer = ok(
        env.client.post(
            f"/v1/runs/{run_id}/signals",
            json={"event_id": f"{run_id}-end", "state": state, **signal},
            headers=env.runtime,
        )
    )
    assert answer["outcome"] == "applied", answer
    return dict(answer)


def note_id(answer: dict[str, Any]) -> str:
    (note,) = answer["notifications"]
    return str(note["id"])


def receipt(env: Env, nid: str, kind: str, channel: str | None) -> None:
    body: dict[str, Any] = {"kind": kind}
    if channel is not None:
        body["channel"] = channel
    ok(env.client.post(f"/v1/notifications/{nid}/receipts", json=body, headers=env.owner), 201)


# --- records, suppression, duplicates ---------------------------------------------------


def test_records_created_and_duplicates_suppressed(env: Env) -> None:
    created = sample(env, "runbell_notifications_created_total", attention_type="completed")
    dupes = sample(env, "runbell_duplicates_suppressed_total", kind="signal")
    finish(env, "m-created")
    again = env.client.post(
        "/v1/runs/m-created/signals",
        json={"event_id": "m-created-end", "state": "completed"},
        headers=env.runtime,
    )
    assert ok(again)["outcome"] == "duplicate"
    assert (
        sample(env, "runbell_notifications_created_total", attention_type="completed")
        == created + 1
    )
    assert sample(env, "runbell_duplicates_suppressed_total", kind="signal") == dupes + 1


def test_duplicates_by_kind_idempotency_key_and_input_request(env: Env) -> None:
    keyed = sample(env, "runbell_duplicates_suppressed_total", kind="idempotency_key")
    asked = sample(env, "runbell_duplicates_suppressed_total", kind="input_request")
    nid = note_id(finish(env, "m-dupe"))
    headers = {**env.owner, "Idempotency-Key": "ack-once"}
    first = ok(env.client.post(f"/v1/notifications/{nid}/ack", headers=headers))
    again = ok(env.client.post(f"/v1/notifications/{nid}/ack", headers=headers))
    assert again == first
    assert sample(env, "runbell_duplicates_suppressed_total", kind="idempotency_key") == (keyed + 1)

    body = {"owner": env.creds.owner_email, "state": "working"}
    ok(env.client.put("/v1/runs/m-ask", json=body, headers=env.runtime), 201)
    request = {"input_request_id": "m-ask-1", "kind": "approval", "summary": "Go?"}
    for _ in range(2):  # the same request again: answered as before, nothing new opened
        r = env.client.post("/v1/runs/m-ask/input-requests", json=request, headers=env.runtime)
        assert r.status_code in (200, 201), r.text
    assert sample(env, "runbell_duplicates_suppressed_total", kind="input_request") == asked + 1


def test_policy_suppressed(env: Env) -> None:
    before = sample(env, "runbell_policy_suppressed_total", attention_type="failed")
    finish(env, "m-retrying", "failed", error={"retryable": True, "message": "retrying"})
    assert sample(env, "runbell_policy_suppressed_total", attention_type="failed") == before + 1


# --- dispatch: latency to the first attempt, acceptance by channel ---------------------


def test_first_attempt_latency_and_provider_answers_by_channel(env: Env, smtp: SmtpPeer) -> None:
    labels = {"attention_type": "completed", "channel": "email"}
    first = sample(env, "runbell_first_attempt_latency_seconds_count", **labels)
    first_sum = sample(env, "runbell_first_attempt_latency_seconds_sum", **labels)
    accepted = sample(env, "runbell_delivery_attempts_total", outcome="accepted", **labels)
    transient = sample(env, "runbell_delivery_attempts_total", outcome="transient", **labels)

    finish(env, "m-mail")
    env.clock.advance(3)  # the worker reaches it three seconds after it was created
    smtp.defer_next()  # the relay answers 451 once: a transient failure, retried
    with Dispatcher(env.core, env.clock) as worker:
        assert worker.tick() == 1
        assert sample(env, "runbell_delivery_attempts_total", outcome="transient", **labels) == (
            transient + 1
        )
        env.clock.advance(600)
        assert worker.tick() == 1
    assert len(smtp.raw) == 1
    assert sample(env, "runbell_delivery_attempts_total", outcome="accepted", **labels) == (
        accepted + 1
    )
    # Two attempts, one first attempt: observed once, three seconds after creation.
    assert sample(env, "runbell_first_attempt_latency_seconds_count", **labels) == first + 1
    assert sample(env, "runbell_first_attempt_latency_seconds_sum", **labels) == pytest.approx(
        first_sum + 3
    )


# --- what devices and people did: delivered, opened, acknowledged, stale ---------------


def test_delivery_when_known_opens_and_acknowledgement_time(env: Env) -> None:
    nid = note_id(finish(env, "m-open"))
    shown = sample(env, "runbell_delivered_total", attention_type="completed", channel="webpush")
    opened = sample(
        env, "runbell_opens_total", attention_type="completed", channel="email", kind="opened"
    )
    clicked = sample(
        env, "runbell_opens_total", attention_type="completed", channel="webpush", kind="clicked"
    )
    acks = sample(env, "runbell_acknowledgement_seconds_count", attention_type="completed")
    ack_sum = sample(env, "runbell_acknowledgement_seconds_sum", attention_type="completed")

    receipt(env, nid, "displayed", "webpush")
    receipt(env, nid, "opened", "email")
    receipt(env, nid, "clicked", "webpush")
    receipt(env, nid, "dismissed", "webpush")  # telemetry, counted as none of these
    env.clock.advance(90)
    ok(env.client.post(f"/v1/notifications/{nid}/ack", headers=env.owner))

    assert (
        sample(env, "runbell_delivered_total", attention_type="completed", channel="webpush")
        == shown + 1
    )
    assert (
        sample(
            env, "runbell_opens_total", attention_type="completed", channel="email", kind="opened"
        )
        == opened + 1
    )
    assert (
        sample(
            env,
            "runbell_opens_total",
            attention_type="completed",
            channel="webpush",
            kind="clicked",
        )
        == clicked + 1
    )
    assert sample(env, "runbell_acknowledgement_seconds_count", attention_type="completed") == (
        acks + 1
    )
    assert sample(
        env, "runbell_acknowledgement_seconds_sum", attention_type="completed"
    ) == pytest.approx(ack_sum + 90)


def test_stale_opens_by_receipt_api_and_web_deep_link(env: Env) -> None:
    nid = note_id(finish(env, "m-stale"))
    sign_in(env.client, env.core, env.creds.tenant_id, env.creds.owner_id)

    def stale(via: str) -> float:
        return sample(env, "runbell_stale_opens_total", attention_type="completed", via=via)

    # While the notification is open, nothing is stale.
    before = {via: stale(via) for via in ("email", "api", "deep_link")}
    receipt(env, nid, "opened", "email")
    ok(env.client.get(f"/v1/notifications/{nid}", headers=env.owner))
    assert env.client.get(f"/n/{nid}").status_code == 200
    assert {via: stale(via) for via in before} == before

    ok(env.client.post(f"/v1/notifications/{nid}/ack", headers=env.owner))
    receipt(env, nid, "opened", "email")
    assert stale("email") == before["email"] + 1
    ok(env.client.get(f"/v1/notifications/{nid}", headers=env.owner))
    assert stale("api") == before["api"] + 1
    unknown = sample(env, "runbell_opens_total", channel="unknown", kind="opened")
    assert env.client.get(f"/n/{nid}").status_code == 200
    assert stale("deep_link") == before["deep_link"] + 1
    # The deep link's own "opened" receipt is an open, not a second stale open.
    assert sample(env, "runbell_opens_total", channel="unknown", kind="opened") == unknown + 1
    assert stale("unknown") == 0


# --- expiry, escalation, opt-outs ----------------------------------------------------------


def test_expired_input_requests(env: Env) -> None:
    body = {"owner": env.creds.owner_email, "state": "working"}
    ok(env.client.put("/v1/runs/m-expire", json=body, headers=env.runtime), 201)
    expires = env.clock() + timedelta(seconds=60)
    ok(
        env.client.post(
            "/v1/runs/m-expire/input-requests",
            json={
                "input_request_id": "m-expire-1",
                "kind": "approval",
                "summary": "Go?",
                "expires_at": expires.isoformat(),
            },
            headers=env.runtime,
        ),
        201,
    )
    before = sample(env, "runbell_input_requests_expired_total", kind="approval")
    scheduler = Scheduler(env.core)
    assert scheduler.tick(env.clock())["input_requests"] == 0
    assert sample(env, "runbell_input_requests_expired_total", kind="approval") == before
    assert scheduler.tick(env.clock.advance(61))["input_requests"] == 1
    assert sample(env, "runbell_input_requests_expired_total", kind="approval") == before + 1


def test_the_escalation_counter_is_exposed_for_the_escalation_sweep(env: Env) -> None:
    # Declared here; tests/integration/test_escalation.py moves it through a real step.
    text = env.client.get("/metrics").text
    assert "# TYPE runbell_escalations_total counter" in text
    assert "# HELP runbell_escalations_total" in text


def test_the_fallback_counter_is_exposed_for_the_record_step(env: Env) -> None:
    # Declared here; tests/integration/test_fallback.py moves it through a real failure.
    text = env.client.get("/metrics").text
    assert "# TYPE runbell_fallbacks_total counter" in text
    assert "# HELP runbell_fallbacks_total" in text


def test_opt_outs_after_a_delivery_on_the_channel(env: Env, smtp: SmtpPeer) -> None:
    labels = {"attention_type": "completed", "channel": "email", "urgency": "normal"}
    before = sample(env, "runbell_opt_outs_after_delivery_total", **labels)
    chat_before = sample(env, "runbell_opt_outs_after_delivery_total", channel="chat")
    all_before = sample(env, "runbell_opt_outs_total", channel="email", urgency="normal")

    # Withdrawn before anything was delivered on email: an opt-out, not one after delivery.
    ok(env.client.put("/v1/me/preferences", json={"consent": {"email": []}}, headers=env.owner))
    assert sample(env, "runbell_opt_outs_total", channel="email", urgency="normal") == (
        all_before + 1
    )
    assert sample(env, "runbell_opt_outs_after_delivery_total", **labels) == before

    ok(
        env.client.put(
            "/v1/me/preferences",
            json={"consent": {"email": ["normal", "time_sensitive", "urgent"]}},
            headers=env.owner,
        )
    )
    finish(env, "m-optout")
    with Dispatcher(env.core, env.clock) as worker:
        assert worker.tick() == 1
    assert len(smtp.raw) == 1
    ok(
        env.client.put(
            "/v1/me/preferences",
            json={"consent": {"email": ["urgent"], "chat": []}},
            headers=env.owner,
        )
    )
    assert sample(env, "runbell_opt_outs_after_delivery_total", **labels) == before + 1
    assert (
        sample(
            env,
            "runbell_opt_outs_after_delivery_total",
            attention_type="completed",
            channel="email",
            urgency="time_sensitive",
        )
        >= 1
    )
    # Chat never delivered anything to this person: no opt-out after delivery there.
    assert sample(env, "runbell_opt_outs_after_delivery_total", channel="chat") == chat_before
