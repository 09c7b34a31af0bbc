"""A process remembers a bearer token it verified for ``RUNBELL_AUTH_CACHE_S`` (issue 21:
no database read and no thread hop per request). What must still hold, on SQLite and
PostgreSQL: a revocation made in this process stops the credential at its next request; one
made by another process (the CLI, a second API) within the TTL; a token never outlives its
own expiry; a scoped key's limits apply to a remembered principal exactly as before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from runbell.app import build, create_app
from runbell.config import Settings
from runbell.flows import accounts, members
from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, make_tenant
from tests.conftest import bearer


@pytest.fixture
def other(settings: Settings, clock: Clock) -> Iterator[Core]:
    """Another process on the same database (the CLI, a second ``runbell api``)."""
    rb = build(settings, clock=clock, migrate=False)
    yield rb
    rb.db.dispose()


def runtime_key(core: Core, creds: TenantCreds, **scope: object) -> tuple[str, str]:
    return accounts.create_key(core, creds.tenant_id, "runtime", **scope)  # type: ignore[arg-type]


def put_run(client: TestClient, key: str, creds: TenantCreds, run_id: str) -> None:
    r = client.put(
        f"/v1/runs/{run_id}",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text


def test_another_process_revocation_reaches_this_one_within_the_ttl(
    core: Core, other: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    clock.freeze()
    key_id, key = runtime_key(core, creds)
    assert client.get("/v1/runs", headers=bearer(key)).status_code == 200
    assert accounts.remembered(core, key) is not None

    accounts.revoke_key(other, creds.tenant_id, key_id)  # another process: no word to ours
    clock.advance(core.settings.auth_cache_s - 0.5)
    assert client.get("/v1/runs", headers=bearer(key)).status_code == 200  # the bound
    clock.advance(0.5)
    r = client.get("/v1/runs", headers=bearer(key))
    assert r.status_code == 401, r.text
    assert accounts.remembered(core, key) is None


def test_a_revocation_in_this_process_stops_the_next_request(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    key_id, key = runtime_key(core, creds)
    put_run(client, key, creds, "memo-1")
    signal = {"event_id": "e1", "state": "working"}
    r = client.post("/v1/runs/memo-1/signals", json=signal, headers=bearer(key))
    assert r.status_code == 200, r.text
    assert accounts.remembered(core, key) is not None

    r = client.delete(f"/v1/keys/{key_id}", headers=bearer(creds.admin_key))
    assert r.status_code == 204, r.text
    r = client.post(
        "/v1/runs/memo-1/signals", json={**signal, "event_id": "e2"}, headers=bearer(key)
    )
    assert r.status_code == 401, r.text


def test_a_revoked_member_token_stops_at_once(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    _, user_id, token = accounts.add_member(core, creds.tenant_id, "m@acme.test", "member")
    assert client.get("/v1/me", headers=bearer(token)).status_code == 200
    members.revoke_member(core, creds.tenant_id, user_id)
    assert client.get("/v1/me", headers=bearer(token)).status_code == 401


def test_a_delegated_token_is_revoked_at_once_and_never_outlives_its_expiry(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    clock.freeze()
    put_run(client, creds.runtime_key, creds, "memo-2")
    minted = client.post(
        "/v1/runs/memo-2/delegations",
        json={"capabilities": ["runs.read"], "expires_in": 60, "name": "helper"},
        headers=bearer(creds.runtime_key),
    ).json()
    token = minted["token"]

    clock.advance(58)
    assert client.get("/v1/runs/memo-2", headers=bearer(token)).status_code == 200
    assert accounts.remembered(core, token) is not None
    clock.advance(3)  # remembered 3 s ago, well inside the TTL, but expired 1 s ago
    assert accounts.remembered(core, token) is None
    assert client.get("/v1/runs/memo-2", headers=bearer(token)).status_code == 401

    second = client.post(
        "/v1/runs/memo-2/delegations",
        json={"capabilities": ["runs.read"], "expires_in": 60, "name": "helper"},
        headers=bearer(creds.runtime_key),
    ).json()
    assert client.get("/v1/runs/memo-2", headers=bearer(second["token"])).status_code == 200
    r = client.delete(f"/v1/delegations/{second['id']}", headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    assert client.get("/v1/runs/memo-2", headers=bearer(second["token"])).status_code == 401


def test_a_remembered_scoped_key_keeps_its_limits(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    put_run(client, creds.runtime_key, creds, "other-1")
    _, key = runtime_key(
        core, creds, capabilities=["runs.report", "runs.read"], run_patterns=["launch-*"]
    )
    put_run(client, key, creds, "launch-1")
    assert accounts.remembered(core, key) is not None  # every call below uses the memo

    ok = client.post(
        "/v1/runs/launch-1/signals",
        json={"event_id": "s1", "state": "working"},
        headers=bearer(key),
    )
    assert ok.status_code == 200, ok.text
    outside = client.post(
        "/v1/runs/other-1/signals",
        json={"event_id": "s2", "state": "working"},
        headers=bearer(key),
    )
    assert outside.status_code == 404, outside.text  # as if the run did not exist
    cancel = client.post("/v1/runs/launch-1/cancel", json={}, headers=bearer(key))
    assert cancel.status_code == 403, cancel.text
    assert client.post("/v1/keys", json={}, headers=bearer(key)).status_code == 403  # not admin


def test_zero_reads_every_token(settings: Settings, clock: Clock, other: Core) -> None:
    rb = build(settings.model_copy(update={"auth_cache_s": 0.0}), clock=clock, migrate=False)
    try:
        made = make_tenant(rb)
        key_id, key = accounts.create_key(rb, made.tenant_id, "runtime")
        with TestClient(create_app(rb, bridge=False)) as c:
            assert c.get("/v1/runs", headers=bearer(key)).status_code == 200
            assert accounts.remembered(rb, key) is None
            accounts.revoke_key(other, made.tenant_id, key_id)
            assert c.get("/v1/runs", headers=bearer(key)).status_code == 401
    finally:
        rb.db.dispose()
