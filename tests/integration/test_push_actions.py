"""Acting from a web push notification (issue 19 item 2; DESIGN §2 inv. 9, 11).

Real pushes to the decrypting RFC 8030 receiver, the real delivery worker and scheduler,
the test clock, on SQLite and PostgreSQL: the actions and their token are read from the
decrypted payload exactly as a browser's service worker would get them, and posted back
to ``POST /v1/push-actions`` with no credential but the token."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from runbell.dispatch.scheduler import Scheduler
from runbell.domain import push_actions as pa
from runbell.flows import retention
from runbell.flows.attention import RETRACTED_BODY, RETRACTED_TITLE
from runbell.ids import token_hash
from runbell.store import tables as t
from runbell.testing import make_tenant
from tests.channels.push_receiver import PushReceiver, Received
from tests.conftest import Env
from tests.peers import Dispatcher

LOCK_SCREEN_RULE = {
    "id": "acme.answer_from_lock_screen",
    "when": {"attention": "input_required"},
    "decision": "push",
    "urgency": "time_sensitive",
    "lock_screen_answers": True,
    "snooze_s": 600,
}
SECRET_SUMMARY = "Delete the staging database?"
SECRET_COMMAND = "psql -c 'drop database staging'"


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return dict(response.json())


def vapid_key(env: Env) -> str:
    return str(ok(env.client.get("/v1/push/vapid-public-key"))["public_key"])


def subscribe(env: Env, push: PushReceiver) -> dict[str, Any]:
    sub = push.new_subscription()
    ok(env.client.post("/v1/me/push-subscriptions", json=sub, headers=env.owner), 201)
    return sub


def settle(d: Dispatcher) -> None:
    while d.tick():
        pass


def start(env: Env, run_id: str) -> None:
    body = {"owner": env.creds.owner_email, "state": "working"}
    ok(env.client.put(f"/v1/runs/{run_id}", json=body, headers=env.runtime), 201)


def ask(
    env: Env,
    run_id: str,
    request_id: str,
    *,
    expires_in_s: int = 1800,
    action: dict[str, Any] | None = None,
) -> dict[str, Any]:
    at = env.clock() + timedelta(seconds=expires_in_s)
    extra = {} if action is None else {"action": action}
    return dict(
        ok(
            env.client.post(
                f"/v1/runs/{run_id}/input-requests",
                json={
                    "input_request_id": request_id,
                    "kind": "approval",
                    "summary": SECRET_SUMMARY,
                    "details": {"command": SECRET_COMMAND},
                    "expires_at": at.isoformat(),
                    **extra,
                },
                headers=env.runtime,
            ),
            201,
        )
    )


def act(env: Env, token: str, action: str) -> Any:
    # No Authorization header, no cookie: the token is the whole credential.
    return env.client.post("/v1/push-actions", json={"token": token, "action": action})


def trail(env: Env, note_id: str) -> dict[str, Any]:
    return dict(ok(env.client.get(f"/v1/notifications/{note_id}/trail", headers=env.admin)))


def actions_of(got: Received) -> list[str]:
    return [a["action"] for a in got.payload.get("actions", [])]


def assert_lock_screen_safe(got: Received) -> None:
    """Invariant 11: nothing of the request in anything a lock screen shows; the token
    only in its own field of the encrypted payload."""
    text = got.plaintext.decode()
    assert SECRET_SUMMARY not in text and "drop database" not in text
    visible = [got.payload["title"], got.payload["body"], got.payload["url"]]
    visible += [a["title"] for a in got.payload.get("actions", [])]
    for shown in visible:
        assert got.payload["token"] not in shown
    assert {a["title"] for a in got.payload["actions"]} <= {
        "Approve",
        "Reject",
        "Acknowledge",
        "Snooze 1 h",
        "Snooze 10 min",
    }


def setup(env: Env, push: PushReceiver, rule: dict[str, Any] | None) -> None:
    if rule is not None:
        ok(env.client.put("/v1/policy", json={"rules": [rule]}, headers=env.admin))
    subscribe(env, push)


def test_approve_from_the_notification_answers_once(make_env: Callable[..., Env]) -> None:
    env = make_env()
    t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        setup(env, push, LOCK_SCREEN_RULE)
        start(env, "pa-1")
        opened = ask(env, "pa-1", "req-pa-1")
        (note,) = opened["notifications"]
        settle(d)
        (got,) = push.received
        assert actions_of(got) == ["approve", "reject", "acknowledge", "snooze"]
        assert got.payload["actions"][3]["title"] == "Snooze 10 min"
        assert_lock_screen_safe(got)

        answered = ok(act(env, got.payload["token"], "approve"))
        assert answered["decision"] == "approve" and answered["notification_id"] == note["id"]
        assert answered["state"] == "resolved"
        req = ok(env.client.get("/v1/input-requests/req-pa-1", headers=env.owner))["input_request"]
        assert req["state"] == "answered"
        run = ok(env.client.get("/v1/runs/pa-1", headers=env.owner))
        assert run["state"] == "working"

        # Single use: the same token again (any action) is refused, and changes nothing.
        again = problem(act(env, got.payload["token"], "reject"), 409)
        assert "used already" in again["detail"]
        problem(act(env, got.payload["token"], "acknowledge"), 409)

    # Only the token's hash is kept, until the token expires; the retention sweep forgets it.
    assert used_tokens(env) == [token_hash(got.payload["token"])]
    env.clock.freeze(t0 + timedelta(seconds=1801))
    retention.sweep(env.core, env.clock())
    assert used_tokens(env) == []


def used_tokens(env: Env) -> list[str]:
    u = t.push_action_uses
    with env.core.db.read() as conn:
        return [str(h) for h in conn.execute(sa.select(u.c.token_hash)).scalars()]


def test_rule_flag_off_offers_no_answers(make_env: Callable[..., Env]) -> None:
    env = make_env()
    env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        setup(env, push, None)  # the default policy: lock_screen_answers is off
        start(env, "pa-2")
        (note,) = ask(env, "pa-2", "req-pa-2")["notifications"]
        settle(d)
        (got,) = push.received
        assert actions_of(got) == ["acknowledge", "snooze"]
        assert got.payload["actions"][1]["title"] == "Snooze 1 h"
        assert_lock_screen_safe(got)
        token = got.payload["token"]

        refused = problem(act(env, token, "approve"), 403)
        assert "open Runbell" in refused["detail"]
        req = ok(env.client.get("/v1/input-requests/req-pa-2", headers=env.owner))["input_request"]
        assert req["state"] == "pending"
        # A refused answer did not use the token: Acknowledge still works, once.
        acked = ok(act(env, token, "acknowledge"))
        assert acked["state"] == "acknowledged"
        inbox = ok(env.client.get(f"/v1/notifications/{note['id']}", headers=env.owner))
        assert inbox["state"] == "acknowledged"
        assert trail(env, note["id"])["closed_reason"].startswith("acknowledged by")
        problem(act(env, token, "acknowledge"), 409)


def test_a_risky_action_is_never_answered_from_the_lock_screen(
    make_env: Callable[..., Env],
) -> None:
    """The rule allows lock-screen answers, but the request's action is flagged risky (a
    recursive delete): only Acknowledge and Snooze, and Approve is refused (issue 19 item
    2: never for requests flagged risky)."""
    env = make_env()
    env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        setup(env, push, LOCK_SCREEN_RULE)
        start(env, "pa-risky")
        risky = {"kind": "shell", "command": "rm -rf ./build", "cwd": "/srv/app"}
        opened = ask(env, "pa-risky", "req-pa-risky", action=risky)
        assert [r["code"] for r in opened["input_request"]["risks"]] == ["recursive_delete"]
        settle(d)
        (got,) = push.received
        assert actions_of(got) == ["acknowledge", "snooze"]
        problem(act(env, got.payload["token"], "approve"), 403)
        req = ok(env.client.get("/v1/input-requests/req-pa-risky", headers=env.owner))
        assert req["input_request"]["state"] == "pending"


def test_a_rule_flag_is_checked_when_the_policy_is_set(make_env: Callable[..., Env]) -> None:
    env = make_env()
    bad = {**LOCK_SCREEN_RULE, "lock_screen_answers": "yes"}
    got = problem(env.client.put("/v1/policy", json={"rules": [bad]}, headers=env.admin), 422)
    assert "lock_screen_answers" in got["detail"] or got.get("field") == "lock_screen_answers"
    short = {**LOCK_SCREEN_RULE, "snooze_s": 5}
    problem(env.client.put("/v1/policy", json={"rules": [short]}, headers=env.admin), 422)


def test_stale_after_a_newer_request_is_refused_and_replaced(
    make_env: Callable[..., Env],
) -> None:
    env = make_env()
    env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        setup(env, push, LOCK_SCREEN_RULE)
        start(env, "pa-3")
        ask(env, "pa-3", "req-pa-3a")
        settle(d)
        (first,) = push.received
        # The run asks again: the first request is superseded, a newer one is pushed.
        newer = ask(env, "pa-3", "req-pa-3b")
        (newer_note,) = newer["notifications"]
        settle(d)
        second = push.received[1]
        assert second.payload["id"] == newer_note["id"]
        assert second.payload["tag"] == first.payload["tag"]

        # The old notification's Approve (a device that never got the newer push).
        refused = problem(act(env, first.payload["token"], "approve"), 409)
        assert refused["current"]
        old = ok(env.client.get("/v1/input-requests/req-pa-3a", headers=env.owner))["input_request"]
        assert old["state"] == "superseded"
        assert (
            ok(env.client.get("/v1/input-requests/req-pa-3b", headers=env.owner))["input_request"][
                "state"
            ]
            == "pending"
        )
        # The browser is sent the current state in place of what it shows.
        settle(d)
        (replacement,) = push.received[2:]
        assert replacement.payload["replace_only"] is True
        assert replacement.payload["id"] == newer_note["id"]
        assert replacement.payload["tag"] == first.payload["tag"]
        assert actions_of(replacement)[:2] == ["approve", "reject"]
        assert_lock_screen_safe(replacement)
        # ... whose own token answers the newer request.
        assert ok(act(env, replacement.payload["token"], "reject"))["decision"] == "reject"
        problem(act(env, second.payload["token"], "approve"), 409)  # answered already


def test_answered_elsewhere_refuses_and_sends_handled(make_env: Callable[..., Env]) -> None:
    env = make_env()
    env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        setup(env, push, LOCK_SCREEN_RULE)
        start(env, "pa-4")
        opened = ask(env, "pa-4", "req-pa-4")
        settle(d)
        (first,) = push.received
        body = {
            "decision": "approve",
            "expected_run_version": opened["run"]["version"],
            "expected_request_version": 1,
        }
        ok(
            env.client.post(
                "/v1/input-requests/req-pa-4/responses",
                json=body,
                headers={**env.owner, "Idempotency-Key": "pa-4-web"},
            )
        )
        settle(d)  # the retraction of the answered notification
        before = len(push.received)
        refused = problem(act(env, first.payload["token"], "reject"), 409)
        assert "already answered" in refused["detail"]
        settle(d)
        (replacement,) = push.received[before:]
        assert replacement.payload["replace_only"] is True
        assert (replacement.payload["title"], replacement.payload["body"]) == (
            RETRACTED_TITLE,
            RETRACTED_BODY,
        )
        assert "token" not in replacement.payload


def test_snooze_pushes_again_after_the_period(make_env: Callable[..., Env]) -> None:
    env = make_env()
    t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        setup(env, push, LOCK_SCREEN_RULE)
        start(env, "pa-5")
        (note,) = ask(env, "pa-5", "req-pa-5", expires_in_s=7200)["notifications"]
        settle(d)
        (first,) = push.received
        snoozed = ok(act(env, first.payload["token"], "snooze"))
        until = t0 + timedelta(seconds=600)
        assert snoozed["snoozed_until"] == until.isoformat().replace("+00:00", "Z")
        assert snoozed["state"] == "open"
        (step,) = trail(env, note["id"])["escalation"]
        assert step["status"] == "pending" and step["channel"] == "webpush"
        assert step["reason"] == f"snoozed until {until:%Y-%m-%d %H:%M} UTC"
        problem(act(env, first.payload["token"], "snooze"), 409)  # once

        sched = Scheduler(env.core)
        env.clock.freeze(t0 + timedelta(seconds=599))
        assert sched.tick(env.clock())["escalation"] == 0
        settle(d)
        assert len(push.received) == 1
        env.clock.freeze(until)
        assert sched.tick(env.clock())["escalation"] == 1
        settle(d)
        (again,) = push.received[1:]
        assert again.payload["id"] == note["id"] and again.topic == first.topic
        assert "replace_only" not in again.payload
        assert again.payload["token"] != first.payload["token"]  # a new delivery, a new token
        assert actions_of(again) == actions_of(first)
        (step,) = trail(env, note["id"])["escalation"]
        assert step["status"] == "fired" and step["trigger"] == "snooze"
        assert step["reason"].startswith(f"snoozed until {until:%Y-%m-%d %H:%M} UTC")
        # The re-pushed notification answers like the first one would have.
        assert ok(act(env, again.payload["token"], "approve"))["decision"] == "approve"


def test_acknowledged_while_snoozed_is_not_pushed_again(make_env: Callable[..., Env]) -> None:
    env = make_env()
    t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        setup(env, push, None)
        start(env, "pa-6")
        (note,) = ask(env, "pa-6", "req-pa-6", expires_in_s=7200)["notifications"]
        settle(d)
        (first,) = push.received
        ok(act(env, first.payload["token"], "snooze"))
        ok(
            env.client.post(
                f"/v1/notifications/{note['id']}/ack",
                headers={**env.owner, "Idempotency-Key": "pa-6-ack"},
            )
        )
        env.clock.freeze(t0 + timedelta(seconds=3600))
        assert Scheduler(env.core).tick(env.clock())["escalation"] == 0
        (step,) = trail(env, note["id"])["escalation"]
        assert step["status"] == "cancelled"


def test_expired_forged_and_foreign_tokens(make_env: Callable[..., Env]) -> None:
    env = make_env()
    t0 = env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with (
        PushReceiver(expected_vapid_key=vapid_key(env)) as push,
        Dispatcher(env.core, env.clock) as d,
    ):
        setup(env, push, LOCK_SCREEN_RULE)
        start(env, "pa-7")
        ask(env, "pa-7", "req-pa-7", expires_in_s=300)
        settle(d)
        (got,) = push.received
        token = got.payload["token"]
    key = env.core.box.derive(pa.KEY_PURPOSE)
    claims = pa.verify(token, key)
    assert claims is not None and claims.answers and claims.run_version is not None
    assert claims.expires_at == int((t0 + timedelta(seconds=300)).timestamp())

    # Not made by this server (claims edited, or another key): 401.
    prefix, body, mac = token.split(".")
    forged = pa.sign(replace(claims, answers=True, snooze_s=60), b"not the key")
    problem(act(env, forged, "approve"), 401)
    problem(act(env, f"{prefix}.{body}x.{mac}", "approve"), 401)
    problem(act(env, "rbpa.e30.AAAA", "acknowledge"), 401)
    # Another tenant's: the notification does not exist there (404), whatever it says.
    other = make_tenant(env.core, "globex")
    problem(act(env, pa.sign(replace(claims, tenant_id=other.tenant_id), key), "approve"), 404)
    # Someone else's: the notification is not theirs (404).
    problem(act(env, pa.sign(replace(claims, recipient=other.owner_id), key), "acknowledge"), 404)
    problem(act(env, token, "delete"), 422)
    # Past the request's expiry (the token's): 410, and nothing was used.
    env.clock.freeze(t0 + timedelta(seconds=301))
    gone = problem(act(env, token, "approve"), 410)
    assert "expired" in gone["detail"]
    req = ok(env.client.get("/v1/input-requests/req-pa-7", headers=env.owner))["input_request"]
    assert req["state"] in ("pending", "expired")


def test_a_retried_send_carries_the_same_token(make_env: Callable[..., Env]) -> None:
    """The token is made from the delivery, not per try: a push sent twice (after an
    unknown outcome) offers one action, not two."""
    from runbell.flows import delivery_prepare

    env = make_env()
    env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
    with PushReceiver(expected_vapid_key=vapid_key(env)) as push:
        setup(env, push, LOCK_SCREEN_RULE)
        start(env, "pa-8")
        (note,) = ask(env, "pa-8", "req-pa-8")["notifications"]
    d = t.deliveries
    with env.core.db.read() as conn:
        (found,) = conn.execute(
            sa.select(d).where(d.c.notification_id == note["id"], d.c.channel == "webpush")
        ).all()
    row: Any = dict(found._mapping)
    one = delivery_prepare.prepare(env.core, row, env.clock())
    two = delivery_prepare.prepare(env.core, {**row, "attempt_count": 2}, env.clock())
    assert one.message is not None and two.message is not None
    assert one.message.action_token == two.message.action_token
    assert "[secret]" in repr(one.message) and one.message.action_token not in repr(one.message)
