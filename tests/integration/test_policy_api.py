"""Tenant policy over HTTP: validated whole, applied to the next transition."""

from __future__ import annotations

from fastapi.testclient import TestClient

from runbell.testing import TenantCreds
from tests.conftest import bearer


def test_policy_override_changes_the_next_decision(client: TestClient, creds: TenantCreds) -> None:
    """A tenant rule wins over the default and its id is stored on the notification."""
    admin, rt = bearer(creds.admin_key), bearer(creds.runtime_key)
    rule = {
        "id": "acme.all_done_urgent",
        "when": {"attention": "completed"},
        "decision": "push",
        "urgency": "urgent",
    }
    r = client.put("/v1/policy", json={"rules": [rule]}, headers=admin)
    assert r.status_code == 200, r.text
    assert r.json()["effective"][0]["id"] == "acme.all_done_urgent"
    client.put("/v1/runs/p1", json={"owner": creds.owner_email, "state": "working"}, headers=rt)
    res = client.post(
        "/v1/runs/p1/signals", json={"event_id": "e", "state": "completed"}, headers=rt
    ).json()
    assert [(n["rule_id"], n["urgency"]) for n in res["notifications"]] == [
        ("acme.all_done_urgent", "urgent")
    ]


def test_bad_policy_is_refused_and_nothing_changes(client: TestClient, creds: TenantCreds) -> None:
    """An invalid rule answers 422 naming the field; the previous policy stays."""
    admin = bearer(creds.admin_key)
    r = client.put("/v1/policy", json={"rules": [{"id": "x", "decision": "shout"}]}, headers=admin)
    assert r.status_code == 422
    assert r.json()["field"] == "decision"
    assert client.get("/v1/policy", headers=admin).json()["tenant_rules"] == {"rules": []}
    assert client.get("/v1/policy", headers=bearer(creds.runtime_key)).status_code == 403
