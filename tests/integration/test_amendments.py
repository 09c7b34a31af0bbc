"""Amendments by other people (DESIGN §6 ``POST …/amendments``, invariant 9): a proposal
becomes an input request to the run's owner, never a silent change and never a block on
the run; only the owner's approval changes the run, as a new version. Every test runs on
SQLite and on PostgreSQL, with the test clock.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import bearer

OBJECTIVE = "Ship the fix for the flaky checkout test"
NEW_OBJECTIVE = "Ship the fix and add a regression test for it"


# --- helpers -----------------------------------------------------------------------------


def make_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> dict[str, Any]:
    body = {
        "owner": creds.owner_email,
        "state": "working",
        "objective": OBJECTIVE,
        "authority": {"users": ["lead@acme.test", "member@acme.test"]},
        **fields,
    }
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    return dict(r.json())


def propose(
    client: TestClient, token: str, run_id: str, *, key: str | None = None, **body: Any
) -> httpx.Response:
    headers = bearer(token)
    if key is not None:
        headers["Idempotency-Key"] = key
    body.setdefault("text", "Please also add a regression test")
    return client.post(f"/v1/runs/{run_id}/amendments", json=body, headers=headers)


def decide(
    client: TestClient,
    token: str,
    request_id: str,
    decision: str,
    *,
    run_version: int,
    key: str = "d-1",
    request_version: int = 1,
) -> httpx.Response:
    return client.post(
        f"/v1/input-requests/{request_id}/responses",
        json={
            "decision": decision,
            "expected_run_version": run_version,
            "expected_request_version": request_version,
        },
        headers={**bearer(token), "Idempotency-Key": key},
    )


def problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return dict(r.json())


def get_run(client: TestClient, token: str, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def feed_types(client: TestClient, token: str, run_id: str) -> list[str]:
    r = client.get("/v1/events?after=earliest&limit=500", headers=bearer(token))
    assert r.status_code == 200, r.text
    return [e["type"] for e in r.json()["events"] if e["run_id"] == run_id]


@pytest.fixture
def people(core: Core, creds: TenantCreds) -> dict[str, str]:
    """Tokens: a member the run's authority names, and one who just can see the run."""
    _, lead = add_user(core, creds.tenant_id, "lead@acme.test")
    _, member = add_user(core, creds.tenant_id, "member@acme.test")
    return {"lead": lead, "member": member}


# --- proposing ---------------------------------------------------------------------------


def test_a_proposal_becomes_a_request_to_the_owner_and_blocks_nothing(
    client: TestClient, creds: TenantCreds, clock: Clock, people: dict[str, str]
) -> None:
    clock.freeze()
    before = make_run(client, creds, "fix-1")
    r = propose(
        client,
        people["member"],
        "fix-1",
        key="p-1",
        changes={"objective": NEW_OBJECTIVE},
    )
    assert r.status_code == 201, r.text
    made = r.json()
    amendment, req = made["amendment"], made["input_request"]
    assert amendment["state"] == "pending"
    assert amendment["changes"] == {"objective": NEW_OBJECTIVE}
    assert amendment["base"] == {"objective": OBJECTIVE}
    assert amendment["proposed_by"]["email"] == "member@acme.test"
    assert req["id"] == amendment["id"] == amendment["input_request_id"]
    assert (req["kind"], req["state"], req["blocks_work"]) == ("approval", "pending", False)
    assert req["run_version"] == before["version"]
    assert req["details"]["text"] == "Please also add a regression test"

    # The owner is told; the run neither moved nor changed.
    [note] = made["notifications"]
    assert note["recipient"] == creds.owner_id
    assert note["attention_type"] == "amendment"
    assert note["rule_id"] == "amendment.default"
    assert note["input_request_id"] == req["id"]
    assert "regression" not in note["summary"]  # neutral on a lock screen
    run = get_run(client, creds.runtime_key, "fix-1")
    assert (run["state"], run["version"], run["objective"]) == (
        "working",
        before["version"],
        OBJECTIVE,
    )
    assert run["pending_input_request"] is None  # the runtime has nothing to wait for
    [listed] = run["pending_amendments"]
    assert listed["id"] == amendment["id"]
    assert "amendment.proposed" in feed_types(client, creds.runtime_key, "fix-1")

    # A retry under the same key is the same answer; one amendment exists.
    again = propose(
        client, people["member"], "fix-1", key="p-1", changes={"objective": NEW_OBJECTIVE}
    )
    assert again.status_code == 201 and again.content == r.content
    assert len(get_run(client, creds.owner_token, "fix-1")["pending_amendments"]) == 1

    # The owner's inbox says it can be decided on; the request says the owner may answer.
    shown = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token))
    assert shown.json()["actionable"] is True
    owner_view = client.get(f"/v1/input-requests/{req['id']}", headers=bearer(creds.owner_token))
    assert owner_view.json()["may_answer"] is True
    assert owner_view.json()["actionable"] is True
    lead_view = client.get(f"/v1/input-requests/{req['id']}", headers=bearer(people["lead"]))
    assert lead_view.json()["may_answer"] is False


def test_reject_leaves_the_objective_and_version_alone(
    client: TestClient, creds: TenantCreds, people: dict[str, str]
) -> None:
    """Only the owner decides (the proposer and the authority get 403); a rejection changes
    the amendment, not the run, and resolves the owner's notification."""
    make_run(client, creds, "fix-2")
    made = propose(client, people["member"], "fix-2", changes={"objective": NEW_OBJECTIVE}).json()
    rid, version = made["input_request"]["id"], made["input_request"]["run_version"]
    problem(decide(client, people["member"], rid, "approve", run_version=version), 403)
    problem(decide(client, people["lead"], rid, "approve", run_version=version), 403)
    problem(decide(client, creds.runtime_key, rid, "approve", run_version=version), 403)

    r = decide(client, creds.owner_token, rid, "reject", run_version=version)
    assert r.status_code == 200, r.text
    assert r.json()["amendment"]["state"] == "rejected"
    assert r.json()["response"]["decision"] == "reject"
    run = get_run(client, creds.owner_token, "fix-2")
    assert (run["objective"], run["version"]) == (OBJECTIVE, version)
    assert run["pending_amendments"] == []
    [note] = made["notifications"]
    closed = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token))
    assert closed.json()["state"] == "resolved"
    assert "amendment.rejected" in feed_types(client, creds.runtime_key, "fix-2")
    # Decided once: a second decision is a 409 that says so.
    again = decide(client, creds.owner_token, rid, "approve", run_version=version, key="d-2")
    assert problem(again, 409)["current"]["amendment"]["state"] == "rejected"


def test_approve_changes_the_objective_as_a_new_version_even_after_the_run_moved_on(
    client: TestClient, creds: TenantCreds, clock: Clock, people: dict[str, str]
) -> None:
    """The answer binds to the run version the amendment was proposed against, so the
    runtime's ordinary progress (a request opened and answered: two versions) does not
    make it stale; approval applies it as one new version (kind ``amend``) and a repeat
    under the same key is the same answer byte for byte."""
    clock.freeze()
    make_run(client, creds, "fix-3")
    made = propose(
        client,
        people["lead"],
        "fix-3",
        changes={"objective": NEW_OBJECTIVE, "title": "Fix + test"},
    ).json()
    rid, proposed_at = made["input_request"]["id"], made["input_request"]["run_version"]

    # Meanwhile the runtime asks and is answered: the amendment is not touched by either.
    rt = bearer(creds.runtime_key)
    opened = client.post(
        "/v1/runs/fix-3/input-requests",
        json={"input_request_id": "merge-1", "kind": "approval", "summary": "Merge?"},
        headers=rt,
    ).json()
    assert opened["input_request"]["state"] == "pending"
    answered = decide(
        client, creds.owner_token, "merge-1", "approve", run_version=opened["run"]["version"]
    )
    assert answered.status_code == 200, answered.text
    now = get_run(client, creds.owner_token, "fix-3")
    assert now["version"] == proposed_at + 2 and now["state"] == "working"
    assert [a["id"] for a in now["pending_amendments"]] == [rid]

    # The current run version is not what an amendment binds to.
    wrong = decide(client, creds.owner_token, rid, "approve", run_version=now["version"], key="w-1")
    assert "proposed against run version" in problem(wrong, 409)["detail"]

    r = decide(client, creds.owner_token, rid, "approve", run_version=proposed_at, key="ok-1")
    assert r.status_code == 200, r.text
    assert r.json()["amendment"]["state"] == "approved"
    assert r.json()["amendment"]["applied_version"] == now["version"] + 1
    run = get_run(client, creds.runtime_key, "fix-3")
    assert (run["objective"], run["title"], run["version"]) == (
        NEW_OBJECTIVE,
        "Fix + test",
        now["version"] + 1,
    )
    assert run["state"] == "working"  # an amendment never moves the run's state
    types = feed_types(client, creds.runtime_key, "fix-3")
    assert types[-2:] == ["run.updated", "amendment.approved"], types

    replay = decide(client, creds.owner_token, rid, "approve", run_version=proposed_at, key="ok-1")
    assert replay.status_code == 200 and replay.content == r.content
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert get_run(client, creds.owner_token, "fix-3")["version"] == now["version"] + 1


def test_an_approval_is_stale_when_what_it_changes_changed(
    client: TestClient, creds: TenantCreds, people: dict[str, str]
) -> None:
    """The runtime rewrote the objective after the proposal: approving would overwrite it
    (409 with current); rejecting is still possible."""
    make_run(client, creds, "fix-4")
    made = propose(client, people["member"], "fix-4", changes={"objective": NEW_OBJECTIVE}).json()
    rid, version = made["input_request"]["id"], made["input_request"]["run_version"]
    r = client.put(
        "/v1/runs/fix-4", json={"objective": "Something else"}, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 200, r.text
    body = problem(decide(client, creds.owner_token, rid, "approve", run_version=version), 409)
    assert "objective changed since this amendment was proposed" in body["detail"]
    assert body["current"]["run"]["objective"] == "Something else"
    ok = decide(client, creds.owner_token, rid, "reject", run_version=version, key="d-2")
    assert ok.status_code == 200, ok.text
    assert get_run(client, creds.owner_token, "fix-4")["objective"] == "Something else"


def test_a_finished_run_is_not_amended(
    client: TestClient, creds: TenantCreds, people: dict[str, str]
) -> None:
    make_run(client, creds, "fix-5")
    made = propose(client, people["member"], "fix-5", changes={"objective": NEW_OBJECTIVE}).json()
    rid, version = made["input_request"]["id"], made["input_request"]["run_version"]
    r = client.post(
        "/v1/runs/fix-5/signals",
        json={"event_id": "done", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200
    # The finish cancelled it and resolved the owner's alert about it.
    [note] = made["notifications"]
    shown = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token))
    assert shown.json()["state"] == "resolved"
    asked = client.get(f"/v1/input-requests/{rid}", headers=bearer(creds.owner_token)).json()
    assert asked["input_request"]["state"] == "cancelled"
    body = problem(decide(client, creds.owner_token, rid, "approve", run_version=version), 409)
    assert body["current"]["amendment"]["state"] == "cancelled"
    assert get_run(client, creds.owner_token, "fix-5")["pending_amendments"] == []
    assert get_run(client, creds.owner_token, "fix-5")["objective"] == OBJECTIVE
    problem(propose(client, people["member"], "fix-5"), 409)


def test_who_may_propose(
    core: Core, client: TestClient, creds: TenantCreds, people: dict[str, str]
) -> None:
    """People who can see the run may; a runtime key 403; a member who cannot see the run
    and another tenant 404; a bad body 422 naming the field."""
    _, stranger = add_user(core, creds.tenant_id, "stranger@acme.test")
    other = make_tenant(core, "globex")
    make_run(client, creds, "fix-6")
    problem(propose(client, creds.runtime_key, "fix-6"), 403)
    problem(propose(client, stranger, "fix-6"), 404)
    problem(propose(client, other.owner_token, "fix-6"), 404)
    problem(propose(client, people["member"], "nope"), 404)
    assert problem(propose(client, people["member"], "fix-6", text=""), 422)["field"].endswith(
        "text"
    )
    bad = propose(client, people["member"], "fix-6", changes={"state": "completed"})
    assert "changes" in problem(bad, 422)["field"]
    same = propose(client, people["member"], "fix-6", changes={"objective": OBJECTIVE})
    assert problem(same, 422)["field"] == "changes"
    assert get_run(client, creds.owner_token, "fix-6")["pending_amendments"] == []
    # The owner may propose too (a two-step change); it is still the owner's decision.
    assert propose(client, creds.owner_token, "fix-6").status_code == 201
