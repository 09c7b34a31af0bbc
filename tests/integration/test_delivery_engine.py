"""The delivery engine end to end: the HTTP API, the real worker and real local peers.

Every channel is checked against a real peer on 127.0.0.1 (tests/peers.py): a webhook
receiver that verifies with ``standardwebhooks``, aiosmtpd, an RFC 8030 push service that
checks VAPID and decrypts with the subscriber's key, and an Apprise ``json://`` receiver.
The worker runs under a frozen clock; retries happen by moving the clock, never by
sleeping (DESIGN §2 inv. 6, 7, 8, 11, 12, 14; §6). Every test runs on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from runbell.channels.webpush import VapidKeys, collapse_topic
from runbell.store import accounts
from runbell.store import tables as t
from tests.channels.push_receiver import PushReceiver
from tests.conftest import Env
from tests.peers import ChatReceiver, Dispatcher, SmtpPeer, WebhookReceiver, mail_text

PUBLIC = "http://testserver"
# Webhook schedule after attempt n (DESIGN §6), jitter ±20 %.
WEBHOOK_DELAYS = (5, 300, 1800, 7200, 18000, 36000, 36000)
PENDING = ("queued", "retry_scheduled", "deferred", "delivery_unknown", "sending")


# --- the environment -----------------------------------------------------------------


def real_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def at(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text)


# --- API helpers ---------------------------------------------------------------------


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def register_endpoint(env: Env, url: str, event_types: list[str]) -> tuple[str, str]:
    body = ok(
        env.client.post(
            "/v1/webhook-endpoints",
            json={"url": url, "event_types": event_types},
            headers=env.admin,
        ),
        201,
    )
    return str(body["id"]), str(body["secret"])


def finish_run(
    env: Env,
    run_id: str,
    state: str = "completed",
    *,
    run: dict[str, Any] | None = None,
    **signal: Any,
) -> dict[str, Any]:
    """Create a working run, then report ``state``; returns the signal answer."""
    body = {"owner": env.creds.owner_email, "state": "working", **(run or {})}
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


def notification_id(answer: dict[str, Any]) -> str:
    (note,) = answer["notifications"]
    return str(note["id"])


def list_deliveries(env: Env, **params: Any) -> list[dict[str, Any]]:
    return list(
        ok(env.client.get("/v1/deliveries", params=params, headers=env.admin))["deliveries"]
    )


def delivery(env: Env, delivery_id: str) -> dict[str, Any]:
    return dict(ok(env.client.get(f"/v1/deliveries/{delivery_id}", headers=env.admin)))


def person_deliveries(env: Env, note_id: str) -> dict[str, dict[str, Any]]:
    """The notification's deliveries by channel (admin trail)."""
    trail = ok(env.client.get(f"/v1/notifications/{note_id}/trail", headers=env.admin))
    return {d["channel"]: d for d in trail["deliveries"]}


def trail(env: Env, note_id: str) -> dict[str, Any]:
    return dict(ok(env.client.get(f"/v1/notifications/{note_id}/trail", headers=env.admin)))


def webhook_messages(env: Env, event_type: str | None = None) -> list[dict[str, Any]]:
    found = list_deliveries(env, channel="webhook")
    return [d for d in found if event_type is None or d["event_type"] == event_type]


def drain(env: Env, d: Dispatcher, *, limit: int = 40) -> None:
    """Follow the clock to each pending delivery's next attempt until none is pending."""
    for _ in range(limit):
        pending = [x for x in list_deliveries(env) if x["status"] in PENDING]
        if not pending:
            return
        env.clock.freeze(min(at(x["next_attempt_at"]) for x in pending))
        assert d.tick() >= 1
    raise AssertionError("deliveries still pending")


def metric(env: Env, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when absent)."""
    text = env.client.get("/metrics").text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def set_quiet_hours(env: Env, **extra: Any) -> None:
    body = {
        "quiet_hours": [{"start": "22:00", "end": "07:00"}],
        "timezone": "Europe/Berlin",
        **extra,
    }
    ok(env.client.put("/v1/me/preferences", json=body, headers=env.owner))


def subscribe_push(env: Env, push: PushReceiver) -> tuple[dict[str, Any], str]:
    sub = push.new_subscription()
    created = ok(env.client.post("/v1/me/push-subscriptions", json=sub, headers=env.owner), 201)
    return sub, str(created["id"])


def add_chat(env: Env, chat: ChatReceiver) -> str:
    body = ok(
        env.client.post(
            "/v1/me/chat-destinations", json={"url": chat.chat_url()}, headers=env.owner
        ),
        201,
    )
    return str(body["id"])


def vapid_key(env: Env) -> str:
    return str(ok(env.client.get("/v1/push/vapid-public-key"))["public_key"])


# --- tenant webhooks: retries, dead letters, replay, rotation --------------------------


def test_failing_receiver_recovers_on_schedule_under_one_webhook_id(
    make_env: Callable[..., Env],
) -> None:
    """500, 500, 200: signed retries at 0 s / 5 s / 5 min ±20 %, one webhook-id, run.finished."""
    env = make_env()
    with WebhookReceiver() as rx, env.dispatcher() as d:
        # Near the wall clock, so the library's 5-minute timestamp tolerance holds.
        t0 = env.clock.freeze(real_now() - timedelta(seconds=200))
        _, secret = register_endpoint(env, rx.url(), ["run.finished"])
        rx.secrets = [secret]
        rx.respond_next(500, 500)
        report = {
            "iterations": 7,
            "summary": "3 files changed",
            "spend": {"amount": 1.25, "currency": "USD"},
            "trace_id": "tr_7f3a",
            "links": [{"label": "PR", "url": "https://git.example/acme/web/pull/42"}],
        }
        finish_run(env, "wh-recover", run={"kind": "coding"}, report=report, reason="done")
        (msg,) = webhook_messages(env)

        assert d.tick() == 1
        first = delivery(env, msg["id"])
        assert first["status"] == "retry_scheduled"
        delay = (at(first["next_attempt_at"]) - t0).total_seconds()
        assert 5 * 0.8 <= delay <= 5 * 1.2

        env.clock.advance(3.9)  # less than any jittered 5 s delay
        assert d.tick() == 0
        assert len(rx.requests) == 1

        t1 = env.clock.freeze(at(first["next_attempt_at"]))
        assert d.tick() == 1
        second = delivery(env, msg["id"])
        assert second["status"] == "retry_scheduled"
        delay = (at(second["next_attempt_at"]) - t1).total_seconds()
        assert 300 * 0.8 <= delay <= 300 * 1.2

        env.clock.freeze(at(second["next_attempt_at"]) - timedelta(seconds=1))
        assert d.tick() == 0
        env.clock.freeze(at(second["next_attempt_at"]))
        assert d.tick() == 1

    final = delivery(env, msg["id"])
    assert final["status"] == "accepted"
    assert [(a["outcome"], a["status_code"]) for a in final["attempts"]] == [
        ("transient", 500),
        ("transient", 500),
        ("accepted", 200),
    ]
    assert [r.status for r in rx.requests] == [500, 500, 200]
    assert rx.ids == [msg["id"]] * 3
    assert all(r.verified_by == [0] for r in rx.requests)
    assert len({r.body for r in rx.requests}) == 1  # the same bytes each time
    assert len({r.headers["webhook-timestamp"] for r in rx.requests}) == 3  # attempt time

    payload = rx.requests[-1].json()
    run = ok(env.client.get("/v1/runs/wh-recover", headers=env.runtime))
    assert payload["type"] == "run.finished"
    data = payload["data"]
    assert data["run_id"] == "wh-recover"
    assert data["status"] == "completed"
    assert data["version"] == run["version"]
    assert data["iterations"] == 7
    assert data["summary"] == "3 files changed"
    assert data["spend"] == {"amount": 1.25, "currency": "USD"}
    assert data["kind"] == "coding"
    assert data["tenant_id"] == env.creds.tenant_id  # several tenants, one receiver
    assert data["trace_id"] == "tr_7f3a"
    assert data["links"] == [{"label": "PR", "url": "https://git.example/acme/web/pull/42"}]
    assert data["stop_reason"] == "done"
    assert data["deep_link"] == f"{PUBLIC}/runs/wh-recover"
    # One logical alert: one notification, one run.finished message.
    assert len(run["open_notifications"]) == 1
    assert len(webhook_messages(env, "run.finished")) == 1


def test_exhausted_message_is_dead_lettered_then_replayed_under_the_same_id(
    make_env: Callable[..., Env],
) -> None:
    """Eight failures on schedule make a counted dead letter; replay delivers the same id."""
    env = make_env()
    with WebhookReceiver(default_status=500) as rx, env.dispatcher() as d:
        env.clock.freeze(real_now() - timedelta(days=2))
        _, secret = register_endpoint(env, rx.url(), ["run.finished"])
        rx.secrets = [secret]
        dead_before = metric(env, "runbell_dead_letters_total", channel="webhook")
        finish_run(env, "wh-dead")
        (msg,) = webhook_messages(env)

        tried_at: list[datetime] = []
        for _ in range(8):
            tried_at.append(env.clock())
            assert d.tick() == 1
            row = delivery(env, msg["id"])
            if row["status"] == "dead":
                break
            assert row["status"] == "retry_scheduled"
            env.clock.freeze(at(row["next_attempt_at"]))

        dead = delivery(env, msg["id"])
        assert dead["status"] == "dead"
        assert len(dead["attempts"]) == 8
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(tried_at)]
        for gap, base in zip(gaps, WEBHOOK_DELAYS, strict=True):
            assert base * 0.8 <= gap <= base * 1.2
        assert [x["id"] for x in list_deliveries(env, status="dead")] == [msg["id"]]
        assert metric(env, "runbell_dead_letters_total", channel="webhook") == dead_before + 1
        assert d.tick() == 0  # nothing more is tried on its own

        rx.default_status = 200
        env.clock.freeze(real_now())
        replayed = ok(env.client.post(f"/v1/deliveries/{msg['id']}/replay", headers=env.admin))
        assert replayed["status"] == "queued"
        assert d.tick() == 1

    assert delivery(env, msg["id"])["status"] == "accepted"
    assert rx.ids == [msg["id"]] * 9
    assert rx.requests[-1].status == 200
    assert rx.requests[-1].verified_by == [0]
    assert all(r.signed_by == [0] for r in rx.requests)


@pytest.mark.parametrize(
    ("status", "headers", "low", "high"),
    [
        (503, {"Retry-After": "120"}, 120, 120),
        (429, {"Retry-After": "100000"}, 3600, 3600),  # capped at an hour
        (302, {"Location": "/elsewhere"}, 4, 6),  # a failure, never followed
    ],
    ids=["503-retry-after", "429-capped", "302-not-followed"],
)
def test_receiver_pushback_sets_the_next_try(
    make_env: Callable[..., Env],
    status: int,
    headers: dict[str, str],
    low: float,
    high: float,
) -> None:
    """Retry-After moves the next try (capped); a redirect is a failure, never followed."""
    env = make_env()
    with WebhookReceiver() as rx, env.dispatcher() as d:
        t0 = env.clock.freeze(real_now())
        _, secret = register_endpoint(env, rx.url(), ["run.finished"])
        rx.secrets = [secret]
        rx.respond_next(status, headers=headers)
        finish_run(env, "pushback-1")
        (msg,) = webhook_messages(env)
        assert d.tick() == 1

    row = delivery(env, msg["id"])
    assert row["status"] == "retry_scheduled"
    assert low <= (at(row["next_attempt_at"]) - t0).total_seconds() <= high
    assert [r.path for r in rx.requests] == ["/hook"]
    assert row["attempts"][0]["status_code"] == status


def test_rotation_signs_with_old_and_new_secret_until_the_overlap_ends(
    make_env: Callable[..., Env],
) -> None:
    """During rotation old-only and new-only receivers both verify; after it, only new."""
    env = make_env()
    with WebhookReceiver() as rx, env.dispatcher() as d:
        env.clock.freeze(real_now() - timedelta(seconds=30))
        endpoint_id, old = register_endpoint(env, rx.url(), ["run.finished"])
        rotated = ok(
            env.client.post(
                f"/v1/webhook-endpoints/{endpoint_id}/rotate-secret",
                json={"overlap_s": 60},
                headers=env.admin,
            )
        )
        new = rotated["secret"]
        assert new != old and new.startswith("whsec_")
        assert len(rotated["secrets"]) == 2
        rx.secrets = [old, new]

        finish_run(env, "rot-1")
        assert d.tick() == 1
        (during,) = rx.requests
        assert during.headers["webhook-signature"].count("v1,") == 2
        assert during.verified_by == [0, 1]  # old-only and new-only receivers both accept
        assert during.status == 200

        env.clock.advance(61)
        finish_run(env, "rot-2")
        assert d.tick() == 1

    after = rx.requests[1]
    assert after.headers["webhook-signature"].count("v1,") == 1
    assert after.signed_by == [1]
    assert after.verified_by == [1]


def test_410_disables_the_endpoint_and_cancels_its_queued_messages(
    make_env: Callable[..., Env],
) -> None:
    """410 Gone disables the endpoint and its other queued messages are cancelled, unsent."""
    env = make_env(worker_batch=1)
    with WebhookReceiver() as rx, env.dispatcher() as d:
        env.clock.freeze(real_now())
        endpoint_id, secret = register_endpoint(env, rx.url(), [])
        rx.secrets = [secret]
        rx.respond_next(410)
        finish_run(env, "gone-1")
        messages = webhook_messages(env)
        assert len(messages) >= 3  # run.created, run.transitioned, run.finished, …

        assert d.tick() == 1
        endpoint = ok(env.client.get(f"/v1/webhook-endpoints/{endpoint_id}", headers=env.admin))
        assert endpoint["status"] == "disabled"
        assert "410" in endpoint["disabled_reason"]

        while d.tick():
            pass

    statuses = sorted(x["status"] for x in webhook_messages(env))
    assert statuses == ["cancelled"] * (len(messages) - 1) + ["failed"]
    assert len(rx.requests) == 1
    with env.core.db.read() as conn:
        kinds = conn.execute(
            sa.select(t.operator_events.c.kind).where(
                t.operator_events.c.tenant_id == env.creds.tenant_id
            )
        ).scalars()
        assert list(kinds) == ["webhook_endpoint.disabled"]


def test_repeated_dead_letters_disable_the_endpoint_and_recover_requeues_them(
    make_env: Callable[..., Env],
) -> None:
    """Dead letters in a row disable the endpoint, alert, and recover re-sends them later."""
    env = make_env(webhook_disable_after_dead=2)
    with WebhookReceiver(default_status=500) as rx, env.dispatcher() as d:
        start = env.clock.freeze(real_now() - timedelta(days=2))
        endpoint_id, secret = register_endpoint(env, rx.url(), ["run.finished"])
        rx.secrets = [secret]
        finish_run(env, "dead-1")
        finish_run(env, "dead-2")
        drain(env, d)

        dead = list_deliveries(env, status="dead", channel="webhook")
        assert len(dead) == 2
        endpoint = ok(env.client.get(f"/v1/webhook-endpoints/{endpoint_id}", headers=env.admin))
        assert endpoint["status"] == "disabled"
        assert endpoint["dead_streak"] == 2
        with env.core.db.read() as conn:
            events = conn.execute(
                sa.select(t.operator_events).where(
                    t.operator_events.c.tenant_id == env.creds.tenant_id
                )
            ).all()
        assert [e.kind for e in events] == ["webhook_endpoint.disabled"]
        assert events[0].detail["destination"] == endpoint_id
        feed = ok(env.client.get("/v1/events", params={"after": "earliest"}, headers=env.admin))
        disabled = [e for e in feed["events"] if e["type"] == "webhook_endpoint.disabled"]
        assert [e["data"]["endpoint_id"] for e in disabled] == [endpoint_id]

        # While disabled, new events are kept (cancelled, not sent) for a later recover.
        finish_run(env, "dead-3")
        held = [x for x in webhook_messages(env) if x["run_id"] == "dead-3"]
        assert [x["status"] for x in held] == ["cancelled"]
        assert d.tick() == 0

        enabled = ok(
            env.client.patch(
                f"/v1/webhook-endpoints/{endpoint_id}",
                json={"status": "enabled"},
                headers=env.admin,
            )
        )
        assert (enabled["status"], enabled["dead_streak"]) == ("enabled", 0)
        rx.default_status = 200
        env.clock.freeze(real_now())
        since = (start - timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
        requeued = ok(
            env.client.post(
                f"/v1/webhook-endpoints/{endpoint_id}/recover",
                params={"since": since},
                headers=env.admin,
            ),
            202,
        )
        assert requeued == {"requeued": 3}
        assert d.tick() == 3

    assert [x["status"] for x in webhook_messages(env)] == ["accepted"] * 3
    delivered = [r for r in rx.requests if r.status == 200]
    expected = sorted([x["id"] for x in dead] + [held[0]["id"]])
    assert sorted(r.headers["webhook-id"] for r in delivered) == expected
    assert all(r.verified_by == [0] for r in delivered)


def test_a_success_in_between_resets_the_dead_streak(
    make_env: Callable[..., Env],
) -> None:
    """Auto-disable counts dead letters in a row: a success in between resets the streak."""
    env = make_env(webhook_disable_after_dead=2)
    with WebhookReceiver(default_status=500) as rx, env.dispatcher() as d:
        env.clock.freeze(real_now() - timedelta(days=3))
        endpoint_id, secret = register_endpoint(env, rx.url(), ["run.finished"])
        rx.secrets = [secret]
        finish_run(env, "streak-1")
        drain(env, d)
        rx.default_status = 200
        finish_run(env, "streak-2")
        assert d.tick() == 1
        rx.default_status = 500
        finish_run(env, "streak-3")
        drain(env, d)

    by_run = {x["run_id"]: x["status"] for x in webhook_messages(env)}
    assert by_run == {"streak-1": "dead", "streak-2": "accepted", "streak-3": "dead"}
    endpoint = ok(env.client.get(f"/v1/webhook-endpoints/{endpoint_id}", headers=env.admin))
    assert (endpoint["status"], endpoint["dead_streak"]) == ("enabled", 1)


def test_endpoint_filter_keeps_unsubscribed_event_types_away(
    make_env: Callable[..., Env],
) -> None:
    """An endpoint subscribed to notification.created only never gets run.finished."""
    env = make_env()
    with WebhookReceiver() as rx, env.dispatcher() as d:
        env.clock.freeze(real_now())
        _, secret = register_endpoint(env, rx.url(), ["notification.created"])
        rx.secrets = [secret]
        answer = finish_run(env, "filter-1", run={"notify_on_complete": True})
        while d.tick():
            pass

    assert [r.json()["type"] for r in rx.requests] == ["notification.created"]
    assert rx.requests[0].json()["data"]["notification_id"] == notification_id(answer)
    assert rx.requests[0].json()["data"]["tenant_id"] == env.creds.tenant_id
    assert {x["event_type"] for x in webhook_messages(env)} == {"notification.created"}


def test_narrowing_the_filter_cancels_queued_messages_it_no_longer_wants(
    make_env: Callable[..., Env],
) -> None:
    """Narrowing an endpoint's filter cancels queued messages of the dropped types."""
    env = make_env()
    with WebhookReceiver() as rx, env.dispatcher() as d:
        env.clock.freeze(real_now())
        endpoint_id, secret = register_endpoint(env, rx.url(), [])
        rx.secrets = [secret]
        finish_run(env, "narrow-1")
        queued = webhook_messages(env)
        assert len(queued) > 1
        ok(
            env.client.patch(
                f"/v1/webhook-endpoints/{endpoint_id}",
                json={"event_types": ["run.finished"]},
                headers=env.admin,
            )
        )
        while d.tick():
            pass

    assert [r.json()["type"] for r in rx.requests] == ["run.finished"]
    by_type = {x["event_type"]: x["status"] for x in webhook_messages(env)}
    assert by_type.pop("run.finished") == "accepted"
    assert set(by_type.values()) == {"cancelled"}


# --- person channels against real peers ------------------------------------------------


def test_email_arrives_neutral_with_a_stable_message_id_and_the_deep_link(
    make_env: Callable[..., Env],
) -> None:
    """One neutral mail with the deep link and a Message-ID that a retry keeps."""
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with env.dispatcher() as d:
            env.clock.freeze(real_now())
            smtp.defer_next()
            note_id = notification_id(
                finish_run(env, "mail-1", run={"notify_on_complete": True, "title": "Refactor"})
            )
            assert d.tick() == 1
            retry = person_deliveries(env, note_id)["email"]
            assert retry["status"] == "retry_scheduled"
            env.clock.freeze(at(retry["next_attempt_at"]))
            assert d.tick() == 1
        (mail,) = smtp.parsed()
        offered = smtp.parsed(offered=True)

    email_delivery = person_deliveries(env, note_id)["email"]
    assert email_delivery["status"] == "accepted"
    assert mail["Subject"] == "A run finished"
    assert mail["To"] == env.creds.owner_email
    assert mail["Message-ID"].startswith(f"<{email_delivery['id']}@")
    assert [m["Message-ID"] for m in offered] == [mail["Message-ID"]] * 2
    assert email_delivery["id"].startswith("dlv_")
    assert email_delivery["attempts"][-1]["provider_message_id"] == mail["Message-ID"]
    assert f"{PUBLIC}/n/{note_id}" in mail_text(mail)
    assert "Refactor" not in mail_text(mail)


def test_web_push_arrives_encrypted_as_a_pointer_and_410_forgets_the_subscription(
    make_env: Callable[..., Env],
) -> None:
    """Push: VAPID-signed, decrypted pointer with Urgency/TTL/Topic; 410 forgets it."""
    env = make_env()
    key = vapid_key(env)
    with PushReceiver(expected_vapid_key=key) as push, env.dispatcher() as d:
        env.clock.freeze(real_now())
        sub, sub_id = subscribe_push(env, push)
        note_id = notification_id(finish_run(env, "push-1", run={"notify_on_complete": True}))
        while d.tick():
            pass
        (got,) = push.received
        assert push.rejected == []

        push.unsubscribe(sub)
        gone_note = notification_id(finish_run(env, "push-2", run={"notify_on_complete": True}))
        while d.tick():
            pass

    assert got.vapid_key == key
    assert got.payload["id"] == note_id
    assert got.payload["url"] == f"{PUBLIC}/n/{note_id}"
    assert got.payload["title"] == "A run finished"
    assert got.urgency == "normal"
    assert got.ttl > 0
    assert got.topic == collapse_topic(f"{env.creds.tenant_id}:push-1")
    assert got.payload["tag"] == got.topic
    assert person_deliveries(env, note_id)["webpush"]["status"] == "accepted"

    assert [r.status for r in push.rejected] == [410]
    assert person_deliveries(env, gone_note)["webpush"]["status"] == "failed"
    listed = ok(env.client.get("/v1/me/push-subscriptions", headers=env.owner))
    assert listed["subscriptions"] == []
    assert sub_id not in json.dumps(listed)


def test_push_service_refusing_our_vapid_key_alerts_the_operator(
    make_env: Callable[..., Env],
) -> None:
    """A 403 from the push service fails the send, alerts the operator, keeps the sub."""
    env = make_env()
    with (
        PushReceiver(expected_vapid_key=VapidKeys.generate().public_key) as push,
        env.dispatcher() as d,
    ):
        env.clock.freeze(real_now())
        _, sub_id = subscribe_push(env, push)
        note_id = notification_id(finish_run(env, "vapid-1", run={"notify_on_complete": True}))
        while d.tick():
            pass

    assert [r.status for r in push.rejected] == [403] and push.received == []
    row = person_deliveries(env, note_id)["webpush"]
    assert row["status"] == "failed"
    with env.core.db.read() as conn:
        alerts = conn.execute(
            sa.select(t.operator_events).where(t.operator_events.c.tenant_id == env.creds.tenant_id)
        ).all()
    assert [(a.kind, a.detail["delivery_id"]) for a in alerts] == [
        ("delivery.misconfigured", row["id"])
    ]
    listed = ok(env.client.get("/v1/me/push-subscriptions", headers=env.owner))
    assert [s["id"] for s in listed["subscriptions"]] == [sub_id]


def test_chat_destination_gets_the_neutral_title_and_the_deep_link(
    make_env: Callable[..., Env],
) -> None:
    """A json:// chat destination gets one POST: the neutral title and the deep link."""
    env = make_env()
    with ChatReceiver() as chat, env.dispatcher() as d:
        env.clock.freeze(real_now())
        add_chat(env, chat)
        note_id = notification_id(finish_run(env, "chat-1", run={"notify_on_complete": True}))
        while d.tick():
            pass

    (request,) = chat.requests
    body = request.json()
    assert body["title"] == "A run finished"
    assert f"{PUBLIC}/n/{note_id}" in body["message"]
    assert person_deliveries(env, note_id)["chat"]["status"] == "accepted"


def test_ack_on_one_device_cancels_pending_retries_on_every_channel(
    make_env: Callable[..., Env],
) -> None:
    """Acknowledging cancels pending retries on email, push and chat; nothing more is sent."""
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            ChatReceiver() as chat,
            env.dispatcher() as d,
        ):
            env.clock.freeze(real_now())
            subscribe_push(env, push)
            add_chat(env, chat)
            smtp.defer_next()
            push.respond_next(503)
            chat.respond_next(500)
            note_id = notification_id(finish_run(env, "ack-1", run={"notify_on_complete": True}))
            assert d.tick() == 3
            before = person_deliveries(env, note_id)
            assert {c: before[c]["status"] for c in ("email", "webpush", "chat")} == {
                "email": "retry_scheduled",
                "webpush": "retry_scheduled",
                "chat": "retry_scheduled",
            }

            acked = ok(env.client.post(f"/v1/notifications/{note_id}/ack", headers=env.owner))
            assert acked["state"] == "acknowledged"
            after = person_deliveries(env, note_id)
            assert {c: after[c]["status"] for c in ("email", "webpush", "chat")} == {
                "email": "cancelled",
                "webpush": "cancelled",
                "chat": "cancelled",
            }

            env.clock.advance(86400)
            assert d.tick() == 0

            # Even an operator's replay cannot resend an acknowledged alert.
            replayed = ok(
                env.client.post(f"/v1/deliveries/{after['email']['id']}/replay", headers=env.admin)
            )
            assert replayed["status"] == "queued"
            assert d.tick() == 1
            assert person_deliveries(env, note_id)["email"]["status"] == "cancelled"

        assert smtp.attempts == 1 and smtp.raw == []
        assert push.received == [] and len(push.rejected) == 1
        assert len(chat.requests) == 1


# --- quiet hours -----------------------------------------------------------------------

# 2030-01-15 22:30 UTC is 23:30 in Berlin (UTC+1): inside 22:00-07:00; it ends 06:00 UTC.
IN_WINDOW = datetime(2030, 1, 15, 22, 30, tzinfo=UTC)
WINDOW_END = datetime(2030, 1, 16, 6, 0, tzinfo=UTC)
ALL_URGENCIES = ["low", "normal", "time_sensitive", "urgent"]


def test_quiet_hours_defer_a_low_priority_completion_to_the_window_end(
    make_env: Callable[..., Env],
) -> None:
    """Quiet hours defer a low-urgency send to the window's end, then it goes out."""
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        rule = {
            "id": "acme.completed_low_push",
            "when": {"attention": "completed"},
            "decision": "push",
            "urgency": "low",
        }
        ok(env.client.put("/v1/policy", json={"rules": [rule]}, headers=env.admin))
        set_quiet_hours(env, consent={"email": ALL_URGENCIES})
        deferred_before = metric(env, "runbell_deferred_quiet_hours_total", channel="email")
        with env.dispatcher() as d:
            env.clock.freeze(IN_WINDOW)
            answer = finish_run(env, "quiet-low")
            assert answer["notifications"][0]["urgency"] == "low"
            note_id = notification_id(answer)
            assert d.tick() == 1
            held = person_deliveries(env, note_id)["email"]
            assert held["status"] == "deferred"
            assert at(held["next_attempt_at"]) == WINDOW_END
            assert smtp.attempts == 0
            assert (
                metric(env, "runbell_deferred_quiet_hours_total", channel="email")
                == deferred_before + 1
            )

            env.clock.freeze(WINDOW_END - timedelta(seconds=1))
            assert d.tick() == 0
            env.clock.freeze(WINDOW_END)
            assert d.tick() == 1
        assert len(smtp.raw) == 1

    assert person_deliveries(env, note_id)["email"]["status"] == "accepted"


@pytest.mark.parametrize("bypass", [True, False], ids=["bypass-rule", "no-rule"])
def test_urgent_failure_bypasses_quiet_hours_only_with_a_tenant_rule(
    make_env: Callable[..., Env], bypass: bool
) -> None:
    """Urgent skips quiet hours only by tenant rule, never because the runtime asks."""
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        if bypass:
            ok(
                env.client.put(
                    "/v1/policy", json={"quiet_hours_bypass": ["urgent"]}, headers=env.admin
                )
            )
        set_quiet_hours(env)
        # What a runtime (or a model driving it) might try: neither counts.
        asks = {"quiet_hours_bypass": ["urgent"], "bypass_quiet_hours": True}
        with env.dispatcher() as d:
            env.clock.freeze(IN_WINDOW)
            answer = finish_run(
                env,
                "quiet-urgent",
                "failed",
                run={"metadata": asks},
                error={
                    "message": "credentials expired",
                    "user_action_required": True,
                    **asks,
                },
            )
            assert answer["notifications"][0]["urgency"] == "urgent"
            note_id = notification_id(answer)
            assert d.tick() == 1
        row = person_deliveries(env, note_id)["email"]
        if bypass:
            assert row["status"] == "accepted"
            assert len(smtp.raw) == 1
        else:
            assert row["status"] == "deferred"
            assert at(row["next_attempt_at"]) == WINDOW_END
            assert smtp.attempts == 0


# --- access checked at dispatch time ---------------------------------------------------


def test_revoked_membership_cancels_sends_and_redacts_the_preview(
    make_env: Callable[..., Env],
) -> None:
    """Revoked before dispatch: nothing sent, deliveries cancelled, preview redacted."""
    with SmtpPeer() as smtp:
        # One delivery at a time: the concurrent case is the test below.
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port, worker_concurrency=1)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            ChatReceiver() as chat,
            env.dispatcher() as d,
        ):
            env.clock.freeze(real_now())
            subscribe_push(env, push)
            add_chat(env, chat)
            answer = finish_run(
                env, "revoked-1", run={"notify_on_complete": True}, reason="shipped the fix"
            )
            note_id = notification_id(answer)
            assert trail(env, note_id)["reason"] == "shipped the fix"

            with env.core.db.transaction() as tx:
                accounts.revoke_member(tx.conn, env.creds.tenant_id, env.creds.owner_id, tx.now)
            while d.tick():
                pass

        assert smtp.attempts == 0
        assert push.received == [] and push.rejected == []
        assert chat.requests == []

    after = trail(env, note_id)
    assert after["state"] == "revoked"
    assert after["summary"] == "Notification withdrawn"
    assert after["reason"] is None
    statuses = {x["channel"]: x["status"] for x in after["deliveries"]}
    assert statuses["email"] == statuses["webpush"] == statuses["chat"] == "cancelled"


def test_revoked_recipient_with_many_destinations_is_withdrawn_in_one_pass(
    make_env: Callable[..., Env], request: pytest.FixtureRequest
) -> None:
    """A revoked recipient's concurrent deliveries are all cancelled in one pass."""
    env = make_env()
    with ChatReceiver() as chat, env.dispatcher() as d:
        env.clock.freeze(real_now())
        for _ in range(4):
            add_chat(env, chat)
        note_id = notification_id(finish_run(env, "revoked-many", run={"notify_on_complete": True}))
        with env.core.db.transaction() as tx:
            accounts.revoke_member(tx.conn, env.creds.tenant_id, env.creds.owner_id, tx.now)
        assert d.tick() == 4  # four chat destinations (no SMTP here: no email row at all)

    assert chat.requests == []
    after = trail(env, note_id)
    assert after["state"] == "revoked"
    assert after["summary"] == "Notification withdrawn"
    outbound = [x["status"] for x in after["deliveries"] if x["channel"] != "inbox"]
    assert outbound == ["cancelled"] * 4


def test_consent_and_destinations_are_checked_when_the_send_is_due(
    make_env: Callable[..., Env],
) -> None:
    """Consent withdrawn or a destination removed before dispatch stops that send."""
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            ChatReceiver() as chat,
            env.dispatcher() as d,
        ):
            env.clock.freeze(real_now())
            subscribe_push(env, push)
            chat_id = add_chat(env, chat)
            note_id = notification_id(
                finish_run(env, "late-change", run={"notify_on_complete": True})
            )
            assert set(person_deliveries(env, note_id)) == {"inbox", "email", "webpush", "chat"}
            ok(
                env.client.put(
                    "/v1/me/preferences", json={"consent": {"email": ["urgent"]}}, headers=env.owner
                )
            )
            r = env.client.delete(f"/v1/me/chat-destinations/{chat_id}", headers=env.owner)
            assert r.status_code == 204
            assert d.tick() == 3

        assert smtp.attempts == 0
        assert chat.requests == []
        assert len(push.received) == 1

    statuses = {c: x["status"] for c, x in person_deliveries(env, note_id).items()}
    assert statuses == {
        "inbox": "accepted",
        "email": "skipped",
        "chat": "cancelled",
        "webpush": "accepted",
    }


# --- lock-screen safety ----------------------------------------------------------------

PLANT = "SECRET-PLANTED-7"
MARKERS = {f: f"{PLANT}-{f}" for f in ("title", "objective", "details", "metadata", "reason")}
MARKERS["error"] = f"{PLANT}-error"


def _paths(value: Any, needle: str, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Where in a JSON document ``needle`` occurs (in keys or values)."""
    if isinstance(value, dict):
        found = [(*path, str(k)) for k in value if needle in str(k)]
        for k, v in value.items():
            found += _paths(v, needle, (*path, str(k)))
        return found
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _paths(v, needle, (*path, str(i)))]
    return [path] if isinstance(value, str) and needle in value else []


def test_no_rendered_payload_carries_run_details(make_env: Callable[..., Env]) -> None:
    """Planted run secrets reach no mail, push or chat; webhooks carry only the reason."""
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            ChatReceiver() as chat,
            WebhookReceiver() as rx,
            env.dispatcher() as d,
        ):
            env.clock.freeze(real_now())
            subscribe_push(env, push)
            add_chat(env, chat)
            _, secret = register_endpoint(env, rx.url(), [])
            rx.secrets = [secret]
            finish_run(
                env,
                "leak-1",
                "failed",
                run={
                    "title": MARKERS["title"],
                    "objective": MARKERS["objective"],
                    "details": {"prompt": MARKERS["details"]},
                    "metadata": {"ticket": MARKERS["metadata"]},
                    "notify_on_complete": True,
                },
                reason=MARKERS["reason"],
                error={"message": MARKERS["error"], "user_action_required": True},
            )
            while d.tick():
                pass

        assert len(smtp.raw) == 1 and len(push.received) == 1 and len(chat.requests) == 1
        (mail,) = smtp.parsed()
        mail_seen = smtp.raw[0].decode("ascii", "replace") + mail_text(mail)
        assert PLANT not in mail_seen
        assert PLANT.encode() not in push.received[0].plaintext
        assert PLANT not in chat.requests[0].text
        assert len(rx.requests) >= 3 and all(r.status == 200 for r in rx.requests)

    allowed = {("data", "reason"), ("data", "stop_reason")}
    for request in rx.requests:
        for name in ("title", "objective", "details", "metadata", "error"):
            assert MARKERS[name] not in request.text, (name, request.json()["type"])
        body = request.json()
        assert set(_paths(body, MARKERS["reason"])) <= allowed, body
    finished = rx.of_type("run.finished")[0].json()
    assert finished["data"]["stop_reason"] == MARKERS["reason"]


# --- metrics -------------------------------------------------------------------------


def test_metrics_show_created_notifications_and_accepted_deliveries(
    make_env: Callable[..., Env],
) -> None:
    """/metrics shows created notifications, accepted deliveries and delivery counts."""
    env = make_env()
    with WebhookReceiver() as rx, env.dispatcher() as d:
        env.clock.freeze(real_now())
        _, secret = register_endpoint(env, rx.url(), ["run.finished"])
        rx.secrets = [secret]
        created = metric(env, "runbell_notifications_created_total", attention_type="completed")
        accepted = metric(env, "runbell_deliveries_accepted_total", channel="webhook")
        finish_run(env, "metrics-1", run={"notify_on_complete": True})
        while d.tick():
            pass

    assert (
        metric(env, "runbell_notifications_created_total", attention_type="completed")
        == created + 1
    )
    assert metric(env, "runbell_deliveries_accepted_total", channel="webhook") == accepted + 1
    assert metric(env, "runbell_deliveries", channel="webhook", status="accepted") == 1
    assert metric(env, "runbell_deliveries", channel="inbox", status="accepted") == 1
    # No SMTP is configured here: no email row was queued (the worker would only skip it).
    assert metric(env, "runbell_deliveries", channel="email", status="skipped") == 0
    assert metric(env, "runbell_deliveries", channel="email", status="queued") == 0
    text = env.client.get("/metrics").text
    assert 'runbell_deliveries{channel="webhook",status="accepted"} 1.0' in text
