"""Delegated tokens (issue 18 item 1): a runtime key mints a token for a helper, bound to
one run, never wider than the key, expiring and revocable; on SQLite and PostgreSQL,
through the API and the SDK (both clients)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.client import Client, Forbidden, NotFound, RetryPolicy, Unauthorized
from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds
from tests.conftest import LiveServer, bearer
from tests.sdk import Connect
from tests.timeouts import WAIT


def make_run(client: TestClient, key: str, creds: TenantCreds, run_id: str) -> None:
    r = client.put(
        f"/v1/runs/{run_id}",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text


def mint(client: TestClient, key: str, run_id: str, **body: Any) -> Any:
    doc = {"capabilities": ["runs.report"], "expires_in": 3600, "name": "helper", **body}
    return client.post(f"/v1/runs/{run_id}/delegations", json=doc, headers=bearer(key))


@pytest.fixture
def worker(core: Core, creds: TenantCreds) -> str:
    """A scoped worker key: runs launch-*, report, declare, read (not settle, not cancel)."""
    _, secret = accounts.create_key(
        core,
        creds.tenant_id,
        "runtime",
        capabilities=["runs.report", "operations.declare", "runs.read"],
        run_patterns=["launch-*"],
    )
    return secret


def test_a_token_acts_on_its_run_only(
    core: Core, client: TestClient, creds: TenantCreds, worker: str
) -> None:
    make_run(client, worker, creds, "launch-1")
    make_run(client, worker, creds, "launch-2")
    r = mint(client, worker, "launch-1", capabilities=["runs.report", "runs.read"])
    assert r.status_code == 201, r.text
    made = r.json()
    token = made["token"]
    assert token.startswith("rbd_") and made["state"] == "active"
    assert made["capabilities"] == ["runs.report", "runs.read"]
    # Only its hash is stored.
    with core.db.read() as conn:
        stored = conn.execute(sa.select(t.delegated_tokens)).one()._mapping
    assert token not in str(dict(stored)) and stored["token_hash"] != token

    r = client.post(
        "/v1/runs/launch-1/signals",
        json={"event_id": "h1", "state": "working", "reason": "helping"},
        headers=bearer(token),
    )
    assert r.status_code == 200, r.text
    assert client.get("/v1/runs/launch-1", headers=bearer(token)).status_code == 200
    # Bound to its run: the key's other runs answer 404, as runs that do not exist.
    r = client.get("/v1/runs/launch-2", headers=bearer(token))
    assert r.status_code == 404 and r.json()["detail"] == "no run 'launch-2'"
    r = client.post("/v1/runs/launch-2/progress", json={"message": "x"}, headers=bearer(token))
    assert r.status_code == 404
    listed = client.get("/v1/runs", headers=bearer(token)).json()
    assert [r["run_id"] for r in listed["runs"]] == ["launch-1"]
    # Capabilities it was not given: 403 naming them.
    r = client.post(
        "/v1/runs/launch-1/operations",
        json={"operation_id": "o1", "target": {"type": "t", "id": "1"}, "intent": "do"},
        headers=bearer(token),
    )
    assert r.status_code == 403 and r.json()["missing_capability"] == "operations.declare"
    # A token mints nothing.
    r = mint(client, token, "launch-1")
    assert r.status_code == 403
    # The run records the credential that created it (the key, before the token).
    with core.db.read() as conn:
        created = conn.execute(
            sa.select(t.runs.c.created_by_credential).where(t.runs.c.run_id == "launch-1")
        ).scalar()
    assert created is not None and created.startswith("key_")


def test_never_wider_than_the_minting_key(
    client: TestClient, creds: TenantCreds, worker: str
) -> None:
    make_run(client, worker, creds, "launch-1")
    r = mint(client, worker, "launch-1", capabilities=["runs.report", "operations.settle"])
    assert r.status_code == 403
    assert r.json()["missing_capability"] == "operations.settle"
    assert "operations.settle" in r.json()["detail"]
    # A run outside the key's scope: 404, whether it exists or not.
    make_run(client, creds.runtime_key, creds, "other-1")
    r = mint(client, worker, "other-1")
    assert r.status_code == 404 and r.json()["detail"] == "no run 'other-1'"
    r = mint(client, worker, "launch-none")
    assert r.status_code == 404 and r.json()["detail"] == "no run 'launch-none'"
    # An expiry is required and bounded.
    r = client.post(
        "/v1/runs/launch-1/delegations",
        json={"capabilities": ["runs.report"], "name": "h"},
        headers=bearer(worker),
    )
    assert r.status_code == 422
    r = mint(client, worker, "launch-1", expires_in=30 * 24 * 3600)
    assert r.status_code == 422
    # People do not mint.
    r = mint(client, creds.owner_token, "launch-1")
    assert r.status_code == 403


def test_expired_and_revoked_tokens_fail(
    client: TestClient, clock: Clock, core: Core, creds: TenantCreds, worker: str
) -> None:
    make_run(client, worker, creds, "launch-1")
    clock.freeze()
    short = mint(client, worker, "launch-1", expires_in=60, capabilities=["runs.read"]).json()
    assert client.get("/v1/runs/launch-1", headers=bearer(short["token"])).status_code == 200
    clock.advance(61)
    r = client.get("/v1/runs/launch-1", headers=bearer(short["token"]))
    assert r.status_code == 401
    listed = client.get("/v1/runs/launch-1/delegations", headers=bearer(worker)).json()
    assert [d["state"] for d in listed["delegations"]] == ["expired"]
    assert "token" not in str(listed["delegations"][0].keys())

    made = mint(client, worker, "launch-1", capabilities=["runs.read"]).json()
    # Another runtime key of the tenant cannot revoke it; the minter can.
    r = client.delete(f"/v1/delegations/{made['id']}", headers=bearer(creds.runtime_key))
    assert r.status_code == 403
    r = client.delete(f"/v1/delegations/{made['id']}", headers=bearer(worker))
    assert r.status_code == 200 and r.json()["state"] == "revoked"
    assert client.get("/v1/runs/launch-1", headers=bearer(made["token"])).status_code == 401

    # An admin revokes too; revoking the minting key stops all of its tokens.
    by_admin = mint(client, worker, "launch-1", capabilities=["runs.read"]).json()
    r = client.delete(f"/v1/delegations/{by_admin['id']}", headers=bearer(creds.admin_key))
    assert r.status_code == 200
    last = mint(client, worker, "launch-1", capabilities=["runs.read"]).json()
    assert client.get("/v1/runs/launch-1", headers=bearer(last["token"])).status_code == 200
    with core.db.read() as conn:
        key_id = conn.execute(
            sa.select(t.delegated_tokens.c.key_id).where(t.delegated_tokens.c.id == last["id"])
        ).scalar_one()
    accounts.revoke_key(core, creds.tenant_id, key_id)
    assert client.get("/v1/runs/launch-1", headers=bearer(last["token"])).status_code == 401
    r = client.delete("/v1/delegations/dlg_nothing", headers=bearer(creds.admin_key))
    assert r.status_code == 404


@pytest.fixture
def rb(live: LiveServer, creds: TenantCreds, sdk: Connect, worker: str) -> Iterator[Client]:
    fast = RetryPolicy(attempts=2, base_delay=0.05, max_delay=0.1)
    with sdk(live.url, worker, creds.owner_email, retry=fast, timeout=WAIT) as client:
        yield client


def test_sdk_delegate_and_revoke(
    rb: Client, live: LiveServer, creds: TenantCreds, sdk: Connect
) -> None:
    rb.put_run("launch-7", owner=creds.owner_email, state="working")
    made = rb.delegate(
        "launch-7", capabilities=["runs.report", "runs.read"], expires_in=600, name="checker"
    )
    assert made.token and made.token.startswith("rbd_") and made.state == "active"
    assert made.capabilities == ["runs.report", "runs.read"]
    with pytest.raises(Forbidden) as refused:
        rb.delegate("launch-7", capabilities=["runs.cancel"], expires_in=600, name="x")
    assert refused.value.missing_capability == "runs.cancel"
    with sdk(live.url, made.token, creds.owner_email, timeout=WAIT) as helper:
        helper.progress("launch-7", "checking")
        assert helper.get_run("launch-7").run_id == "launch-7"
        with pytest.raises(NotFound):
            helper.get_run("launch-8")
        with pytest.raises(Forbidden) as lacking:
            helper.cancel("launch-7")
        assert lacking.value.missing_capability == "runs.cancel"
    listed = rb.delegations("launch-7")
    assert [d.id for d in listed] == [made.id] and listed[0].token is None
    assert rb.revoke_delegation(made.id).state == "revoked"
    with (
        sdk(live.url, made.token, creds.owner_email, timeout=WAIT) as helper,
        pytest.raises(Unauthorized),
    ):
        helper.get_run("launch-7")


def test_a_token_does_not_share_its_key_s_idempotency_keys(
    client: TestClient, creds: TenantCreds, worker: str
) -> None:
    make_run(client, worker, creds, "launch-1")
    make_run(client, worker, creds, "launch-2")
    body = {"operation_id": "o1", "target": {"type": "t", "id": "1"}, "intent": "do"}
    headers = {**bearer(worker), "Idempotency-Key": "decl-1"}
    r = client.post("/v1/runs/launch-1/operations", json=body, headers=headers)
    assert r.status_code == 201, r.text
    token = mint(client, worker, "launch-2", capabilities=["operations.declare"]).json()["token"]
    # The same request with the same Idempotency-Key: no replay of the key's answer about
    # a run the token may not see, but the 404 of that run.
    headers = {**bearer(token), "Idempotency-Key": "decl-1"}
    r = client.post("/v1/runs/launch-1/operations", json=body, headers=headers)
    assert r.status_code == 404, r.text
    assert "idempotent-replayed" not in r.headers
