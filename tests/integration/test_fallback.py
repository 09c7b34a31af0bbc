"""Fallback on failure (issue 18 item 10): a rule with ``fallback`` fires the next consented
rung of its ladder at once when a channel fails for good, not at the rung's time. SQLite
and PostgreSQL, injectable clock, real local peers: the RFC 8030 push receiver answering
410 (a subscription gone) or 500 (transient), and aiosmtpd for the email it falls back to."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from runbell.dispatch.scheduler import Scheduler
from runbell.dispatch.worker import Done
from runbell.flows.delivery_record import record_attempts
from runbell.store import tables
from tests.channels.push_receiver import PushReceiver
from tests.conftest import Env
from tests.integration.test_escalation import ok, subscribe, trail, vapid_key
from tests.peers import Dispatcher, SmtpPeer

FALLBACK_RULE = {
    "id": "acme.failed_fallback",
    "when": {"attention": "failed"},
    "decision": "push",
    "urgency": "normal",
    "escalation": [{"after_s": 600, "channel": "email"}],
    "fallback": True,
}


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
    assert note["rule_id"] == "acme.failed_fallback"
    return str(note["id"])


def fallbacks_counted(env: Env) -> float:
    """``runbell_fallbacks_total`` from web push to email for failed alerts, from /metrics."""
    text = env.client.get("/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "runbell_fallbacks_total"
        and s.labels
        == {
            "attention_type": "failed",
            "from_channel": "webpush",
            "to_channel": "email",
            "trigger": "failed",
        }
    )


def by_channel(got: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in got["deliveries"]:
        out.setdefault(d["channel"], []).append(d["status"])
    return out


def capture(d: Dispatcher) -> list[Done]:
    """What the worker's record step was given, batch by batch (to replay it)."""
    seen: list[Done] = []
    real = d.worker._record

    def record(done: list[Done]) -> None:
        seen.extend(done)
        real(done)

    d.worker._record = record  # type: ignore[method-assign]
    return seen


def test_a_gone_push_subscription_falls_back_to_email_at_once_and_once(
    make_env: Callable[..., Env],
) -> None:
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            Dispatcher(env.core, env.clock) as d,
        ):
            t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
            ok(env.client.put("/v1/policy", json={"rules": [FALLBACK_RULE]}, headers=env.admin))
            # Two browsers, both gone (the push service answers 410): the channel failed.
            subs = [subscribe(env, push), subscribe(env, push)]
            for sub in subs:
                push.unsubscribe(sub)
            before = fallbacks_counted(env)
            recorded = capture(d)
            note_id = fail_run(env, "fb-gone")
            assert by_channel(trail(env, note_id)) == {
                "inbox": ["accepted"],
                "webpush": ["queued", "queued"],
            }

            assert d.tick() == 2  # both pushes answered 410 in one batch
            got = trail(env, note_id)
            # Queued at once, long before the rung's time (600 s).
            assert env.clock() == t0
            assert by_channel(got) == {
                "inbox": ["accepted"],
                "webpush": ["failed", "failed"],
                "email": ["queued"],
            }
            (step,) = got["escalation"]
            assert (step["status"], step["trigger"], step["on_failure"]) == (
                "fired",
                "failed",
                True,
            )
            assert step["reason"] == (
                "web push failed permanently; fell back to email: 1 email deliveries queued"
            )
            fell = [e for e in got["lifecycle"] if e["type"] == "notification.escalated"]
            assert [(e["data"]["channel"], e["data"]["trigger"]) for e in fell] == [
                ("email", "failed")
            ]
            assert fallbacks_counted(env) == before + 1

            # The record step replayed (a retried or late write): nothing doubles.
            failed = [done for done in recorded if done[2].outcome == "permanent"]
            assert len(failed) == 2
            record_attempts(
                env.core,
                failed,
                worker_id=d.worker.worker_id,
                rng=random.Random(1),
                clock=env.clock,
            )
            assert d.tick() == 1  # the email, sent through the gate like any delivery
            while d.tick():
                pass
            # The rung's own time comes: it fired already, nothing more is sent.
            env.clock.freeze(t0 + timedelta(seconds=600))
            assert Scheduler(env.core).tick(env.clock())["escalation"] == 0
            while d.tick():
                pass

        assert len(smtp.raw) == 1 and len(push.received) == 0
        assert "tool crashed" not in smtp.raw[0].decode()  # neutral text (invariant 11)
        got = trail(env, note_id)
        assert by_channel(got) == {
            "inbox": ["accepted"],
            "webpush": ["failed", "failed"],
            "email": ["accepted"],
        }
        assert fallbacks_counted(env) == before + 1
        # One attention record (invariant 1): the fallback added a delivery, not a notification.
        n = tables.notifications
        with env.core.db.read() as conn:
            ids = conn.execute(sa.select(n.c.id).where(n.c.run_id == "fb-gone")).scalars().all()
        assert list(ids) == [note_id]


def test_a_transient_failure_does_not_fall_back(make_env: Callable[..., Env]) -> None:
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            Dispatcher(env.core, env.clock) as d,
        ):
            t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
            ok(env.client.put("/v1/policy", json={"rules": [FALLBACK_RULE]}, headers=env.admin))
            subscribe(env, push)
            before = fallbacks_counted(env)
            push.respond_next(500)  # the push service is having a bad moment
            note_id = fail_run(env, "fb-transient")
            assert d.tick() == 1
            got = trail(env, note_id)
            assert by_channel(got) == {"inbox": ["accepted"], "webpush": ["retry_scheduled"]}
            assert [(s["status"], s["trigger"]) for s in got["escalation"]] == [("pending", None)]
            env.clock.freeze(t0 + timedelta(seconds=120))  # past the retry's backoff
            while d.tick():
                pass
        assert len(push.received) == 1 and smtp.raw == []
        got = trail(env, note_id)
        assert by_channel(got) == {"inbox": ["accepted"], "webpush": ["accepted"]}
        assert got["escalation"][0]["status"] == "pending"  # still on its own time
        assert fallbacks_counted(env) == before


def test_a_rule_without_fallback_waits_for_the_rung(make_env: Callable[..., Env]) -> None:
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            Dispatcher(env.core, env.clock) as d,
        ):
            env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
            rule = {k: v for k, v in FALLBACK_RULE.items() if k != "fallback"}
            ok(env.client.put("/v1/policy", json={"rules": [rule]}, headers=env.admin))
            push.unsubscribe(subscribe(env, push))
            note_id = fail_run(env, "fb-none")
            while d.tick():
                pass
        assert smtp.raw == []
        got = trail(env, note_id)
        assert by_channel(got) == {"inbox": ["accepted"], "webpush": ["failed"]}
        assert [(s["status"], s["on_failure"]) for s in got["escalation"]] == [("pending", False)]


def test_a_fallback_needs_a_ladder(make_env: Callable[..., Env]) -> None:
    env = make_env()
    rule = {k: v for k, v in FALLBACK_RULE.items() if k != "escalation"}
    answer = env.client.put("/v1/policy", json={"rules": [rule]}, headers=env.admin)
    assert answer.status_code == 422, answer.text
    assert "fallback needs an escalation ladder" in answer.text
    bad = {**FALLBACK_RULE, "fallback": {"unknown_after_s": 0}}
    answer = env.client.put("/v1/policy", json={"rules": [bad]}, headers=env.admin)
    assert answer.status_code == 422, answer.text


def test_a_receipt_unknown_past_the_bound_falls_back(make_env: Callable[..., Env]) -> None:
    """``fallback = { unknown_after_s = 60 }``: the push service takes the message and hangs
    up without answering (outcome unknown). Within the bound the push is only retried;
    once a retry is still unknown past it, email goes out meanwhile."""
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            Dispatcher(env.core, env.clock) as d,
        ):
            t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
            rule = {**FALLBACK_RULE, "fallback": {"unknown_after_s": 60}}
            ok(env.client.put("/v1/policy", json={"rules": [rule]}, headers=env.admin))
            subscribe(env, push)
            push.drop_next(times=2)
            note_id = fail_run(env, "fb-unknown")
            assert d.tick() == 1
            got = trail(env, note_id)
            assert by_channel(got) == {"inbox": ["accepted"], "webpush": ["delivery_unknown"]}
            assert got["escalation"][0]["status"] == "pending"  # within the bound: no fallback
            env.clock.freeze(t0 + timedelta(seconds=90))  # past the bound and the backoff
            assert d.tick() == 1  # the push again: still unknown
            got = trail(env, note_id)
            assert by_channel(got) == {
                "inbox": ["accepted"],
                "webpush": ["delivery_unknown"],
                "email": ["queued"],
            }
            (step,) = got["escalation"]
            assert step["trigger"] == "unknown"
            assert step["reason"].startswith("web push stayed unknown; fell back to email")
            while d.tick():
                pass
        assert len(smtp.raw) == 1


def test_no_fallback_to_a_channel_the_person_did_not_consent_to(
    make_env: Callable[..., Env],
) -> None:
    """The person takes email for urgent alerts only: a normal alert whose push is gone
    has nothing to fall back to; the rung stays on its time (where the gate skips it)."""
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            Dispatcher(env.core, env.clock) as d,
        ):
            env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
            ok(env.client.put("/v1/policy", json={"rules": [FALLBACK_RULE]}, headers=env.admin))
            prefs = {"consent": {"email": ["urgent"]}}
            ok(env.client.put("/v1/me/preferences", json=prefs, headers=env.owner))
            push.unsubscribe(subscribe(env, push))
            before = fallbacks_counted(env)
            note_id = fail_run(env, "fb-consent")
            while d.tick():
                pass
        assert smtp.raw == []
        got = trail(env, note_id)
        assert by_channel(got) == {"inbox": ["accepted"], "webpush": ["failed"]}
        assert [(s["status"], s["trigger"]) for s in got["escalation"]] == [("pending", None)]
        assert fallbacks_counted(env) == before
