from __future__ import annotations

from fastapi.testclient import TestClient

from runbell.testing import TenantCreds
from tests.conftest import bearer


def test_run_completes_into_the_inbox(client: TestClient, creds: TenantCreds) -> None:
    rt = bearer(creds.runtime_key)
    r = client.put(
        "/v1/runs/r1",
        json={"owner": creds.owner_email, "state": "working", "notify_on_complete": True},
        headers=rt,
    )
    assert r.status_code == 201, r.text
    r = client.post(
        "/v1/runs/r1/signals", json={"event_id": "e1", "state": "completed"}, headers=rt
    )
    assert r.json()["outcome"] == "applied"
    inbox = client.get("/v1/notifications", headers=bearer(creds.owner_token)).json()
    assert [n["attention_type"] for n in inbox["notifications"]] == ["completed"]
