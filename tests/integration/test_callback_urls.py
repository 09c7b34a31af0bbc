"""Machines that answer (issue 19 item 4): callback URLs (single use, bound to the request
and its versions, expiring with it, limited to some decisions, no API key) and runtime
keys whose scope names ``input_requests.answer``; both recorded as the machine, both off
for a tenant that disables them. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from runbell.flows import accounts, machine_answers
from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, make_tenant
from tests.conftest import bearer


@pytest.fixture
def creds(core: Core) -> TenantCreds:
    return make_tenant(core)


def _run(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    r = client.put(
        f"/v1/runs/{run_id}",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text


def _open(
    client: TestClient,
    creds: TenantCreds,
    clock: Clock,
    run_id: str,
    request_id: str,
    *,
    status: int = 201,
    **extra: Any,
) -> dict[str, Any]:
    body = {
        "input_request_id": request_id,
        "kind": "approval",
        "summary": "Deploy to production?",
        "expires_at": (clock() + timedelta(minutes=10)).isoformat(),
        **extra,
    }
    r = client.post(
        f"/v1/runs/{run_id}/input-requests", json=body, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == status, r.text
    return dict(r.json())


def _path(url: str) -> str:
    return url[url.index("/v1/callbacks/") :]


def test_a_callback_answers_once_without_a_key(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "ci-1")
    opened = _open(client, creds, clock, "ci-1", "deploy-1", callback={})
    callback = opened["callback"]
    assert callback["decisions"] == ["approve", "reject"]
    assert callback["url"].startswith(core.public_url + "/v1/callbacks/rbc_")
    assert callback["expires_at"] == opened["input_request"]["expires_at"]
    # Only the hash of the token is stored.
    token = callback["url"].rsplit("/", 1)[1]
    with core.db.read() as conn:
        stored = conn.exec_driver_sql("SELECT token_hash FROM callback_urls").scalars().all()
    assert stored and token not in stored

    r = client.post(_path(callback["url"]), json={"decision": "approve"})
    assert r.status_code == 200, r.text
    response = r.json()["response"]
    assert response["decision"] == "approve"
    assert response["answered_by_machine"] == "callback"
    assert response["answered_by"]["id"] == callback["id"]
    assert r.json()["run"]["state"] == "working"

    # Used twice: the second is refused.
    again = client.post(_path(callback["url"]), json={"decision": "approve"})
    assert again.status_code == 410, again.text
    assert again.headers["content-type"].startswith("application/problem+json")
    assert "already used" in again.json()["detail"]

    # A person arriving late is told a machine answered.
    late = client.post(
        "/v1/input-requests/deploy-1/responses",
        json={
            "decision": "reject",
            "expected_run_version": callback["run_version"],
            "expected_request_version": 1,
        },
        headers={**bearer(creds.owner_token), "Idempotency-Key": "late"},
    )
    assert late.status_code == 409, late.text
    assert f"a machine (callback {callback['id']})" in late.json()["detail"]

    # The trace records the machine as the actor, of the answer and of the run's step.
    steps = client.get("/v1/runs/ci-1/history", headers=bearer(creds.runtime_key)).json()
    machine = {"kind": "callback", "credential_id": callback["id"], "role": "machine"}
    answers = [s for s in steps["steps"] if s["kind"] == "answer"]
    assert answers[-1]["actor"] == machine and answers[-1]["user_id"] is None
    assert machine in [s["actor"] for s in steps["steps"] if s["kind"] == "transition"]


def test_a_callback_minted_later_and_limited(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "ci-2")
    _open(client, creds, clock, "ci-2", "deploy-2")
    r = client.post(
        "/v1/input-requests/deploy-2/callback-urls",
        json={"decisions": ["reject"]},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text
    url = r.json()["url"]
    # A person's token does not mint one.
    r2 = client.post(
        "/v1/input-requests/deploy-2/callback-urls", json={}, headers=bearer(creds.owner_token)
    )
    assert r2.status_code == 403, r2.text
    denied = client.post(_path(url), json={"decision": "approve"})
    assert denied.status_code == 403, denied.text
    ok = client.post(_path(url), json={"decision": "reject"})
    assert ok.status_code == 200, ok.text
    assert ok.json()["response"]["decision"] == "reject"
    # An unknown token: 404.
    assert client.post("/v1/callbacks/rbc_nope", json={"decision": "reject"}).status_code == 404


def test_a_callback_after_expiry_is_refused(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "ci-3")
    callback = _open(client, creds, clock, "ci-3", "deploy-3", callback={})["callback"]
    clock.advance(11 * 60)
    r = client.post(_path(callback["url"]), json={"decision": "approve"})
    assert r.status_code == 410, r.text
    assert "expired" in r.json()["detail"]
    got = client.get("/v1/input-requests/deploy-3", headers=bearer(creds.runtime_key)).json()
    assert got["input_request"]["state"] != "answered"


def test_a_callback_after_a_newer_request_is_refused(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "ci-4")
    callback = _open(client, creds, clock, "ci-4", "deploy-4a", callback={})["callback"]
    _open(client, creds, clock, "ci-4", "deploy-4b")  # supersedes deploy-4a
    r = client.post(_path(callback["url"]), json={"decision": "approve"})
    assert r.status_code == 409, r.text
    assert "newer request" in r.json()["detail"]
    got = client.get("/v1/input-requests/deploy-4b", headers=bearer(creds.runtime_key)).json()
    assert got["input_request"]["state"] == "pending"


def test_a_tenant_can_turn_machine_answers_off(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "ci-5")
    callback = _open(client, creds, clock, "ci-5", "deploy-5", callback={})["callback"]
    _, answerer = accounts.create_key(
        core, creds.tenant_id, "runtime", capabilities=["input_requests.answer"]
    )
    machine_answers.set_allowed(core, creds.tenant_id, False)
    r = client.post(_path(callback["url"]), json={"decision": "approve"})
    assert r.status_code == 403, r.text
    assert "turned off" in r.json()["detail"]
    version = client.get("/v1/runs/ci-5", headers=bearer(creds.runtime_key)).json()["version"]
    r = client.post(
        "/v1/input-requests/deploy-5/responses",
        json={
            "decision": "approve",
            "expected_run_version": version,
            "expected_request_version": 1,
        },
        headers={**bearer(answerer), "Idempotency-Key": "k"},
    )
    assert r.status_code == 403, r.text
    assert "turned off" in r.json()["detail"]
    # Minting is refused too.
    r = client.post(
        "/v1/input-requests/deploy-5/callback-urls", json={}, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 403, r.text
    # Back on: the unused callback works.
    machine_answers.set_allowed(core, creds.tenant_id, True)
    r = client.post(_path(callback["url"]), json={"decision": "approve"})
    assert r.status_code == 200, r.text


def test_a_key_with_input_requests_answer_answers(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "ci-6")
    opened = _open(client, creds, clock, "ci-6", "deploy-6")
    version = opened["run"]["version"]
    body = {"decision": "approve", "expected_run_version": version, "expected_request_version": 1}

    # Without the capability (an unscoped key holds every other one): 403 naming it.
    for token in (creds.runtime_key, creds.admin_key):
        r = client.post(
            "/v1/input-requests/deploy-6/responses",
            json=body,
            headers={**bearer(token), "Idempotency-Key": "k0"},
        )
        assert r.status_code == 403, r.text
        assert r.json()["missing_capability"] == "input_requests.answer"
        assert "input_requests.answer" in r.json()["detail"]

    key_id, answerer = accounts.create_key(
        core, creds.tenant_id, "runtime", capabilities=["input_requests.answer"]
    )
    # The Idempotency-Key is required, as for a person.
    r = client.post("/v1/input-requests/deploy-6/responses", json=body, headers=bearer(answerer))
    assert r.status_code == 422, r.text
    r = client.post(
        "/v1/input-requests/deploy-6/responses",
        json=body,
        headers={**bearer(answerer), "Idempotency-Key": "k1"},
    )
    assert r.status_code == 200, r.text
    response = r.json()["response"]
    assert response["answered_by_machine"] == "key"
    assert response["answered_by"]["id"] == key_id
    # A replay returns the stored answer; another answer is a 409.
    again = client.post(
        "/v1/input-requests/deploy-6/responses",
        json=body,
        headers={**bearer(answerer), "Idempotency-Key": "k1"},
    )
    assert again.status_code == 200 and again.content == r.content
    other = client.post(
        "/v1/input-requests/deploy-6/responses",
        json=body,
        headers={**bearer(answerer), "Idempotency-Key": "k2"},
    )
    assert other.status_code == 409, other.text


def test_a_key_cannot_pass_on_what_it_does_not_name(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    _run(client, creds, "ci-7")
    r = client.post(
        "/v1/runs/ci-7/delegations",
        json={"capabilities": ["input_requests.answer"], "expires_in": 600, "name": "helper"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 403, r.text
    assert r.json()["missing_capability"] == "input_requests.answer"
