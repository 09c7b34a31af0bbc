"""Cancelling from the run page without JavaScript (issue 10): the form needs the session's
CSRF token, is shown only to those who may cancel while the run goes on, and a refusal
says nothing changed. Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Runbell
from runbell.testing import TenantCreds, add_user
from tests.conftest import bearer
from tests.integration.test_web import field, make_run, sign_in


def run_state(client: TestClient, creds: TenantCreds, run_id: str) -> str:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    return str(r.json()["state"])


@pytest.fixture
def owner_csrf(client: TestClient, core: Runbell, creds: TenantCreds) -> str:
    return sign_in(client, core, creds.tenant_id, creds.owner_id)


def test_the_cancel_form_asks_once_and_the_page_says_so(
    client: TestClient, creds: TenantCreds, owner_csrf: str
) -> None:
    make_run(client, creds, "web-c1")
    page = client.get("/runs/web-c1")
    assert 'id="cancel-form"' in page.text
    key = field(page.text.split('id="cancel-form"', 1)[1], "idempotency_key")

    # Without the token (or with another one) nothing changes.
    for token in (None, "forged"):
        data = {"idempotency_key": key, "reason": "stop"}
        if token:
            data["csrf_token"] = token
        r = client.post("/runs/web-c1/cancel", data=data, follow_redirects=False)
        assert r.status_code == 403 and "Nothing was changed" in r.text
    assert run_state(client, creds, "web-c1") == "working"

    data = {"csrf_token": owner_csrf, "idempotency_key": key, "reason": "wrong branch"}
    r = client.post("/runs/web-c1/cancel", data=data, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/runs/web-c1"
    # A double click sends the same form again: one request, same outcome.
    again = client.post("/runs/web-c1/cancel", data=data, follow_redirects=False)
    assert again.status_code == 303
    assert run_state(client, creds, "web-c1") == "stopping"
    shown = client.get("/runs/web-c1").text
    assert "Cancellation requested by you" in shown and "wrong branch" in shown
    assert 'id="cancel-form"' not in shown
    assert "kept, not undone" in shown
    history = client.get("/v1/events?after=earliest", headers=bearer(creds.runtime_key)).json()
    assert [e["type"] for e in history["events"]].count("run.cancel_requested") == 1


def test_no_button_for_those_who_may_not_cancel_nor_on_a_finished_run(
    client: TestClient, core: Runbell, creds: TenantCreds
) -> None:
    """A tenant admin sees every run but is not in its authority: no form, and a forged
    post is refused with the reason; a finished run has no button and a 409 page."""
    admin_id, _ = add_user(core, creds.tenant_id, "admin@acme.test", role="admin")
    make_run(client, creds, "web-c2")
    csrf = sign_in(client, core, creds.tenant_id, admin_id)
    page = client.get("/runs/web-c2")
    assert page.status_code == 200 and 'id="cancel-form"' not in page.text
    r = client.post("/runs/web-c2/cancel", data={"csrf_token": csrf, "idempotency_key": "k"})
    assert r.status_code == 403 and "You may not cancel this run" in r.text
    assert run_state(client, creds, "web-c2") == "working"

    owner_csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    done = client.post(
        "/v1/runs/web-c2/signals",
        json={"event_id": "d", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    assert done.status_code == 200
    assert 'id="cancel-form"' not in client.get("/runs/web-c2").text
    r = client.post("/runs/web-c2/cancel", data={"csrf_token": owner_csrf, "idempotency_key": "k2"})
    assert r.status_code == 409 and "Nothing was changed." in r.text
    assert run_state(client, creds, "web-c2") == "completed"
