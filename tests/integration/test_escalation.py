"""Escalation that retracts (issue 10 item 8; DESIGN §2 inv. 6, 11; §7 "not acknowledged
within a rule's escalation window → next channel"). A rule's ladder is scheduled as rows
with the notification; the scheduler fires due steps through the normal outbox; any close
stops them; an answer on one device replaces the push on the others (same Topic/tag,
neutral text). SQLite and PostgreSQL, injectable clock, real local peers: the Apprise
``json://`` chat receiver, aiosmtpd, and the decrypting RFC 8030 push receiver."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from runbell.app import build
from runbell.channels.webpush import collapse_topic
from runbell.dispatch.scheduler import Scheduler
from runbell.flows.attention import RETRACTED_BODY, RETRACTED_TITLE
from runbell.flows.context import Core
from tests.channels.push_receiver import PushReceiver
from tests.conftest import Env, make_settings
from tests.peers import ChatReceiver, Dispatcher, SmtpPeer
from tests.timeouts import WAIT

LADDER_RULE = {
    "id": "acme.failed_escalating",
    "when": {"attention": "failed"},
    "decision": "push",
    "urgency": "normal",
    "escalation": [{"after_s": 120, "channel": "chat"}, {"after_s": 600, "channel": "email"}],
}


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def set_ladder(env: Env) -> None:
    ok(env.client.put("/v1/policy", json={"rules": [LADDER_RULE]}, headers=env.admin))


def fail_run(env: Env, run_id: str) -> str:
    body = {"owner": env.creds.owner_email, "state": "working"}
    ok(env.client.put(f"/v1/runs/{run_id}", json=body, headers=env.runtime), 201)
    answer = ok(
        env.client.post(
            f"/v1/runs/{run_id}/signals",
            json={"event_id": f"{run_id}-end", "state": "failed", "reason": "tool crashed"},
            headers=env.runtime,
        )
    )
    (note,) = answer["notifications"]
    assert note["rule_id"] == "acme.failed_escalating"
    return str(note["id"])


def subscribe(env: Env, push: PushReceiver) -> dict[str, Any]:
    sub = push.new_subscription()
    ok(env.client.post("/v1/me/push-subscriptions", json=sub, headers=env.owner), 201)
    return sub


def add_chat(env: Env, chat: ChatReceiver) -> None:
    body = {"url": chat.chat_url()}
    ok(env.client.post("/v1/me/chat-destinations", json=body, headers=env.owner), 201)


def trail(env: Env, note_id: str) -> dict[str, Any]:
    return dict(ok(env.client.get(f"/v1/notifications/{note_id}/trail", headers=env.admin)))


def channels(env: Env, note_id: str) -> dict[str, str]:
    return {d["channel"]: d["status"] for d in trail(env, note_id)["deliveries"]}


def settle(d: Dispatcher) -> None:
    while d.tick():
        pass


def escalations_counted(env: Env, channel: str) -> float:
    """``runbell_escalations_total`` for failed alerts on ``channel``, scraped from /metrics."""
    text = env.client.get("/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "runbell_escalations_total"
        and s.labels == {"attention_type": "failed", "channel": channel}
    )


def vapid_key(env: Env) -> str:
    return str(ok(env.client.get("/v1/push/vapid-public-key"))["public_key"])


# --- the ladder --------------------------------------------------------------------------


def test_unacknowledged_notification_reaches_chat_then_email_on_schedule(
    make_env: Callable[..., Env],
) -> None:
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            ChatReceiver() as chat,
            Dispatcher(env.core, env.clock) as d,
        ):
            t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
            set_ladder(env)
            subscribe(env, push)
            add_chat(env, chat)
            sched, other = Scheduler(env.core), Scheduler(env.core)
            note_id = fail_run(env, "ladder-1")
            # The ladder's channels are held back: push and inbox now, chat and email later.
            assert channels(env, note_id) == {"inbox": "accepted", "webpush": "queued"}
            steps = trail(env, note_id)["escalation"]
            assert [(s["step_no"], s["channel"], s["status"]) for s in steps] == [
                (1, "chat", "pending"),
                (2, "email", "pending"),
            ]
            assert steps[0]["due_at"] == (t0 + timedelta(seconds=120)).isoformat().replace(
                "+00:00", "Z"
            )
            settle(d)
            assert len(push.received) == 1 and chat.requests == [] and smtp.raw == []

            chat_before = escalations_counted(env, "chat")
            env.clock.freeze(t0 + timedelta(seconds=119))
            assert sched.tick(env.clock())["escalation"] == 0
            env.clock.freeze(t0 + timedelta(seconds=120))
            assert sched.tick(env.clock())["escalation"] == 1
            assert other.tick(env.clock())["escalation"] == 0  # a second scheduler: no-op
            assert escalations_counted(env, "chat") == chat_before + 1  # the metric, once
            settle(d)
            assert len(chat.requests) == 1 and smtp.raw == []
            assert chat.requests[0].json()["title"] == "A run failed"  # neutral, inv. 11

            env.clock.freeze(t0 + timedelta(seconds=600))
            assert sched.tick(env.clock())["escalation"] == 1
            settle(d)
            assert len(smtp.raw) == 1 and len(chat.requests) == 1
            env.clock.advance(86_400)
            assert sched.tick(env.clock())["escalation"] == 0
            settle(d)

        assert len(push.received) == 1 and len(chat.requests) == 1 and len(smtp.raw) == 1
        assert "tool crashed" not in smtp.raw[0].decode()
        got = trail(env, note_id)
        assert {d["channel"]: d["status"] for d in got["deliveries"]} == {
            "inbox": "accepted",
            "webpush": "accepted",
            "chat": "accepted",
            "email": "accepted",
        }
        assert [(s["status"], s["deliveries"]) for s in got["escalation"]] == [
            ("fired", 1),
            ("fired", 1),
        ]
        escalated = [e for e in got["lifecycle"] if e["type"] == "notification.escalated"]
        assert [(e["data"]["step_no"], e["data"]["channel"]) for e in escalated] == [
            (1, "chat"),
            (2, "email"),
        ]


def test_acknowledged_a_second_before_the_step_nothing_further_is_sent(
    make_env: Callable[..., Env],
) -> None:
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with ChatReceiver() as chat, Dispatcher(env.core, env.clock) as d:
            t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
            set_ladder(env)
            add_chat(env, chat)
            sched = Scheduler(env.core)
            note_id = fail_run(env, "acked-1")
            settle(d)

            env.clock.freeze(t0 + timedelta(seconds=119))
            ok(env.client.post(f"/v1/notifications/{note_id}/ack", headers=env.owner))
            for at in (120, 600, 86_400):
                env.clock.freeze(t0 + timedelta(seconds=at))
                assert sched.tick(env.clock())["escalation"] == 0
                settle(d)

        assert chat.requests == [] and smtp.raw == [] and smtp.attempts == 0
        got = trail(env, note_id)
        assert got["state"] == "acknowledged"
        assert [(s["channel"], s["status"]) for s in got["escalation"]] == [
            ("chat", "cancelled"),
            ("email", "cancelled"),
        ]
        assert got["escalation"][0]["reason"].startswith("acknowledged")
        assert set(channels(env, note_id)) == {"inbox"}


def test_a_superseded_notification_stops_escalating(make_env: Callable[..., Env]) -> None:
    """Input required, then the run moves on: the request's alert is superseded and its
    ladder cancelled in the same transaction."""
    env = make_env()
    t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    rule = {
        "id": "acme.input_escalating",
        "when": {"attention": "input_required"},
        "decision": "push",
        "urgency": "normal",
        "escalation": [{"after_s": 60, "channel": "webpush"}],
    }
    ok(env.client.put("/v1/policy", json={"rules": [rule]}, headers=env.admin))
    body = {"owner": env.creds.owner_email, "state": "working"}
    ok(env.client.put("/v1/runs/sup-1", json=body, headers=env.runtime), 201)
    opened = ok(
        env.client.post(
            "/v1/runs/sup-1/input-requests",
            json={"input_request_id": "req-sup-1", "kind": "approval", "summary": "Go on?"},
            headers=env.runtime,
        ),
        201,
    )
    (note,) = opened["notifications"]
    ok(
        env.client.post(
            "/v1/runs/sup-1/signals",
            json={"event_id": "sup-1-working", "state": "working"},
            headers=env.runtime,
        )
    )
    env.clock.freeze(t0 + timedelta(seconds=61))
    assert Scheduler(env.core).tick(env.clock())["escalation"] == 0
    got = trail(env, note["id"])
    assert got["state"] == "superseded"
    assert [s["status"] for s in got["escalation"]] == ["cancelled"]


# --- retraction ----------------------------------------------------------------------


def test_answered_on_one_device_replaces_the_push_on_the_other(
    make_env: Callable[..., Env],
) -> None:
    env = make_env()
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
        phone, laptop = subscribe(env, push), subscribe(env, push)
        body = {"owner": env.creds.owner_email, "state": "working"}
        ok(env.client.put("/v1/runs/answer-1", json=body, headers=env.runtime), 201)
        opened = ok(
            env.client.post(
                "/v1/runs/answer-1/input-requests",
                json={
                    "input_request_id": "req-answer-1",
                    "kind": "approval",
                    "summary": "Push the fix to main?",
                    "details": {"command": "git push origin main"},
                    "expires_at": (t0 + timedelta(minutes=30)).isoformat(),
                },
                headers=env.runtime,
            ),
            201,
        )
        (note,) = opened["notifications"]
        settle(d)
        originals = {r.path: r for r in push.received}
        assert len(originals) == 2

        # Answered on the phone (any device: the server does not know which one).
        answer = env.client.post(
            "/v1/input-requests/req-answer-1/responses",
            json={
                "decision": "approve",
                "expected_run_version": opened["run"]["version"],
                "expected_request_version": 1,
            },
            headers={**env.owner, "Idempotency-Key": "answer-1"},
        )
        assert answer.status_code == 200, answer.text
        settle(d)

    replacements = push.received[2:]
    assert len(replacements) == 2
    laptop_path = urlsplit(laptop["endpoint"]).path
    assert {r.path for r in replacements} == set(originals) and laptop_path in originals
    for r in replacements:
        before = originals[r.path]
        assert r.topic == before.topic == collapse_topic(f"{env.creds.tenant_id}:answer-1")
        assert r.payload["tag"] == before.payload["tag"] == r.topic
        assert r.payload["replace_only"] is True
        assert (r.payload["title"], r.payload["body"]) == (RETRACTED_TITLE, RETRACTED_BODY)
        assert r.payload["require_interaction"] is False
        assert r.payload["id"] == note["id"]
        # Lock-screen safe: nothing of the request's summary or details.
        assert b"Push the fix" not in r.plaintext and b"git push" not in r.plaintext
    assert "replace_only" not in originals[laptop_path].payload
    got = trail(env, note["id"])
    assert got["state"] == "resolved"
    assert sorted(x["status"] for x in got["retractions"]) == ["accepted", "accepted"]
    assert phone != laptop


def test_a_bad_ladder_is_refused_naming_the_field(make_env: Callable[..., Env]) -> None:
    env = make_env()
    for ladder in (
        [{"after_s": 0, "channel": "chat"}],
        [{"after_s": 60, "channel": "pager"}],
        [{"after_s": 600, "channel": "chat"}, {"after_s": 120, "channel": "email"}],
        [{"after_s": 60}],
        "chat",
    ):
        rule = {**LADDER_RULE, "escalation": ladder}
        r = env.client.put("/v1/policy", json={"rules": [rule]}, headers=env.admin)
        assert r.status_code == 422, r.text
        assert "escalation" in r.text


def test_retention_prunes_a_closed_notification_with_its_steps(
    make_env: Callable[..., Env],
) -> None:
    """Steps live and go with their notification (ON DELETE CASCADE): the notification's
    prune is not blocked by them, and none is left behind."""
    from runbell.flows import retention
    from runbell.store import tables as t

    env = make_env()
    t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    set_ladder(env)
    note_id = fail_run(env, "pruned-1")
    ok(env.client.post(f"/v1/notifications/{note_id}/ack", headers=env.owner))
    assert [s["status"] for s in trail(env, note_id)["escalation"]] == ["cancelled"]
    retention.run(env.core, t0 + timedelta(days=200))
    with env.core.db.read() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(t.escalation_steps)).scalar_one()
        notes_left = conn.execute(
            sa.select(sa.func.count())
            .select_from(t.notifications)
            .where(t.notifications.c.id == note_id)
        ).scalar_one()
    assert (left, notes_left) == (0, 0)


def test_two_sweeps_without_leader_election_fire_a_step_once(
    make_env: Callable[..., Env], tmp_path: Path, db_url: str
) -> None:
    """Below the advisory lock: two escalation sweeps at once (two cores on one
    database) meet at the step's row lock; the step fires once, one chat delivery."""
    import threading

    from runbell.flows import escalation

    env = make_env()
    second = build(make_settings(tmp_path, db_url), clock=env.clock, migrate=False)
    try:
        t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
        set_ladder(env)
        with ChatReceiver() as chat:
            add_chat(env, chat)
            note_id = fail_run(env, "raced-esc-1")
        now = env.clock.freeze(t0 + timedelta(seconds=121))
        barrier = threading.Barrier(2)
        fired: list[int] = []

        def sweep(core: Core) -> None:
            barrier.wait(timeout=WAIT)
            fired.append(escalation.sweep(core, now))

        threads = [threading.Thread(target=sweep, args=(c,)) for c in (env.core, second)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=WAIT)
        assert sorted(fired) == [0, 1]
        got = trail(env, note_id)
        assert [d["channel"] for d in got["deliveries"]].count("chat") == 1
        assert [(s["channel"], s["status"]) for s in got["escalation"]] == [("chat", "fired")]
    finally:
        second.db.dispose()
