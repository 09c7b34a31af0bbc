"""One completion owner per run, in flight means blocked, and the per-step trace (issue 18
items 2, 3 and 8). Every test runs on SQLite and PostgreSQL, through the HTTP API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from standardwebhooks import Webhook

from runbell.client.errors import Forbidden
from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.store import sessions
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user
from tests.conftest import LiveServer, bearer
from tests.sdk import Connect
from tests.timeouts import WAIT


@dataclass
class Keys:
    """The owner's runtime key and a second runtime key of the same tenant (a helper)."""

    owner: str
    owner_id: str
    helper: str
    helper_id: str


def keys(core: Core, creds: TenantCreds) -> Keys:
    who = accounts.authenticate(core, creds.runtime_key)
    assert who is not None and who.key_id is not None
    helper_id, helper = accounts.create_key(core, creds.tenant_id, "runtime", name="helper")
    return Keys(creds.runtime_key, who.key_id, helper, helper_id)


def make_run(
    client: TestClient, creds: TenantCreds, run_id: str, key: str, **fields: Any
) -> dict[str, Any]:
    body = {"owner": creds.owner_email, "state": "working", "title": "Move tasks", **fields}
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(key))
    assert r.status_code == 201, r.text
    return dict(r.json())


def task(op_id: str, target: str = "T-4", intent: str = "move due date") -> dict[str, Any]:
    return {"operation_id": op_id, "target": {"type": "task", "id": target}, "intent": intent}


def post(client: TestClient, url: str, key: str, body: dict[str, Any]) -> httpx.Response:
    return client.post(url, json=body, headers=bearer(key))


def patch(
    client: TestClient, run_id: str, op_id: str, key: str, state: str, **extra: Any
) -> httpx.Response:
    return client.patch(
        f"/v1/runs/{run_id}/operations/{op_id}", json={"state": state, **extra}, headers=bearer(key)
    )


def claim(client: TestClient, run_id: str, key: str, worker: str, **extra: Any) -> dict[str, Any]:
    r = post(client, f"/v1/runs/{run_id}/claim", key, {"worker_id": worker, **extra})
    assert r.status_code == 200, r.text
    return dict(r.json())


def owner_problem(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 403, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = dict(r.json())
    assert body["rule"] == "completion_owner"
    assert "only the run's completion owner" in body["detail"]
    return body


def history(client: TestClient, token: str, run_id: str) -> list[dict[str, Any]]:
    r = client.get(f"/v1/runs/{run_id}/history", headers=bearer(token))
    assert r.status_code == 200, r.text
    assert r.json()["run_id"] == run_id
    return list(r.json()["steps"])


def signed_in(client: TestClient, core: Core, creds: TenantCreds) -> TestClient:
    browser = TestClient(client.app)
    with core.db.transaction() as tx:
        link = sessions.create_login_link(tx.conn, creds.tenant_id, creds.owner_id, tx.now)
    assert browser.get(f"/auth/{link}", follow_redirects=False).status_code == 303
    return browser


# --- the owner rule ----------------------------------------------------------------------


def test_only_the_owner_completes_and_settles_others_report_findings(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    k = keys(core, creds)
    run = make_run(client, creds, "own-1", k.owner, worker_id="worker-a")
    assert run["completion_owner"] == {
        "credential_id": k.owner_id,
        "worker_id": "worker-a",
        "previous_may_still_act": False,
    }
    assert post(client, "/v1/runs/own-1/operations", k.owner, task("t1")).status_code == 201
    assert patch(client, "own-1", "t1", k.owner, "sent").status_code == 200

    # A helper's credential may not decide: settling or completing is a 403 naming the rule.
    refused = owner_problem(
        patch(client, "own-1", "t1", k.helper, "conflict", evidence={"status": 409})
    )
    assert refused["owner"] == {"credential_id": k.owner_id, "worker_id": "worker-a"}
    done = {"event_id": "helper-done", "state": "completed"}
    owner_problem(post(client, "/v1/runs/own-1/signals", k.helper, done))
    # The owner's own credential naming another worker is refused too.
    other_worker = {"event_id": "b-done", "state": "completed", "worker_id": "worker-b"}
    owner_problem(post(client, "/v1/runs/own-1/signals", k.owner, other_worker))

    # What the helper found lands on the ledger as a report, not a state change.
    found = post(
        client,
        "/v1/runs/own-1/operations/t1/findings",
        k.helper,
        {"finding": "conflict", "evidence": {"status": 409}, "worker_id": "checker"},
    )
    assert found.status_code == 201, found.text
    assert found.json()["operation"]["state"] == "sent"
    listed = client.get("/v1/runs/own-1/operations", headers=bearer(creds.owner_token)).json()
    [op] = listed["operations"]
    assert op["state"] == "sent"
    [report] = op["reports"]
    assert report["finding"] == "conflict" and report["evidence"] == {"status": 409}
    assert report["actor"] == {
        "kind": "key",
        "credential_id": k.helper_id,
        "role": "runtime",
        "worker_id": "checker",
    }
    page = signed_in(client, core, creds).get("/runs/own-1").text
    # A named key is shown by its name; an unnamed one by its id.
    assert "Finding reported by worker checker (runtime key “helper”)" in page
    assert f"worker worker-a (runtime key {k.owner_id})" in page  # the completion owner
    run_now = client.get("/v1/runs/own-1", headers=bearer(creds.owner_token)).json()
    assert run_now["state"] == "working" and run_now["operations"]["counts"] == {"sent": 1}

    # The owner settles and completes.
    assert patch(client, "own-1", "t1", k.owner, "confirmed").status_code == 200
    r = post(client, "/v1/runs/own-1/signals", k.owner, {"event_id": "done", "state": "completed"})
    assert r.status_code == 200 and r.json()["outcome"] == "applied", r.text


def test_an_admin_acts_as_the_owner_and_the_trace_says_so(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    k = keys(core, creds)
    make_run(client, creds, "own-2", k.owner)
    post(client, "/v1/runs/own-2/operations", k.owner, task("t1", target="T-9"))
    patch(client, "own-2", "t1", k.owner, "sent")
    assert patch(client, "own-2", "t1", creds.admin_key, "failed").status_code == 200
    admin = accounts.authenticate(core, creds.admin_key)
    assert admin is not None
    [settled] = [
        s for s in history(client, creds.owner_token, "own-2") if s.get("state") == "failed"
    ]
    assert settled["actor"] == {"kind": "key", "credential_id": admin.key_id, "role": "admin"}


def test_a_run_without_a_recorded_owner_behaves_as_before(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    k = keys(core, creds)
    make_run(client, creds, "old-1", k.owner)
    with core.db.transaction() as tx:  # as a run made before owners were recorded
        tx.conn.execute(
            sa.update(t.runs).where(t.runs.c.run_id == "old-1").values(owner_credential_id=None)
        )
    post(client, "/v1/runs/old-1/operations", k.owner, task("t1", target="T-old"))
    patch(client, "old-1", "t1", k.owner, "sent")
    assert patch(client, "old-1", "t1", k.helper, "confirmed").status_code == 200
    r = post(client, "/v1/runs/old-1/signals", k.helper, {"event_id": "d", "state": "completed"})
    assert r.status_code == 200 and r.json()["outcome"] == "applied", r.text


# --- takeover and in flight means blocked ------------------------------------------------


def test_takeover_is_recorded_and_in_flight_work_blocks_a_retry_until_superseded(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """F2: worker-b takes over while task-4 is still sent; declaring task-4-retry on the
    same target and intent is a 409 naming task-4 — in this run and in any other of the
    tenant — until the owner supersedes it with a reason (a non-owner may not)."""
    k = keys(core, creds)
    make_run(client, creds, "job-1", k.owner)
    first = claim(client, "job-1", k.owner, "worker-a")
    assert first["epoch"] == 1 and first["takeover"] is False
    body = {"operations": [task("task-4")], "epoch": 1}
    assert post(client, "/v1/runs/job-1/operations", k.owner, body).status_code == 201
    assert patch(client, "job-1", "task-4", k.owner, "sent", epoch=1).status_code == 200

    taken = claim(client, "job-1", k.helper, "worker-b", reason="worker-a stopped answering")
    assert taken["takeover"] is True and taken["epoch"] == 2
    assert taken["previous_worker_may_still_act"] is True
    assert taken["owner"] == {"credential_id": k.helper_id, "worker_id": "worker-b"}

    retry = {"operations": [task("task-4-retry")], "epoch": 2}
    refused = post(client, "/v1/runs/job-1/operations", k.helper, retry)
    assert refused.status_code == 409, refused.text
    assert refused.json()["operation_id"] == "task-4"
    assert "'task-4'" in refused.json()["detail"] and "is sent" in refused.json()["detail"]
    # Tenant-wide: another run of the tenant is refused the same work.
    make_run(client, creds, "job-2", k.owner)
    elsewhere = post(client, "/v1/runs/job-2/operations", k.owner, task("task-4-again"))
    assert elsewhere.status_code == 409 and elsewhere.json()["operation_id"] == "task-4"
    # Another intent on the same target is other work.
    other = task("task-4-note", intent="add a comment")
    assert post(client, "/v1/runs/job-2/operations", k.owner, other).status_code == 201

    # The previous owner may no longer decide; nor supersede.
    owner_problem(patch(client, "job-1", "task-4", k.owner, "confirmed"))
    url = "/v1/runs/job-1/operations/task-4/supersede"
    owner_problem(post(client, url, k.owner, {"reason": "I know better"}))
    blank = post(client, url, k.helper, {"reason": "  \u0007 "})
    assert blank.status_code == 422, blank.text
    # The new owner supersedes with a stated reason: the retry goes ahead.
    why = "looked it up in the tracker: the old request never arrived"
    sup = post(client, url, k.helper, {"reason": why, "worker_id": "worker-b"})
    assert sup.status_code == 200 and sup.json()["changed"] is True, sup.text
    assert sup.json()["operation"]["state"] == "sent"  # nobody knows more: it may still land
    assert sup.json()["operation"]["superseded"]["reason"] == why
    again = post(client, url, k.helper, {"reason": why})
    assert again.status_code == 200 and again.json()["changed"] is False
    assert post(client, "/v1/runs/job-1/operations", k.helper, retry).status_code == 201

    steps = history(client, creds.owner_token, "job-1")
    [took] = [s for s in steps if s["kind"] == "owner_change" and s["change"] == "takeover"]
    assert took["previous"] == {"credential_id": k.owner_id, "worker_id": "worker-a"}
    assert took["owner"] == {"credential_id": k.helper_id, "worker_id": "worker-b"}
    assert took["previous_may_still_act"] is True
    assert took["reason"] == "worker-a stopped answering"
    assert took["actor"]["credential_id"] == k.helper_id
    [superseded] = [s for s in steps if s.get("action") == "superseded"]
    assert superseded["operation_id"] == "task-4" and superseded["reason"] == why
    assert superseded["actor"]["worker_id"] == "worker-b"

    page = signed_in(client, core, creds).get("/runs/job-1").text
    assert "The previous owner may still act" in page
    assert "worker worker-b (runtime key “helper”)" in page
    assert "took the run over for worker worker-b" in page
    assert "which may still act" in page
    assert "Superseded by worker worker-b" in page and why in page


def test_supersede_only_lifts_a_real_block(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    k = keys(core, creds)
    make_run(client, creds, "sup-1", k.owner)
    post(client, "/v1/runs/sup-1/operations", k.owner, task("p1", target="T-p"))
    url = "/v1/runs/sup-1/operations/p1/supersede"
    planned = post(client, url, k.owner, {"reason": "retry"})
    assert planned.status_code == 409 and "blocks no new work" in planned.json()["detail"]
    assert (
        post(
            client, "/v1/runs/sup-1/operations/nope/supersede", k.owner, {"reason": "x"}
        ).status_code
        == 404
    )


# --- the trace ---------------------------------------------------------------------------


def test_the_history_names_who_caused_every_step_and_holds_no_secret(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    k = keys(core, creds)
    make_run(client, creds, "tr-1", k.owner, worker_id="worker-a")
    ask = {
        "input_request_id": "ask-1",
        "kind": "approval",
        "summary": "Move the launch date?",
        "expires_at": (clock() + timedelta(minutes=10)).isoformat(),
    }
    assert post(client, "/v1/runs/tr-1/input-requests", k.owner, ask).status_code == 201
    run = client.get("/v1/runs/tr-1", headers=bearer(creds.owner_token)).json()
    answer = {"decision": "approve", "expected_run_version": run["version"]}
    answer["expected_request_version"] = 1
    r = client.post(
        "/v1/input-requests/ask-1/responses",
        json=answer,
        headers={**bearer(creds.owner_token), "Idempotency-Key": "a-1"},
    )
    assert r.status_code == 200, r.text
    _, member_token = add_user(core, creds.tenant_id, "luis@acme.test", "admin")
    proposed = client.post(
        "/v1/runs/tr-1/amendments",
        json={"text": "Leave the legal review task out", "changes": {"title": "Move 11 tasks"}},
        headers=bearer(member_token),
    )
    assert proposed.status_code == 201, proposed.text
    post(client, "/v1/runs/tr-1/operations", k.owner, task("t1", target="T-tr"))
    patch(client, "tr-1", "t1", k.owner, "sent", epoch=0)
    post(client, "/v1/runs/tr-1/operations/t1/findings", k.helper, {"finding": "evidence"})
    patch(client, "tr-1", "t1", k.owner, "confirmed", evidence={"receipt": "r-1"})
    claim(client, "tr-1", k.helper, "worker-b")
    done = {"event_id": "tr-done", "state": "completed", "worker_id": "worker-b"}
    r = post(client, "/v1/runs/tr-1/signals", k.helper, done)  # through the group commit
    assert r.status_code == 200 and r.json()["outcome"] == "applied", r.text

    steps = history(client, creds.owner_token, "tr-1")
    kinds = {s["kind"] for s in steps}
    assert kinds == {"transition", "operation", "owner_change", "answer", "amendment"}
    assert all(s["actor"] for s in steps), [s for s in steps if not s["actor"]]
    by_transition = {s["transition"]: s for s in steps if s["kind"] == "transition"}
    assert by_transition["create"]["actor"] == {
        "kind": "key",
        "credential_id": k.owner_id,
        "role": "runtime",
        "worker_id": "worker-a",
    }
    [completed] = [s for s in steps if s.get("to_state") == "completed"]
    assert completed["actor"]["credential_id"] == k.helper_id
    assert completed["actor"]["worker_id"] == "worker-b"
    [answered] = [s for s in steps if s["kind"] == "answer"]
    assert answered["actor"]["user_id"] == creds.owner_id and answered["actor"]["kind"] == "user"
    [amended] = [s for s in steps if s["kind"] == "amendment"]
    assert (
        amended["actor"]["kind"] == "user" and amended["state"] == "cancelled"
    )  # the run finished
    ops = [s for s in steps if s["kind"] == "operation"]
    assert [s["action"] for s in ops] == ["declared", "moved", "finding", "moved"]
    assert ops[1]["actor"]["worker_id"] == "worker-a"  # epoch 0: the owner's worker
    assert ops[2]["actor"]["credential_id"] == k.helper_id
    # Oldest first.
    assert [s["at"] for s in steps] == sorted(s["at"] for s in steps)

    # No secret anywhere: no key, no token, no hash of one.
    text = json.dumps(steps) + signed_in(client, core, creds).get("/runs/tr-1").text
    for secret in (k.owner, k.helper, creds.admin_key, creds.owner_token, member_token):
        assert secret not in text
    with core.db.read() as conn:
        hashes = [h for (h,) in conn.execute(sa.select(t.api_keys.c.key_hash))]
    assert hashes and not any(h in text for h in hashes)

    # Another tenant's caller, or a member who may not see the run: 404.
    _, stranger = add_user(core, creds.tenant_id, "stranger@acme.test", "member")
    assert client.get("/v1/runs/tr-1/history", headers=bearer(stranger)).status_code == 404


def test_a_verified_webhook_source_is_not_held_to_the_owner_rule(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """The runtime's authoritative state (a provider's signed event) is not a worker's
    claim: it completes a run whose owner is another credential, and the trace names the
    source."""
    k = keys(core, creds)
    make_run(client, creds, "hook-1", k.owner, worker_id="worker-a")
    r = client.post(
        "/v1/sources",
        json={"name": "ci", "kind": "webhook", "mapper": "generic", "trust": "authoritative"},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 201, r.text
    source = r.json()
    body = json.dumps({"run_id": "hook-1", "state": "completed"})
    at = clock().replace(microsecond=0)
    headers = {
        "webhook-id": "msg-1",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(source["signing_secret"]).sign("msg-1", at, body),
        "content-type": "application/json",
    }
    sent = client.post(f"/v1/sources/{source['id']}/webhook", content=body, headers=headers)
    assert sent.status_code == 200, sent.text
    assert sent.json()["results"][0]["outcome"] == "applied"
    [done] = [
        s for s in history(client, creds.owner_token, "hook-1") if s.get("to_state") == "completed"
    ]
    assert done["actor"] == {"kind": "source", "source_id": source["id"]}
    page = signed_in(client, core, creds).get("/runs/hook-1").text
    assert f"by the verified source {source['id']}" in page


# --- the SDK (sync, then async) ----------------------------------------------------------


def test_the_sdk_takes_over_supersedes_reports_and_reads_the_history(
    live: LiveServer, core: Core, creds: TenantCreds, sdk: Connect
) -> None:
    k = keys(core, creds)
    with (
        sdk(live.url, k.owner, creds.owner_email, timeout=WAIT) as owner,
        sdk(live.url, k.helper, creds.owner_email, timeout=WAIT) as helper,
    ):
        run_id = f"sdk-own-{id(owner)}"
        owner.put_run(run_id, title="Move tasks", state="working")
        epoch = owner.claim(run_id, "worker-a")
        target = {"type": "task", "id": run_id}
        owner.declare_operations(
            run_id, [{"operation_id": "t1", "target": target, "intent": "move"}], epoch=epoch
        )
        owner.move_operation(run_id, "t1", "sent", epoch=epoch)
        assert helper.claim(run_id, "worker-b", reason="a is gone") == epoch + 1
        found = helper.report_finding(run_id, "t1", "evidence", evidence={"seen": "no"})
        assert found.state == "sent" and found.raw["reports"][0]["finding"] == "evidence"
        with pytest.raises(Forbidden) as refused:
            owner.supersede_operation(run_id, "t1", "retry")
        assert refused.value.status == 403
        op = helper.supersede_operation(run_id, "t1", "not in the tracker", worker_id="worker-b")
        assert op.state == "sent" and op.raw["superseded"]["reason"] == "not in the tracker"
        steps = helper.history(run_id)
    took = [s for s in steps if s["kind"] == "owner_change" and s["change"] == "takeover"]
    assert took and took[0]["reason"] == "a is gone"
    assert took[0]["actor"]["credential_id"] == k.helper_id


def test_a_cancellation_names_who_asked_on_every_step_it_causes(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    k = keys(core, creds)
    make_run(client, creds, "cx-tr", k.owner)
    post(client, "/v1/runs/cx-tr/operations", k.owner, task("c1", target="T-cx"))
    r = client.post(
        "/v1/runs/cx-tr/cancel", json={"reason": "wrong list"}, headers=bearer(creds.owner_token)
    )
    assert r.status_code == 202, r.text
    steps = history(client, creds.owner_token, "cx-tr")
    [stopping] = [s for s in steps if s.get("to_state") == "stopping"]
    [marked] = [s for s in steps if s.get("state") == "not_started"]
    for step in (stopping, marked):
        assert step["actor"]["kind"] == "user" and step["actor"]["user_id"] == creds.owner_id


def test_the_trace_names_credentials_by_their_names_and_says_delegated_token(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """The timeline and the ledger say "delegated token “checker”" for a token's step, not
    "runtime key dlg_…"; a named key is shown by its name."""
    k = keys(core, creds)
    make_run(client, creds, "own-names", k.helper, worker_id="worker-h")
    assert post(client, "/v1/runs/own-names/operations", k.helper, task("t1")).status_code == 201
    assert patch(client, "own-names", "t1", k.helper, "sent").status_code == 200
    minted = post(
        client,
        "/v1/runs/own-names/delegations",
        k.helper,
        {"capabilities": ["runs.report"], "expires_in": 600, "name": "checker"},
    )
    assert minted.status_code == 201, minted.text
    token = minted.json()["token"]
    found = post(
        client,
        "/v1/runs/own-names/operations/t1/findings",
        token,
        {"finding": "conflict", "evidence": {"status": 409}},
    )
    assert found.status_code == 201, found.text
    page = signed_in(client, core, creds).get("/runs/own-names").text
    assert "Finding reported by delegated token “checker”" in page
    assert "worker worker-h (runtime key “helper”)" in page  # the completion owner
    assert token not in page
