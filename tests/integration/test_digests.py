"""Digests that are sent (issue 10 item 7; DESIGN §2 inv. 1, 11, 12; §7 "several
low-priority completions → one digest"). Every test runs on SQLite and PostgreSQL with an
injectable clock; email goes to a real aiosmtpd peer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.channels.webpush import collapse_topic
from runbell.dispatch.scheduler import Scheduler
from runbell.domain.digests import window_of
from runbell.flows import digests as digest_flow
from runbell.flows import members
from runbell.store import digests as store_digests
from runbell.store import outbox as store_outbox
from runbell.store import sessions
from runbell.store import tables as t
from runbell.testing import add_user
from tests.channels.push_receiver import PushReceiver
from tests.conftest import Env
from tests.peers import ChatReceiver, Dispatcher, SmtpPeer, WebhookReceiver, mail_text
from tests.timeouts import WAIT

WINDOW_S = 600
DIGEST_RULE = {
    "id": "completed.digest_all",
    "when": {"attention": "completed"},
    "decision": "digest",
    "urgency": "low",
    "digest_window_s": WINDOW_S,
    "digest_max_items": 50,
}
ALL = ["low", "normal", "time_sensitive", "urgent"]


@pytest.fixture
def smtp() -> Iterator[SmtpPeer]:
    with SmtpPeer() as peer:
        yield peer


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as peer:
        yield peer


@pytest.fixture
def env(make_env: Callable[..., Env], smtp: SmtpPeer) -> Env:
    return make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def window_start() -> datetime:
    """A moment just after a window opened (real time: mail headers carry dates)."""
    start, _ = window_of(datetime.now(UTC).replace(microsecond=0), WINDOW_S)
    return start + timedelta(seconds=5)


def set_up(env: Env, rule: dict[str, Any] | None = None) -> None:
    ok(env.client.put("/v1/policy", json={"rules": [rule or DIGEST_RULE]}, headers=env.admin))
    # Low-urgency mail is opt-in (DESIGN: consent per urgency): this owner opted in.
    ok(env.client.put("/v1/me/preferences", json={"consent": {"email": ALL}}, headers=env.owner))


def finish(env: Env, run_id: str, state: str = "completed", **signal: Any) -> dict[str, Any]:
    body = {"owner": env.creds.owner_email, "state": "working", "title": f"Task {run_id}"}
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


def count(env: Env, table: sa.Table, *where: Any) -> int:
    with env.core.db.read() as conn:
        return int(
            conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar_one()
        )


def digest_notes(env: Env) -> list[dict[str, Any]]:
    inbox = ok(env.client.get("/v1/notifications", headers=env.owner))["notifications"]
    return [n for n in inbox if n["attention_type"] == "digest"]


def twelve(env: Env) -> list[str]:
    run_ids = [f"quiet-{i:02d}" for i in range(12)]
    for run_id in run_ids:
        (note,) = finish(env, run_id)["notifications"]
        assert note["decision"] == "digest"
    return run_ids


def test_twelve_quiet_completions_make_one_digest_and_an_urgent_failure_does_not_wait(
    env: Env, smtp: SmtpPeer, receiver: WebhookReceiver
) -> None:
    start = env.clock.freeze(window_start())
    set_up(env)
    hook = ok(
        env.client.post(
            "/v1/webhook-endpoints",
            json={"url": receiver.url(), "event_types": ["notification.created"]},
            headers=env.admin,
        ),
        201,
    )
    receiver.secrets.append(hook["secret"])
    run_ids = twelve(env)
    failed = finish(env, "broken", "failed", error={"user_action_required": True})
    (urgent,) = failed["notifications"]
    assert (urgent["decision"], urgent["urgency"]) == ("push", "urgent")
    with Dispatcher(env.core, env.clock) as d:
        while d.tick():
            pass
        # The urgent failure went out at once; nothing of the twelve has been mailed.
        assert [m["Subject"] for m in smtp.parsed()] == ["A run failed"]
        assert count(env, t.digest_items, t.digest_items.c.digest_id.is_(None)) == 12

        scheduler = Scheduler(env.core)
        assert scheduler.tick(start + timedelta(seconds=WINDOW_S - 10))["digests"] == 0
        closed = start + timedelta(seconds=WINDOW_S)
        env.clock.freeze(closed)
        assert scheduler.tick(closed)["digests"] == 1
        assert scheduler.tick(closed + timedelta(seconds=1))["digests"] == 0
        while d.tick():
            pass

    (digest,) = digest_notes(env)
    assert (digest["decision"], digest["urgency"], digest["summary"]) == (
        "push",
        "low",
        "12 runs finished",
    )
    shown = ok(env.client.get(f"/v1/notifications/{digest['id']}", headers=env.owner))
    assert shown["run"] is None
    assert shown["digest"]["count"] == 12
    assert sorted(i["run_id"] for i in shown["digest"]["items"]) == run_ids
    assert {i["link"] for i in shown["digest"]["items"]} == {f"/runs/{r}" for r in run_ids}
    assert all(i["title"].startswith("Task quiet-") for i in shown["digest"]["items"])

    # One mail for the digest: neutral (a count, no titles), pointing at the digest.
    subjects = [m["Subject"] for m in smtp.parsed()]
    assert subjects == ["A run failed", "12 runs finished"]
    text = mail_text(smtp.parsed()[1])
    assert f"/n/{digest['id']}" in text
    assert "Task quiet" not in text
    trail = ok(env.client.get(f"/v1/notifications/{digest['id']}/trail", headers=env.admin))
    channels = {d["channel"]: d["status"] for d in trail["deliveries"]}
    assert channels == {"inbox": "accepted", "email": "accepted", "webhook": "accepted"}
    assert trail["digest"]["count"] == 12
    assert trail["why"]["inputs"]["items"] == 12

    # The tenant's webhook heard of the digest once, thin: ids and counts, no titles.
    (sent,) = [
        r.json()["data"]
        for r in receiver.of_type("notification.created")
        if r.json()["data"]["attention_type"] == "digest"
    ]
    assert (sent["notification_id"], sent["items"], sent["digest_key"]) == (
        digest["id"],
        12,
        "completed",
    )
    assert "Task" not in json.dumps(sent)

    # The web: the inbox shows the digest, and its deep link lists each run as a link.
    web = TestClient(env.client.app)
    with env.core.db.transaction() as tx:
        link = sessions.create_login_link(tx.conn, env.creds.tenant_id, env.creds.owner_id, tx.now)
    assert web.get(f"/auth/{link}", follow_redirects=False).status_code == 303
    inbox = web.get("/")
    assert inbox.status_code == 200, inbox.text
    assert f'href="/n/{digest["id"]}"' in inbox.text
    assert "/runs/digest:" not in inbox.text  # the synthetic run id is never a link
    page = web.get(f"/n/{digest['id']}")
    assert page.status_code == 200, page.text
    assert "12 runs finished" in page.text
    for run_id in run_ids:
        assert f'href="/runs/{run_id}"' in page.text
        assert f"Task {run_id}" in page.text


@pytest.mark.parametrize("via", ["scheduler", "sweep"])
def test_two_flushers_racing_make_exactly_one_digest(env: Env, via: str) -> None:
    """Two schedulers (on PostgreSQL the leader lock already picks one), and two sweeps
    called directly, past any lock: the unique digest identity and the item claims alone
    must still make exactly one digest."""
    start = env.clock.freeze(window_start())
    set_up(env)
    twelve(env)
    closed = start + timedelta(seconds=WINDOW_S)
    barrier = threading.Barrier(2)
    made: list[int] = []
    errors: list[BaseException] = []

    def flush() -> None:
        try:
            barrier.wait(timeout=WAIT)
            if via == "scheduler":
                made.append(Scheduler(env.core).tick(closed)["digests"])
            else:
                made.append(digest_flow.flush_due(env.core, closed))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=flush) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=WAIT)
    assert errors == []
    assert sorted(made) == [0, 1]
    assert count(env, t.digests) == 1
    assert count(env, t.notifications, t.notifications.c.attention_type == "digest") == 1
    assert count(env, t.digest_items, t.digest_items.c.digest_id.is_(None)) == 0
    # The losing flusher, run again, finds nothing left to send.
    assert digest_flow.flush_due(env.core, closed + timedelta(seconds=5)) == 0


class InjectedFault(RuntimeError):
    pass


def boom(*_: Any, **__: Any) -> NoReturn:
    raise InjectedFault("killed midway")


def test_a_flush_killed_midway_leaves_nothing_and_the_next_makes_one_digest(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = env.clock.freeze(window_start())
    set_up(env)
    twelve(env)
    closed = start + timedelta(seconds=WINDOW_S)
    # Killed after the digest row and the claims, while writing the outbox.
    monkeypatch.setattr(store_outbox, "add_deliveries", boom)
    with pytest.raises(InjectedFault):
        digest_flow.flush_due(env.core, closed)
    monkeypatch.undo()
    assert count(env, t.digests) == 0
    assert count(env, t.notifications, t.notifications.c.attention_type == "digest") == 0
    assert count(env, t.digest_items, t.digest_items.c.digest_id.is_(None)) == 12

    assert digest_flow.flush_due(env.core, closed + timedelta(seconds=1)) == 1
    assert digest_flow.flush_due(env.core, closed + timedelta(seconds=2)) == 0
    (digest,) = digest_notes(env)
    shown = ok(env.client.get(f"/v1/notifications/{digest['id']}", headers=env.owner))
    assert shown["digest"]["count"] == 12


def test_a_full_window_sends_early_in_parts_and_the_rest_at_its_close(env: Env) -> None:
    start = env.clock.freeze(window_start())
    set_up(env, {**DIGEST_RULE, "digest_max_items": 5})
    twelve(env)
    scheduler = Scheduler(env.core)
    assert scheduler.tick(start + timedelta(seconds=60))["digests"] == 2  # 5 + 5
    assert scheduler.tick(start + timedelta(seconds=120))["digests"] == 0  # 2 wait
    assert scheduler.tick(start + timedelta(seconds=WINDOW_S))["digests"] == 1
    sizes = sorted(
        ok(env.client.get(f"/v1/notifications/{n['id']}", headers=env.owner))["digest"]["count"]
        for n in digest_notes(env)
    )
    assert sizes == [2, 5, 5]
    with env.core.db.read() as conn:
        parts = sorted(r.part for r in conn.execute(sa.select(t.digests.c.part)))
        versions = sorted(
            r.transition_version
            for r in conn.execute(
                sa.select(t.notifications.c.transition_version).where(
                    t.notifications.c.attention_type == "digest"
                )
            )
        )
    assert parts == [1, 2, 3]
    assert versions == [1, 2, 3]


def test_digest_rules_are_validated_and_an_urgent_digest_rule_pushes(env: Env) -> None:
    bad = {**DIGEST_RULE, "digest_max_items": 0}
    r = env.client.put("/v1/policy", json={"rules": [bad]}, headers=env.admin)
    assert r.status_code == 422, r.text
    assert "digest_max_items" in r.text
    r = env.client.put(
        "/v1/policy",
        json={"rules": [{**DIGEST_RULE, "digest_key": "no spaces"}]},
        headers=env.admin,
    )
    assert r.status_code == 422
    env.clock.freeze(window_start())
    set_up(env, {**DIGEST_RULE, "urgency": "urgent"})
    (note,) = finish(env, "loud")["notifications"]
    assert (note["decision"], note["urgency"]) == ("push", "urgent")
    assert count(env, t.digest_items) == 0


def test_a_digest_goes_only_where_its_urgency_is_consented(env: Env) -> None:
    """Default consent leaves low urgency out of mail: a low digest stays in the inbox;
    a normal one is mailed (consent is read as the rows are made, and again at send)."""
    start = env.clock.freeze(window_start())
    rules = [
        {**DIGEST_RULE, "when": {"attention": "completed", "notify_on_complete": False}},
        {
            **DIGEST_RULE,
            "id": "completed.digest_asked",
            "when": {"attention": "completed", "notify_on_complete": True},
            "urgency": "normal",
            "digest_key": "asked",
        },
    ]
    ok(env.client.put("/v1/policy", json={"rules": rules}, headers=env.admin))
    for i in range(3):
        finish(env, f"quiet-{i}")
    for i in range(2):
        body = {"owner": env.creds.owner_email, "state": "working", "notify_on_complete": True}
        ok(env.client.put(f"/v1/runs/asked-{i}", json=body, headers=env.runtime), 201)
        ok(
            env.client.post(
                f"/v1/runs/asked-{i}/signals",
                json={"event_id": f"asked-{i}-end", "state": "completed"},
                headers=env.runtime,
            )
        )
    assert digest_flow.flush_due(env.core, start + timedelta(seconds=WINDOW_S)) == 2
    channels = {}
    for note in digest_notes(env):
        trail = ok(env.client.get(f"/v1/notifications/{note['id']}/trail", headers=env.admin))
        channels[(note["urgency"], trail["digest"]["key"], trail["digest"]["count"])] = sorted(
            d["channel"] for d in trail["deliveries"]
        )
    assert channels == {
        ("low", "completed", 3): ["inbox"],
        ("normal", "asked", 2): ["email", "inbox"],
    }


def test_a_former_members_waiting_items_are_never_sent(env: Env) -> None:
    start = env.clock.freeze(window_start())
    ok(env.client.put("/v1/policy", json={"rules": [DIGEST_RULE]}, headers=env.admin))
    user_id, _ = add_user(env.core, env.creds.tenant_id, "leaver@example.com")
    for i in range(3):
        body = {"owner": "leaver@example.com", "state": "working"}
        ok(env.client.put(f"/v1/runs/left-{i}", json=body, headers=env.runtime), 201)
        ok(
            env.client.post(
                f"/v1/runs/left-{i}/signals",
                json={"event_id": f"left-{i}-end", "state": "completed"},
                headers=env.runtime,
            )
        )
    assert count(env, t.digest_items) == 3
    members.revoke_member(env.core, env.creds.tenant_id, user_id)
    assert digest_flow.flush_due(env.core, start + timedelta(seconds=WINDOW_S)) == 0
    assert count(env, t.digests) == 0
    assert count(env, t.digest_items) == 0
    assert count(env, t.notifications, t.notifications.c.attention_type == "digest") == 0


def test_a_digest_reaches_web_push_and_chat_as_a_neutral_pointer(env: Env) -> None:
    """Every person channel renders a digest: its count, never a title, and /n/{id}."""
    key = str(ok(env.client.get("/v1/push/vapid-public-key"))["public_key"])
    with (
        PushReceiver(expected_vapid_key=key) as push,
        ChatReceiver() as chat,
        Dispatcher(env.core, env.clock) as d,
    ):
        start = env.clock.freeze(window_start())
        ok(env.client.put("/v1/policy", json={"rules": [DIGEST_RULE]}, headers=env.admin))
        consent = {"consent": {"webpush": ALL, "chat": ALL, "email": ["urgent"]}}
        ok(env.client.put("/v1/me/preferences", json=consent, headers=env.owner))
        sub = push.new_subscription()
        ok(env.client.post("/v1/me/push-subscriptions", json=sub, headers=env.owner), 201)
        body = {"url": chat.chat_url()}
        ok(env.client.post("/v1/me/chat-destinations", json=body, headers=env.owner), 201)
        for i in range(3):
            finish(env, f"quiet-{i}")
        assert d.tick() == 0  # the items themselves are never sent
        closed = env.clock.freeze(start + timedelta(seconds=WINDOW_S))
        assert digest_flow.flush_due(env.core, closed) == 1
        while d.tick():
            pass
        (got,) = push.received
        (posted,) = chat.requests

    (digest,) = digest_notes(env)
    link = f"http://testserver/n/{digest['id']}"
    assert (got.payload["title"], got.payload["url"], got.payload["id"]) == (
        "3 runs finished",
        link,
        digest["id"],
    )
    assert got.urgency == "low"
    assert got.topic == collapse_topic(f"{env.creds.tenant_id}:digest:completed")
    message = posted.json()
    assert message["title"] == "3 runs finished"
    assert link in message["message"]
    assert "Task" not in json.dumps(got.payload) + json.dumps(message)


def test_the_database_refuses_a_second_digest_of_one_identity(env: Env) -> None:
    """The last line of exactly-once, whatever the flushers do: uq_digest_once, and claims
    that only take unclaimed items."""
    start = env.clock.freeze(window_start())
    set_up(env)
    twelve(env)
    assert digest_flow.flush_due(env.core, start + timedelta(seconds=WINDOW_S)) == 1
    with env.core.db.read() as conn:
        first = dict(conn.execute(sa.select(t.digests)).one()._mapping)
        item_ids = [r.id for r in conn.execute(sa.select(t.digest_items.c.id))]
    with env.core.db.transaction() as tx:
        again = {**first, "id": "dig_again", "notification_id": "ntf_again"}
        assert store_digests.insert_digest(tx.conn, again) is False
        assert store_digests.claim(tx.conn, env.creds.tenant_id, "dig_again", item_ids) == 0
    assert count(env, t.digests) == 1
