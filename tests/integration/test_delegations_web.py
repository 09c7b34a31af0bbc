"""Delegated tokens on the run page without JavaScript (issue 18 item 1, in the web app):
an admin sees the run's tokens (name, the minting key's name, capabilities, expiry, state;
never a secret or hash) and revokes one with a CSRF-checked form, after which the token
answers 401 on the API; a member sees no section and cannot revoke; another tenant's token
is a 404; a run without tokens has no section. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import TenantCreds, add_user, make_tenant
from tests.conftest import bearer
from tests.integration.test_web import make_run, other_browser, sign_in


def mint(client: TestClient, key: str, run_id: str, **body: Any) -> dict[str, Any]:
    doc = {"capabilities": ["runs.report", "runs.read"], "expires_in": 3600, "name": "helper"}
    r = client.post(f"/v1/runs/{run_id}/delegations", json={**doc, **body}, headers=bearer(key))
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.fixture
def worker(core: Core, creds: TenantCreds) -> str:
    """A named runtime key that mints the tokens."""
    _, secret = accounts.create_key(core, creds.tenant_id, "runtime", name="build-worker")
    return secret


def test_an_admin_sees_the_tokens_and_revokes_one_from_the_page(
    client: TestClient, core: Core, creds: TenantCreds, worker: str
) -> None:
    make_run(client, creds, "web-d1", authority={"users": [creds.owner_email]})
    made = mint(client, worker, "web-d1", name="test runner")
    other = mint(client, worker, "web-d1", name="linter", capabilities=["runs.read"])
    token = made["token"]
    assert client.get("/v1/runs/web-d1", headers=bearer(token)).status_code == 200

    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/runs/web-d1").text
    section = page.split('id="delegations"', 1)[1].split("</section>", 1)[0]
    assert "Delegated tokens" in page
    assert "test runner" in section and "linter" in section
    assert "build-worker" in section  # the minting key's name
    assert "runs.report, runs.read" in section
    assert section.count("Active") == 2
    # Never a secret or a hash.
    with core.db.read() as conn:
        hashes = conn.execute(sa.select(t.delegated_tokens.c.token_hash)).scalars().all()
    for secret in (token, other["token"], worker, *hashes):
        assert secret not in page

    action = f"/runs/web-d1/delegations/{made['id']}/revoke"
    assert f'action="{action}"' in section
    # Without the session's CSRF token nothing changes.
    r = client.post(action, data={}, follow_redirects=False)
    assert r.status_code == 403 and "Nothing was changed" in r.text
    assert client.get("/v1/runs/web-d1", headers=bearer(token)).status_code == 200

    r = client.post(action, data={"csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/runs/web-d1#delegations"
    assert client.get("/v1/runs/web-d1", headers=bearer(token)).status_code == 401
    assert client.get("/v1/runs/web-d1", headers=bearer(other["token"])).status_code == 200
    after = client.get("/runs/web-d1").text
    row = after.split(f'id="delegation-{made["id"]}"', 1)[1].split("</li>", 1)[0]
    assert 'data-state="revoked"' in after and "Revoked" in row
    assert f'action="{action}"' not in after  # no button for a revoked token
    listed = client.get("/v1/runs/web-d1/delegations", headers=bearer(creds.admin_key)).json()
    assert {d["name"]: d["state"] for d in listed["delegations"]} == {
        "test runner": "revoked",
        "linter": "active",
    }


def test_a_member_sees_no_tokens_and_cannot_revoke(
    client: TestClient, core: Core, creds: TenantCreds, worker: str
) -> None:
    member_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    make_run(client, creds, "web-d2", authority={"users": [member_id]})
    made = mint(client, worker, "web-d2")
    member = other_browser(client)
    csrf = sign_in(member, core, creds.tenant_id, member_id)
    page = member.get("/runs/web-d2")
    assert page.status_code == 200
    assert 'id="delegations"' not in page.text and made["id"] not in page.text
    r = member.post(f"/runs/web-d2/delegations/{made['id']}/revoke", data={"csrf_token": csrf})
    assert r.status_code == 403 and "Nothing was changed" in r.text
    assert client.get("/v1/runs/web-d2", headers=bearer(made["token"])).status_code == 200


def test_no_section_without_tokens_and_another_tenants_token_is_a_404(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    make_run(client, creds, "web-d3")
    other = make_tenant(core, "globex")
    r = client.put(
        "/v1/runs/web-d3",
        json={"owner": other.owner_email, "state": "working"},
        headers=bearer(other.runtime_key),
    )
    assert r.status_code == 201, r.text
    theirs = mint(client, other.runtime_key, "web-d3")

    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/runs/web-d3").text
    assert "Title of web-d3" in page and 'id="delegations"' not in page
    assert theirs["id"] not in page
    for run_id in ("web-d3", "nobody-has-this"):
        r = client.post(
            f"/runs/{run_id}/delegations/{theirs['id']}/revoke", data={"csrf_token": csrf}
        )
        assert r.status_code == 404 and "You no longer have access to this" in r.text
    r = client.post("/runs/web-d3/delegations/dlg_nope/revoke", data={"csrf_token": csrf})
    assert r.status_code == 404
    assert client.get("/v1/runs/web-d3", headers=bearer(theirs["token"])).status_code == 200
