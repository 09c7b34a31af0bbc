"""Throttled pushes (issue 19 item 5): at most N per recipient per key per window; the rest
fold into the digest or stay in the inbox, their trail says why, the next window starts
afresh, and concurrent workers never let the N+1-th through. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from runbell.domain.digests import window_of
from runbell.flows import digests as digest_flow
from runbell.flows.attention import raise_attention
from runbell.flows.policy import policy_in
from runbell.store import runs
from runbell.store import tables as t
from tests.conftest import Env
from tests.timeouts import WAIT

WINDOW_S = 600


def rule(**throttle: Any) -> dict[str, Any]:
    return {
        "id": "acme.nightly_failures",
        "when": {"attention": "failed"},
        "decision": "push",
        "urgency": "normal",
        "throttle": {"limit": 2, "window_s": WINDOW_S, "key": "kind", **throttle},
        "digest_key": "failures",
        "digest_window_s": WINDOW_S,
    }


@pytest.fixture
def env(make_env: Callable[..., Env]) -> Env:
    return make_env()


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def start_of_window() -> datetime:
    start, _ = window_of(datetime(2030, 1, 15, 10, 3, tzinfo=UTC), WINDOW_S)
    return start + timedelta(seconds=5)


def fail(env: Env, run_id: str, kind: str = "nightly") -> dict[str, Any]:
    body = {"owner": env.creds.owner_email, "state": "working", "kind": kind}
    ok(env.client.put(f"/v1/runs/{run_id}", json=body, headers=env.runtime), 201)
    answer = ok(
        env.client.post(
            f"/v1/runs/{run_id}/signals",
            json={"event_id": f"{run_id}-end", "state": "failed"},
            headers=env.runtime,
        )
    )
    (note,) = answer["notifications"]
    return dict(note)


def trail(env: Env, note_id: str) -> dict[str, Any]:
    return dict(ok(env.client.get(f"/v1/notifications/{note_id}/trail", headers=env.admin)))


def count(env: Env, table: sa.Table, *where: Any) -> int:
    with env.core.db.read() as conn:
        return int(
            conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar_one()
        )


def test_pushes_over_the_limit_fold_into_the_digest_with_the_reason_in_the_trail(
    env: Env,
) -> None:
    start = env.clock.freeze(start_of_window())
    ok(env.client.put("/v1/policy", json={"rules": [rule()]}, headers=env.admin))
    notes = [fail(env, f"nightly-{i}") for i in range(4)]
    assert [n["decision"] for n in notes] == ["push", "push", "digest", "digest"]
    # Another kind counts on its own.
    assert fail(env, "weekly-0", kind="weekly")["decision"] == "push"

    pushed, folded = trail(env, notes[0]["id"]), trail(env, notes[2]["id"])
    assert "throttled" not in pushed["why"]
    assert folded["why"]["decision"] == "digest"
    assert folded["why"]["throttled"] == (
        "throttled: 2 in this 10 min window for runs of this kind; folded into the digest"
    )
    assert folded["why"]["inputs"]["throttled"]["count"] == 3
    assert {d["channel"] for d in folded["deliveries"]} == {"inbox"}
    assert count(env, t.digest_items) == 2

    # The folded two go out as one digest when the window closes.
    assert digest_flow.flush_due(env.core, start + timedelta(seconds=WINDOW_S)) == 1
    inbox = ok(env.client.get("/v1/notifications", headers=env.owner))["notifications"]
    (digest,) = [n for n in inbox if n["attention_type"] == "digest"]
    shown = ok(env.client.get(f"/v1/notifications/{digest['id']}", headers=env.owner))
    assert sorted(i["run_id"] for i in shown["digest"]["items"]) == ["nightly-2", "nightly-3"]

    # A new window starts afresh (and the closed window's count is pruned).
    env.clock.freeze(start + timedelta(seconds=WINDOW_S))
    assert [fail(env, f"later-{i}")["decision"] for i in range(3)] == ["push", "push", "digest"]
    digest_flow.flush_due(env.core, start + timedelta(seconds=WINDOW_S + 1))
    assert count(env, t.throttle_counts, t.throttle_counts.c.window_start < start) == 0


def test_then_inbox_keeps_them_in_the_inbox_only(env: Env) -> None:
    env.clock.freeze(start_of_window())
    ok(
        env.client.put(
            "/v1/policy", json={"rules": [rule(then="inbox", key="agent")]}, headers=env.admin
        )
    )
    notes = [fail(env, f"nightly-{i}", kind=f"k{i}") for i in range(3)]
    assert [n["decision"] for n in notes] == ["push", "push", "inbox"]
    why = trail(env, notes[2]["id"])["why"]
    assert why["throttled"] == (
        "throttled: 2 in this 10 min window for this agent; kept in the inbox only"
    )
    assert count(env, t.digest_items) == 0


def test_a_throttle_is_validated(env: Env) -> None:
    for bad, field in (
        ({"limit": 0}, "throttle.limit"),
        ({"limit": 2, "key": "planet"}, "throttle"),
        ({"limit": 2, "then": "email"}, "throttle"),
        ({"limit": 2, "window_s": 0}, "throttle"),
        ({"limit": 2, "extra": 1}, "throttle"),
    ):
        doc = {"rules": [{**rule(), "throttle": bad}]}
        r = env.client.put("/v1/policy", json=doc, headers=env.admin)
        assert r.status_code == 422, (bad, r.text)
        assert field in r.text
    inbox_rule = {**rule(), "decision": "inbox", "urgency": "low"}
    r = env.client.put("/v1/policy", json={"rules": [inbox_rule]}, headers=env.admin)
    assert r.status_code == 422 and "throttle" in r.text
    # The dry-run (and the settings page's preview, which calls it) takes the same fields.
    preview = {"rules": [rule(), {**rule(), "id": "acme.x", "throttle": {"limit": 0}}]}
    r = env.client.post("/v1/policy/dry-run", json=preview, headers=env.admin)
    assert r.status_code == 422 and "throttle.limit" in r.text
    report = ok(env.client.post("/v1/policy/dry-run", json={"rules": [rule()]}, headers=env.admin))
    assert "throttles are not counted" in report["limits"]
    # The effective rules show the throttle as written (defaults filled in).
    ok(env.client.put("/v1/policy", json={"rules": [rule()]}, headers=env.admin))
    effective = ok(env.client.get("/v1/policy", headers=env.admin))["effective"][0]
    assert effective["throttle"] == {
        "limit": 2,
        "window_s": WINDOW_S,
        "key": "kind",
        "then": "digest",
    }


def test_concurrent_workers_never_let_the_limit_plus_one_through(env: Env, db_url: str) -> None:
    """Eight transactions raise a failure for one person at once, throttled to three per
    window: exactly three are pushed, whatever the interleaving. On PostgreSQL all eight
    transactions are open together before any counts (the barrier is inside them); SQLite
    serialises writers whole, so there it is before."""
    env.clock.freeze(start_of_window())
    limit, workers = 3, 8
    doc = {"rules": [rule(limit=limit, key="recipient")]}
    ok(env.client.put("/v1/policy", json=doc, headers=env.admin))
    for i in range(workers):
        body = {"owner": env.creds.owner_email, "state": "working", "kind": "nightly"}
        ok(env.client.put(f"/v1/runs/race-{i}", json=body, headers=env.runtime), 201)
    postgres = db_url.startswith("postgresql")
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def raise_one(i: int) -> None:
        try:
            if not postgres:
                barrier.wait(timeout=WAIT)
            with env.core.db.transaction() as tx:
                run = runs.get_run(tx.conn, env.creds.tenant_id, f"race-{i}")
                assert run is not None
                policy = policy_in(env.core, tx, env.creds.tenant_id)
                if postgres:
                    barrier.wait(timeout=WAIT)
                raise_attention(
                    tx,
                    policy,
                    run,
                    attention="failed",
                    version=run.version + 1,
                    facts={},
                    reason=None,
                    owner_present=False,
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=raise_one, args=(i,)) for i in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=WAIT)
    assert errors == []
    n = t.notifications
    failed = n.c.attention_type == "failed"
    assert count(env, n, failed, n.c.decision == "push") == limit
    assert count(env, n, failed, n.c.decision == "digest") == workers - limit
    assert count(env, t.digest_items) == workers - limit
    with env.core.db.read() as conn:
        hits = conn.execute(sa.select(t.throttle_counts.c.hits)).scalar_one()
    assert hits == workers
