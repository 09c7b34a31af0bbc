"""Every write to a run goes through the process's group-commit writer (issue 21, Build 1).

Run create and update, progress, input requests (open, callback URL), answers (a
person's, a callback URL's), operations (declare, move), cancellation and amendments are
each one unit of ``core.writer`` — counted by its ``units`` counter, which moves only
when a unit's batch has committed. Concurrent creating PUTs of one run id all succeed,
one creates; a PUT that fails in a batch (409 on a finished run) answers its own error
while the others of the same batch commit. SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.domain.errors import Conflict
from runbell.domain.principal import Principal
from runbell.flows import machine_answers
from runbell.flows import runs as runs_flow
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user
from tests.conftest import bearer
from tests.integration.test_concurrency import race, select_all
from tests.integration.test_group_commit import HeldWriter
from tests.timeouts import WAIT

T = TypeVar("T")


def through_writer(core: Core, call: Callable[[], T]) -> T:
    """``call()``'s result, checking that it committed exactly one unit of the writer."""
    before = core.writer.units
    out = call()
    assert core.writer.units - before == 1, "the write did not go through the writer"
    return out


def ok(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    return dict(r.json())


def test_every_run_write_is_one_unit_of_the_writer(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    machine_answers.set_allowed(core, creds.tenant_id, True)
    _, member = add_user(core, creds.tenant_id, "member@acme.test")
    runtime, owner = bearer(creds.runtime_key), bearer(creds.owner_token)
    body = {
        "owner": creds.owner_email,
        "state": "working",
        "title": "Deploy",
        "authority": {"users": ["member@acme.test"]},
    }

    def put(title: str, status: int) -> dict[str, Any]:
        return ok(
            client.put("/v1/runs/w-1", json={**body, "title": title}, headers=runtime), status
        )

    through_writer(core, lambda: put("Deploy", 201))  # create
    assert through_writer(core, lambda: put("Deploy v2", 200))["version"] == 2  # update
    progress = {"message": "step 1", "counts": {"done": 1, "total": 5}}
    answer = through_writer(
        core,
        lambda: ok(client.post("/v1/runs/w-1/progress", json=progress, headers=runtime), 202),
    )
    assert answer["accepted"] is True

    expires = (clock() + timedelta(minutes=10)).isoformat()
    ask = {"input_request_id": "q-1", "kind": "approval", "summary": "Ship?", "expires_at": expires}
    opened = through_writer(
        core,
        lambda: ok(client.post("/v1/runs/w-1/input-requests", json=ask, headers=runtime), 201),
    )
    version = opened["run"]["version"]
    reply = {"decision": "approve", "expected_run_version": version, "expected_request_version": 1}
    answered = through_writer(
        core,
        lambda: ok(
            client.post(
                "/v1/input-requests/q-1/responses",
                json=reply,
                headers={**owner, "Idempotency-Key": "a-1"},
            ),
            200,
        ),
    )
    assert answered["run"]["state"] == "working"

    # A callback URL minted for a second request, then used.
    ask2 = {**ask, "input_request_id": "q-2"}
    ok(client.post("/v1/runs/w-1/input-requests", json=ask2, headers=runtime), 201)
    minted = through_writer(
        core,
        lambda: ok(
            client.post("/v1/input-requests/q-2/callback-urls", json={}, headers=runtime), 201
        ),
    )
    path = minted["url"][minted["url"].index("/v1/callbacks/") :]
    used = through_writer(core, lambda: ok(client.post(path, json={"decision": "approve"}), 200))
    assert used["response"]["answered_by_machine"]

    declared = {
        "operations": [
            {
                "operation_id": "op-1",
                "target": {"type": "invoice", "id": "i-1"},
                "intent": "mark paid",
            }
        ]
    }
    through_writer(
        core,
        lambda: ok(client.post("/v1/runs/w-1/operations", json=declared, headers=runtime), 201),
    )
    through_writer(
        core,
        lambda: ok(
            client.patch("/v1/runs/w-1/operations/op-1", json={"state": "sent"}, headers=runtime),
            200,
        ),
    )
    proposal = {"text": "Also add a test", "changes": {"objective": "Deploy, tested"}}
    through_writer(
        core,
        lambda: ok(
            client.post("/v1/runs/w-1/amendments", json=proposal, headers=bearer(member)), 201
        ),
    )
    stopped = through_writer(
        core,
        lambda: ok(
            client.post("/v1/runs/w-1/cancel", json={"reason": "not now"}, headers=owner), 202
        ),
    )
    assert stopped["run"]["state"] == "stopping"


def put_in_thread(
    core: Core, who: Principal, run_id: str, body: dict[str, Any]
) -> Future[tuple[Any, bool]]:
    out: Future[tuple[Any, bool]] = Future()

    def go() -> None:
        try:
            out.set_result(runs_flow.put_run(core, who, run_id, body))  # type: ignore[arg-type]
        except BaseException as exc:
            out.set_exception(exc)

    threading.Thread(target=go, daemon=True).start()
    return out


def test_creating_puts_of_one_run_in_one_batch_create_it_once(
    core: Core, creds: TenantCreds
) -> None:
    """Held so all eight are taken as one batch: the first creates, the others see its
    row in the same transaction and update (nothing changed: version 1), none fails."""
    who = Principal(tenant_id=creds.tenant_id, kind="key", role="runtime")
    body = {"owner": creds.owner_email, "title": "same"}
    held = HeldWriter(core)
    before = core.writer.batches
    puts = [put_in_thread(core, who, "r-1", body) for _ in range(8)]
    held.release_when_queued(8)
    created = sorted(p.result(timeout=WAIT)[1] for p in puts)
    assert created == [False] * 7 + [True]
    assert core.writer.batches - before == 2  # the held unit's, then the eight
    rows = [r for r in select_all(core, t.runs, creds.tenant_id) if r["run_id"] == "r-1"]
    assert [(r["version"], r["title"]) for r in rows] == [(1, "same")]
    assert len(select_all(core, t.transitions, creds.tenant_id)) == 1


def test_concurrent_creating_puts_from_threads_never_fail(core: Core, creds: TenantCreds) -> None:
    who = Principal(tenant_id=creds.tenant_id, kind="key", role="runtime")

    def create(i: int) -> Callable[[], bool | str]:
        def go() -> bool | str:
            try:
                body = {"owner": creds.owner_email, "title": "same"}
                return runs_flow.put_run(core, who, f"c-{i % 2}", body)[1]  # type: ignore[arg-type]
            except Exception as exc:  # a 500 for the client
                return f"{type(exc).__name__}: {exc}"

        return go

    results = race(8, [create(i) for i in range(16)])
    assert sorted(results, key=str) == [False] * 14 + [True] * 2, results
    kinds = [r["kind"] for r in select_all(core, t.transitions, creds.tenant_id)]
    assert kinds == ["create", "create"]


def test_a_put_refused_in_a_batch_answers_its_409_and_the_others_commit(
    core: Core, creds: TenantCreds
) -> None:
    who = Principal(tenant_id=creds.tenant_id, kind="key", role="runtime")
    runs_flow.put_run(core, who, "done-1", {"owner": creds.owner_email, "state": "working"})  # type: ignore[arg-type]
    with core.db.transaction() as tx:  # finished (as a completed signal would leave it)
        tx.conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.tenant_id == creds.tenant_id, t.runs.c.run_id == "done-1")
            .values(state="completed")
        )
    held = HeldWriter(core)
    fresh = {
        f"new-{i}": put_in_thread(core, who, f"new-{i}", {"owner": creds.owner_email})
        for i in range(4)
    }
    refused = put_in_thread(core, who, "done-1", {"title": "edited after the end"})
    held.release_when_queued(5)
    with pytest.raises(Conflict):
        refused.result(timeout=WAIT)
    assert {r: p.result(timeout=WAIT)[1] for r, p in fresh.items()} == dict.fromkeys(fresh, True)
    stored = {r["run_id"]: r for r in select_all(core, t.runs, creds.tenant_id)}
    assert set(stored) == {"done-1", *fresh}
    assert stored["done-1"]["title"] != "edited after the end"
    assert stored["done-1"]["version"] == 1


def test_a_creating_put_answers_the_snapshot_a_get_reads(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """The creating PUT's answer is built from the row its unit wrote (no re-read): it
    is the snapshot GET /v1/runs/{id} reads right after — plain, with links, with a
    dependency, with done_when and authority, and started under a schedule."""
    clock.freeze()
    add_user(core, creds.tenant_id, "lead@acme.test")
    runtime = bearer(creds.runtime_key)
    base = {"owner": creds.owner_email, "state": "working"}
    ok(client.put("/v1/runs/dates", json={**base, "title": "dates"}, headers=runtime), 201)
    ask = {"input_request_id": "dates-q", "kind": "approval", "summary": "Friday?"}
    ok(client.post("/v1/runs/dates/input-requests", json=ask, headers=runtime), 201)
    schedule = ok(
        client.post(
            "/v1/schedules",
            json={
                "name": "nightly",
                "instruction": "Reconcile the invoices",
                "cadence": "0 9 * * 1-5",
                "authority": {"users": ["lead@acme.test"]},
            },
            headers=bearer(creds.owner_token),
        ),
        201,
    )
    bodies: dict[str, dict[str, Any]] = {
        "plain": {**base, "title": "plain"},
        "queued": {"owner": creds.owner_email, "title": "queued"},
        "linked": {**base, "links": [{"kind": "conversation", "id": "c-1", "url": None}]},
        "waits": {**base, "depends_on": {"run": "dates", "request_id": "dates-q"}},
        "job": {
            **base,
            "done_when": {"text": "all invoices reconciled"},
            "authority": {"users": ["lead@acme.test"]},
            "details": {"ticket": 7},
            "stall_after_seconds": 600,
        },
        "scheduled": {"state": "working", "schedule": {"id": schedule["id"]}},
    }
    answers = {}
    for run_id, body in bodies.items():
        made = ok(client.put(f"/v1/runs/{run_id}", json=body, headers=runtime), 201)
        read = ok(client.get(f"/v1/runs/{run_id}", headers=runtime), 200)
        assert made == read, run_id
        assert list(made) == list(read), run_id  # the same keys, in the same order
        answers[run_id] = made
    assert answers["linked"]["links"] and answers["waits"]["dependency"]
    assert answers["scheduled"]["schedule"] and answers["job"]["done_when"]
