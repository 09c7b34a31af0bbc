"""The two "known server errors" docs/api.md §11 used to list, fixed in 92d90aa and
removed from the docs since: each must keep answering without a 500. On SQLite and
PostgreSQL."""

from __future__ import annotations

from fastapi.testclient import TestClient

from runbell.testing import TenantCreds
from tests.conftest import bearer

# Allow-listed in tests and never called: no worker runs here.
RECEIVER = "http://127.0.0.1:9"


def test_a_signal_commits_while_one_endpoint_is_disabled_and_another_takes_its_events(
    client: TestClient, creds: TenantCreds
) -> None:
    """A run finishing while one endpoint is disabled and another takes `run.finished`:
    applied, with a held (cancelled) message for the disabled one and a queued one for
    the other, in the same commit."""
    admin, rt = bearer(creds.admin_key), bearer(creds.runtime_key)
    ids = []
    for path in ("/off", "/on"):
        body = {"url": RECEIVER + path, "event_types": ["run.finished"]}
        created = client.post("/v1/webhook-endpoints", json=body, headers=admin)
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    off, on = ids
    patched = client.patch(
        f"/v1/webhook-endpoints/{off}", json={"status": "disabled"}, headers=admin
    )
    assert patched.status_code == 200, patched.text

    run = {"owner": creds.owner_email, "state": "working"}
    assert client.put("/v1/runs/mixed-1", json=run, headers=rt).status_code == 201
    answer = client.post(
        "/v1/runs/mixed-1/signals", json={"event_id": "done", "state": "completed"}, headers=rt
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["outcome"] == "applied"

    listed = client.get("/v1/deliveries?channel=webhook", headers=admin).json()["deliveries"]
    finished = {d["destination"]: d["status"] for d in listed if d["event_type"] == "run.finished"}
    assert finished == {off: "cancelled", on: "queued"}


def test_patching_an_endpoint_status_to_null_is_a_422_naming_the_field(
    client: TestClient, creds: TenantCreds
) -> None:
    admin = bearer(creds.admin_key)
    created = client.post("/v1/webhook-endpoints", json={"url": f"{RECEIVER}/x"}, headers=admin)
    path = f"/v1/webhook-endpoints/{created.json()['id']}"
    r = client.patch(path, json={"status": None}, headers=admin)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == "status"
    assert client.get(path, headers=admin).json()["status"] == "enabled"
