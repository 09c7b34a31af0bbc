"""The operations ledger, worker fencing, honest counts and completion owned by the run
(DESIGN §2 inv. 1, 3, 11, 15; issue 10 items 1-3). Every test runs on SQLite and on
PostgreSQL, through the HTTP API, with the injectable clock."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows import operations as ledger_flow
from runbell.flows.context import Core
from runbell.store import runs as run_store
from runbell.store import sessions
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, make_tenant
from tests.conftest import LiveServer, bearer
from tests.timeouts import WAIT, scaled

PLANTED = "SECRET-PAYLOAD-9931"


# --- helpers -----------------------------------------------------------------------------


def rows(core: Core, table: sa.Table, tenant_id: str, **where: Any) -> list[dict[str, Any]]:
    q = sa.select(table).where(table.c.tenant_id == tenant_id)
    for name, value in where.items():
        q = q.where(table.c[name] == value)
    with core.db.read() as conn:
        return [dict(r._mapping) for r in conn.execute(q).all()]


def make_run(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    r = client.put(
        f"/v1/runs/{run_id}",
        json={"owner": creds.owner_email, "state": "working", "title": "Sync invoices"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text


def op(op_id: str, target_id: str | None = None, intent: str = "mark paid") -> dict[str, Any]:
    return {
        "operation_id": op_id,
        "target": {"type": "invoice", "id": target_id or f"INV-{op_id}", "version": 3},
        "intent": intent,
        "details": {"amount": 120, "token": PLANTED},
        "idempotency_key": f"dest-{op_id}",
    }


def declare(
    client: TestClient,
    creds: TenantCreds,
    run_id: str,
    body: dict[str, Any],
    status: int = 201,
    **headers: str,
) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/operations",
        json=body,
        headers={**bearer(creds.runtime_key), **headers},
    )
    assert r.status_code == status, r.text
    return dict(r.json())


def move(
    client: TestClient,
    creds: TenantCreds,
    run_id: str,
    op_id: str,
    state: str,
    status: int = 200,
    **extra: Any,
) -> dict[str, Any]:
    r = client.patch(
        f"/v1/runs/{run_id}/operations/{op_id}",
        json={"state": state, **extra},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == status, r.text
    return dict(r.json())


def complete(client: TestClient, creds: TenantCreds, run_id: str, **extra: Any) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": f"{run_id}-done", "state": "completed", **extra},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def snapshot(client: TestClient, creds: TenantCreds, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def twelve(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    """Twelve operations sent: nine confirmed, two conflicts, one reply lost."""
    make_run(client, creds, run_id)
    declare(client, creds, run_id, {"operations": [op(f"op-{i}") for i in range(1, 13)]})
    for i in range(1, 13):
        move(client, creds, run_id, f"op-{i}", "sent")
    for i in range(1, 10):
        move(client, creds, run_id, f"op-{i}", "confirmed", evidence={"receipt_id": f"r-{i}"})
    for i in (10, 11):
        move(client, creds, run_id, f"op-{i}", "conflict", evidence={"status": 409})
    move(client, creds, run_id, "op-12", "uncertain", evidence={"error": "timeout after 30 s"})


def notes_of(core: Core, creds: TenantCreds, run_id: str) -> list[dict[str, Any]]:
    found = rows(core, t.notifications, creds.tenant_id, run_id=run_id)
    return sorted(found, key=lambda n: n["transition_version"])


def add_webhook(client: TestClient, creds: TenantCreds) -> None:
    r = client.post(
        "/v1/webhook-endpoints",
        json={"url": "http://127.0.0.1:9/hook"},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 201, r.text


def webhooks(core: Core, creds: TenantCreds) -> list[dict[str, Any]]:
    return [d["payload"] for d in rows(core, t.deliveries, creds.tenant_id, channel="webhook")]


# --- completion owned by the run ---------------------------------------------------------


def test_nine_confirmed_two_conflicts_one_lost_reply_is_a_review_not_a_success(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    twelve(client, creds, "sync-1")
    res = complete(client, creds, "sync-1", reason="all invoices processed")
    assert res["outcome"] == "applied"
    assert res["run"]["state"] == "completed" and res["run"]["outcome"] == "needs_review"
    [note] = res["notifications"]
    assert note["attention_type"] == "needs_review"
    assert note["reason"].startswith("9 confirmed, 2 conflicts, 1 uncertain")
    assert "conflicts: op-10, op-11" in note["reason"] and "uncertain: op-12" in note["reason"]
    assert [n["attention_type"] for n in notes_of(core, creds, "sync-1")] == ["needs_review"]
    shown = snapshot(client, creds, "sync-1")
    assert shown["operations"] == {
        "counts": {"confirmed": 9, "conflict": 2, "uncertain": 1},
        "text": "9 confirmed, 2 conflicts, 1 uncertain",
    }
    assert shown["outcome"] == "needs_review"
    [open_note] = shown["open_notifications"]
    assert open_note["attention_type"] == "needs_review"


def test_the_lost_reply_confirmed_later_updates_the_review_once(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    twelve(client, creds, "sync-2")
    finished = complete(client, creds, "sync-2")["run"]
    # While it is uncertain, new work on the same target and intent is refused.
    r = client.post(
        "/v1/runs/sync-2/operations",
        json=op("op-12-retry", target_id="INV-op-12"),
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 409, r.text
    assert "'op-12'" in r.json()["detail"] and "may already have landed" in r.json()["detail"]
    assert "resolve it first" in r.json()["detail"]
    assert r.json()["current"]["operation"]["state"] == "uncertain"
    assert "details" not in r.json()["current"]["operation"]  # it may be another run's
    make_run(client, creds, "sync-2-retry")  # nor may another run retry it
    r = client.post(
        "/v1/runs/sync-2-retry/operations",
        json={"operations": [op("fresh"), op("op-12-again", target_id="INV-op-12")]},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 409 and "may already have landed" in r.json()["detail"], r.text
    assert rows(core, t.operations, creds.tenant_id, run_id="sync-2-retry") == []
    clock.advance(300)
    res = move(
        client,
        creds,
        "sync-2",
        "op-12",
        "confirmed",
        evidence={"lookup": "invoice INV-op-12 is paid", "checked_by": "reconciler"},
    )
    assert res["changed"] is True
    run = res["run"]
    assert run["state"] == "completed" and run["version"] == finished["version"] + 1
    assert run["outcome"] == "needs_review"  # two conflicts still need a look
    assert res["summary"]["text"] == "10 confirmed, 2 conflicts"
    first, second = notes_of(core, creds, "sync-2")
    assert (first["state"], second["state"]) == ("superseded", "open")
    assert second["attention_type"] == "needs_review"
    assert second["transition_version"] == run["version"]
    assert second["reason"].startswith("10 confirmed, 2 conflicts")
    # Repeating the same move changes nothing: still two notifications, one open.
    again = move(
        client,
        creds,
        "sync-2",
        "op-12",
        "confirmed",
        evidence={"lookup": "invoice INV-op-12 is paid", "checked_by": "reconciler"},
    )
    assert again["changed"] is False and again["run"]["version"] == run["version"]
    assert len(notes_of(core, creds, "sync-2")) == 2
    with core.db.read() as conn:
        history = run_store.list_transitions(conn, creds.tenant_id, "sync-2")
    assert [h.kind for h in history][-2:] == ["state", "review"]
    assert history[-1].from_state == history[-1].to_state == "completed"
    # Once resolved, new work on that target is accepted again.
    make_run(client, creds, "sync-2b")
    declare(client, creds, "sync-2b", op("op-13", target_id="INV-op-12"))


def test_a_review_that_ends_all_confirmed_is_resolved_and_the_success_follows(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    make_run(client, creds, "sync-3")
    declare(client, creds, "sync-3", {"operations": [op("a"), op("b")]})
    for name in ("a", "b"):
        move(client, creds, "sync-3", name, "sent")
    move(client, creds, "sync-3", "a", "confirmed")
    res = complete(client, creds, "sync-3")
    assert res["run"]["outcome"] == "unknown"
    [note] = res["notifications"]
    assert note["attention_type"] == "needs_review"
    assert "outcome unknown" in note["reason"] and "b" in note["reason"]
    move(client, creds, "sync-3", "b", "uncertain")
    move(client, creds, "sync-3", "b", "absent", evidence={"lookup": "no such change"})
    shown = snapshot(client, creds, "sync-3")
    assert shown["outcome"] == "verified" and shown["state"] == "completed"
    assert shown["operations"]["text"] == "1 confirmed, 1 confirmed absent"
    kinds = [(n["attention_type"], n["state"]) for n in notes_of(core, creds, "sync-3")]
    assert kinds == [
        ("needs_review", "superseded"),  # unknown → review of the uncertain one
        ("needs_review", "resolved"),  # → everything settled
        ("completed", "open"),
    ]
    resolved = notes_of(core, creds, "sync-3")[1]
    assert resolved["closed_reason"] == ("every operation settled: 1 confirmed, 1 confirmed absent")


def test_all_confirmed_completes_as_verified_and_no_operations_keeps_todays_meaning(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    make_run(client, creds, "ok-1")
    declare(client, creds, "ok-1", op("x"))
    move(client, creds, "ok-1", "x", "sent")
    move(client, creds, "ok-1", "x", "confirmed")
    res = complete(client, creds, "ok-1")
    assert res["run"]["outcome"] == "verified"
    assert [n["attention_type"] for n in res["notifications"]] == ["completed"]
    assert res["notifications"][0]["reason"] == "1 confirmed"
    # effects_verified: false without operations is still a review; without it, success.
    make_run(client, creds, "plain-1")
    res = complete(client, creds, "plain-1", effects_verified=False)
    assert res["run"]["outcome"] == "needs_review"
    assert [n["attention_type"] for n in res["notifications"]] == ["needs_review"]
    make_run(client, creds, "plain-2")
    res = complete(client, creds, "plain-2")
    assert res["run"]["outcome"] is None
    assert [n["attention_type"] for n in res["notifications"]] == ["completed"]
    assert snapshot(client, creds, "plain-2")["operations"] == {
        "counts": {},
        "text": "no operations",
    }


# --- the ledger --------------------------------------------------------------------------


def test_declaring_is_idempotent_per_operation_id_and_another_body_is_a_conflict(
    client: TestClient, creds: TenantCreds
) -> None:
    make_run(client, creds, "led-1")
    first = declare(client, creds, "led-1", op("one"))
    assert first["created"] == ["one"]
    [row] = first["operations"]
    assert row["state"] == "planned" and row["details"]["token"] == PLANTED
    assert row["target"] == {"type": "invoice", "id": "INV-one", "version": "3"}
    again = declare(client, creds, "led-1", op("one"), status=200)
    assert again["created"] == [] and again["operations"] == first["operations"]
    # A batch with the known one and a new one: only the new one is created.
    both = declare(client, creds, "led-1", {"operations": [op("one"), op("two")]})
    assert both["created"] == ["two"]
    changed = op("one", intent="mark refunded")
    r = client.post("/v1/runs/led-1/operations", json=changed, headers=bearer(creds.runtime_key))
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["field"] == "operation_id" and body["current"]["operation"]["intent"] == (
        "mark paid"
    )
    listed = client.get("/v1/runs/led-1/operations", headers=bearer(creds.owner_token)).json()
    assert [o["operation_id"] for o in listed["operations"]] == ["one", "two"]
    assert listed["operations"][0]["intent"] == "mark paid"
    assert listed["operations"][0]["evidence"] is None


def test_an_idempotency_key_replays_the_declaration(client: TestClient, creds: TenantCreds) -> None:
    make_run(client, creds, "led-k")
    headers = {**bearer(creds.runtime_key), "Idempotency-Key": "decl-1"}
    a = client.post("/v1/runs/led-k/operations", json=op("k1"), headers=headers)
    b = client.post("/v1/runs/led-k/operations", json=op("k1"), headers=headers)
    assert a.status_code == b.status_code == 201
    assert a.content == b.content and b.headers["Idempotent-Replayed"] == "true"


def test_illegal_moves_are_409_with_the_operation_as_it_is(
    client: TestClient, creds: TenantCreds
) -> None:
    make_run(client, creds, "led-2")
    declare(client, creds, "led-2", op("m"))
    refused = client.patch(
        "/v1/runs/led-2/operations/m",
        json={"state": "confirmed"},
        headers=bearer(creds.runtime_key),
    )
    assert refused.status_code == 409, refused.text
    assert "planned -> confirmed is not allowed" in refused.json()["detail"]
    assert refused.json()["current"]["operation"]["state"] == "planned"
    move(client, creds, "led-2", "m", "sent")
    move(client, creds, "led-2", "m", "failed", evidence={"status": 500})
    final = client.patch(
        "/v1/runs/led-2/operations/m",
        json={"state": "sent"},
        headers=bearer(creds.runtime_key),
    )
    assert final.status_code == 409 and "final" in final.json()["detail"]
    rewrite = client.patch(
        "/v1/runs/led-2/operations/m",
        json={"state": "failed", "evidence": {"status": 502}},
        headers=bearer(creds.runtime_key),
    )
    assert rewrite.status_code == 409 and "evidence is not rewritten" in rewrite.json()["detail"]
    history = client.get("/v1/runs/led-2/operations", headers=bearer(creds.runtime_key)).json()
    [m] = history["operations"]
    assert [h["state"] for h in m["history"]] == ["planned", "sent", "failed"]
    assert m["evidence"] == {"status": 500}
    bad = client.patch(
        "/v1/runs/led-2/operations/m",
        json={"state": "done"},
        headers=bearer(creds.runtime_key),
    )
    assert bad.status_code == 422 and bad.json()["field"] == "state"
    missing = client.patch(
        "/v1/runs/led-2/operations/nope",
        json={"state": "sent"},
        headers=bearer(creds.runtime_key),
    )
    assert missing.status_code == 404


def test_bad_declarations_are_422_naming_the_field(client: TestClient, creds: TenantCreds) -> None:
    make_run(client, creds, "led-3")
    cases = [
        ({"operations": [{**op("a"), "intent": ""}]}, "operations.0.intent"),
        ({"operations": []}, "operations"),
        ({**op("a"), "target": {"type": "invoice"}}, "target.id"),
        ({"target": {"type": "x", "id": "y"}, "intent": "z"}, "operation_id"),
        ({"operations": [op("a"), op("a")]}, "operations"),
    ]
    for body, field in cases:
        r = client.post("/v1/runs/led-3/operations", json=body, headers=bearer(creds.runtime_key))
        assert r.status_code == 422, (body, r.text)
        assert r.json()["field"] == field, (body, r.json())


def test_another_tenants_run_and_operations_are_404(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    make_run(client, creds, "mine-1")
    declare(client, creds, "mine-1", op("o"))
    other = make_tenant(core, "globex")
    for method, path, body in (
        ("GET", "/v1/runs/mine-1/operations", None),
        ("POST", "/v1/runs/mine-1/operations", op("p")),
        ("PATCH", "/v1/runs/mine-1/operations/o", {"state": "sent"}),
        ("POST", "/v1/runs/mine-1/claim", {"worker_id": "w"}),
    ):
        key = other.owner_token if method == "GET" else other.runtime_key
        r = client.request(method, path, json=body, headers=bearer(key))
        assert r.status_code == 404, (method, path, r.text)
    # A person of this tenant without access to the run does not see it either; the
    # owner's token is not a runtime key, so it cannot write the ledger.
    r = client.post("/v1/runs/mine-1/operations", json=op("q"), headers=bearer(creds.owner_token))
    assert r.status_code == 403
    assert [o["state"] for o in rows(core, t.operations, creds.tenant_id)] == ["planned"]


def test_details_never_reach_the_feed_or_webhooks(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    add_webhook(client, creds)
    make_run(client, creds, "sec-1")
    declare(client, creds, "sec-1", {"operations": [op("s1"), op("s2")]})
    move(client, creds, "sec-1", "s1", "sent")
    move(client, creds, "sec-1", "s1", "confirmed", evidence={"receipt": PLANTED})
    move(client, creds, "sec-1", "s2", "sent")
    move(client, creds, "sec-1", "s2", "uncertain")
    complete(client, creds, "sec-1")
    events = client.get("/v1/events?after=earliest", headers=bearer(creds.runtime_key)).json()
    updates = [e for e in events["events"] if e["type"] == "operation.updated"]
    assert [(e["data"]["operation_id"], e["data"]["state"]) for e in updates] == [
        ("s1", "planned"),
        ("s2", "planned"),
        ("s1", "sent"),
        ("s1", "confirmed"),
        ("s2", "sent"),
        ("s2", "uncertain"),
    ]
    assert updates[0]["data"]["target"] == {"type": "invoice", "id": "INV-s1"}
    assert updates[0]["data"]["intent"] == "mark paid"
    hooks = webhooks(core, creds)
    types = Counter(h["type"] for h in hooks)
    assert types["operation.updated"] == 6 and types["run.finished"] == 1
    [finished] = [h["data"] for h in hooks if h["type"] == "run.finished"]
    assert finished["operations"] == {
        "counts": {"confirmed": 1, "uncertain": 1},
        "text": "1 confirmed, 1 uncertain",
    }
    assert finished["outcome"] == "needs_review"
    assert PLANTED not in str(events) and PLANTED not in str(hooks)
    assert "dest-s1" not in str(hooks)  # the destination's key stays in the ledger too
    # The authenticated ledger has them.
    listed = client.get("/v1/runs/sec-1/operations", headers=bearer(creds.owner_token)).json()
    assert listed["operations"][0]["details"]["token"] == PLANTED


# --- worker fencing ----------------------------------------------------------------------


def test_a_replaced_workers_late_update_is_rejected_by_its_epoch(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    make_run(client, creds, "fence-1")

    def claim(worker: str) -> dict[str, Any]:
        r = client.post(
            "/v1/runs/fence-1/claim", json={"worker_id": worker}, headers=bearer(creds.runtime_key)
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    first = claim("worker-a")
    assert first["epoch"] == 1 and claim("worker-a")["epoch"] == 1  # same worker, same epoch
    declare(client, creds, "fence-1", {"operations": [op("f1"), op("f2")], "epoch": 1})
    move(client, creds, "fence-1", "f1", "sent", epoch=1)
    second = claim("worker-b")
    assert second["epoch"] == 2 and second["previous_worker_id"] == "worker-a"
    assert second["previous_worker_may_still_act"] is True
    shown = snapshot(client, creds, "fence-1")
    assert shown["previous_worker_may_still_act"] is True
    browser = TestClient(client.app)  # the owner's browser, signed in through a real link
    with core.db.transaction() as tx:
        link = sessions.create_login_link(tx.conn, creds.tenant_id, creds.owner_id, tx.now)
    assert browser.get(f"/auth/{link}", follow_redirects=False).status_code == 303
    warning = "The previous worker may still cause an effect"
    assert warning in browser.get("/runs/fence-1").text
    assert shown["worker"] == {"id": "worker-b", "epoch": 2}
    # worker-a wakes up and reports: refused, and nothing changed.
    late = client.patch(
        "/v1/runs/fence-1/operations/f1",
        json={"state": "confirmed", "epoch": 1},
        headers=bearer(creds.runtime_key),
    )
    assert late.status_code == 409, late.text
    assert late.json()["detail"].startswith("superseded worker: epoch 1")
    assert late.json()["current"]["epoch"] == 2
    late_decl = client.post(
        "/v1/runs/fence-1/operations",
        json={"operations": [op("f3")], "epoch": 1},
        headers=bearer(creds.runtime_key),
    )
    assert late_decl.status_code == 409 and "superseded worker" in late_decl.json()["detail"]
    never = client.patch(
        "/v1/runs/fence-1/operations/f2",
        json={"state": "sent", "epoch": 7},
        headers=bearer(creds.runtime_key),
    )
    assert never.status_code == 409 and "never issued" in never.json()["detail"]
    # The new worker re-declares the same ids (idempotent) and settles the old send.
    declare(client, creds, "fence-1", {"operations": [op("f1"), op("f2")], "epoch": 2}, 200)
    move(client, creds, "fence-1", "f1", "uncertain", epoch=2)
    assert snapshot(client, creds, "fence-1")["previous_worker_may_still_act"] is False
    page = browser.get("/runs/fence-1").text
    assert warning not in page and "1 uncertain, 1 planned" in page
    listed = client.get("/v1/runs/fence-1/operations", headers=bearer(creds.runtime_key)).json()
    assert [o["state"] for o in listed["operations"]] == ["uncertain", "planned"]


# --- the interfaces cancellation calls -----------------------------------------------------


def test_mark_not_started_and_summary(client: TestClient, core: Core, creds: TenantCreds) -> None:
    make_run(client, creds, "cx-1")
    declare(client, creds, "cx-1", {"operations": [op(f"c{i}") for i in range(1, 6)]})
    for i in (1, 2, 3, 4):
        move(client, creds, "cx-1", f"c{i}", "sent")
    for i in (1, 2, 3):
        move(client, creds, "cx-1", f"c{i}", "confirmed")
    move(client, creds, "cx-1", "c4", "uncertain")
    with core.db.transaction() as tx:
        run = run_store.require_run(tx.conn, creds.tenant_id, "cx-1", for_update=True)
        assert ledger_flow.mark_not_started(tx, run) == 1
    with core.db.transaction() as tx:
        run = run_store.require_run(tx.conn, creds.tenant_id, "cx-1", for_update=True)
        assert ledger_flow.mark_not_started(tx, run) == 0  # nothing planned any more
    with core.db.read() as conn:
        got = ledger_flow.summary(conn, creds.tenant_id, "cx-1")
    assert got == {
        "counts": {"confirmed": 3, "uncertain": 1, "not_started": 1},
        "text": "3 confirmed, 1 uncertain, 1 not started",
        "uncertain": ["c4"],
        "kept": 3,
    }
    events = client.get("/v1/events?after=earliest", headers=bearer(creds.runtime_key)).json()
    [marked] = [e for e in events["events"] if e["data"].get("state") == "not_started"]
    assert marked["data"]["operation_id"] == "c5" and marked["data"]["from"] == "planned"


def test_two_lookups_racing_to_confirm_the_lost_reply_review_it_once(
    client: TestClient, core: Core, creds: TenantCreds, live: LiveServer
) -> None:
    """Two reconcilers find the lost reply at the same moment and both report it, on real
    threads against a real server: one moves it and reviews the run, the other is answered
    ``changed: false`` — one new version, one new review notification."""
    twelve(client, creds, "race-1")
    finished = complete(client, creds, "race-1")["run"]
    barrier = threading.Barrier(4)
    lookup = {"state": "confirmed", "evidence": {"lookup": "paid"}}

    def report(_: int) -> httpx.Response:
        with httpx.Client(base_url=live.url, timeout=WAIT, trust_env=False) as http:
            barrier.wait(timeout=WAIT)
            return http.patch(
                "/v1/runs/race-1/operations/op-12",
                json=lookup,
                headers=bearer(creds.runtime_key),
            )

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(report, i) for i in range(4)]
        answers = [f.result(timeout=scaled(120)) for f in futures]
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert sorted(a.json()["changed"] for a in answers) == [False, False, False, True]
    assert {a.json()["run"]["version"] for a in answers} == {finished["version"] + 1}
    reviews = [n for n in notes_of(core, creds, "race-1") if n["attention_type"] == "needs_review"]
    assert [n["state"] for n in reviews] == ["superseded", "open"]


def test_a_run_without_a_ledger_costs_its_completion_no_ledger_query(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    """Most runs declare nothing: their hot path (a completed signal, the snapshot) reads
    no ``operations`` row. Once one is declared, the same path counts the ledger."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        seen.append(sql)

    def ledger_reads() -> int:
        return sum(1 for sql in seen if "FROM operations" in sql)

    make_run(client, creds, "plain-1")
    make_run(client, creds, "ledger-1")
    declare(client, creds, "ledger-1", {"operations": [op("only")]})
    sa.event.listen(core.db.engine, "before_cursor_execute", record)
    try:
        done = complete(client, creds, "plain-1")
        assert [n["attention_type"] for n in done["notifications"]] == ["completed"]
        snap = client.get("/v1/runs/plain-1", headers=bearer(creds.owner_token)).json()
        assert snap["operations"] == {"counts": {}, "text": "no operations"}
        assert ledger_reads() == 0
        complete(client, creds, "ledger-1")
        assert ledger_reads() > 0  # declared work is judged by the ledger
    finally:
        sa.event.remove(core.db.engine, "before_cursor_execute", record)
