"""Cancelling from the run page without JavaScript (issue 10): the form needs the session's
CSRF token, is shown only to those who may cancel while the run goes on, and a refusal
says nothing changed. Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import bearer
from tests.integration.test_web import field, make_run, sign_in


def run_state(client: TestClient, creds: TenantCreds, run_id: str) -> str:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    return str(r.json()["state"])


@pytest.fixture
def owner_csrf(client: TestClient, core: Core, creds: TenantCreds) -> str:
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
    client: TestClient, core: Core, creds: TenantCreds
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


def test_a_member_proposes_from_the_page_and_the_owner_approves_there(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Proposing and deciding without JavaScript: the member's form sends the proposal to
    the owner; only the owner's page has Approve / Reject, bound to the proposal's run
    version; approving changes the objective as a new version."""
    member_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    make_run(
        client, creds, "web-a1", objective="Fix the flaky test", authority={"users": [member_id]}
    )
    csrf = sign_in(client, core, creds.tenant_id, member_id)
    page = client.get("/runs/web-a1").text
    form = page.split('id="propose-form"', 1)[1]
    r = client.post(
        "/runs/web-a1/amendments",
        data={
            "csrf_token": csrf,
            "idempotency_key": field(form, "idempotency_key"),
            "text": "Add a regression test too",
            "objective": "Fix the flaky test and add a regression test",
        },
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    mine = client.get("/runs/web-a1").text
    assert "Add a regression test too" in mine
    assert "Waiting for the run" in mine and "owner to decide." in mine
    assert "Approve change" not in mine
    empty = client.post(
        "/runs/web-a1/amendments", data={"csrf_token": csrf, "idempotency_key": "k2", "text": ""}
    )
    assert empty.status_code == 422 and "Nothing was sent." in empty.text

    version = client.get("/v1/runs/web-a1", headers=bearer(creds.runtime_key)).json()
    [pending] = version["pending_amendments"]
    assert version["objective"] == "Fix the flaky test"

    owner_csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    shown = client.get("/runs/web-a1").text
    block = shown.split(f'id="amendment-{pending["id"]}"', 1)[1]
    assert "Fix the flaky test → <strong>Fix the flaky test and add a regression test" in block
    r = client.post(
        f"/runs/web-a1/input-requests/{pending['id']}/respond",
        data={
            "csrf_token": owner_csrf,
            "decision": "approve",
            "expected_run_version": field(block, "expected_run_version"),
            "expected_request_version": "1",
            "idempotency_key": field(block, "idempotency_key"),
        },
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    after = client.get(r.headers["location"]).text
    assert "Your answer was recorded: approved" in after
    assert "No changes are waiting for a decision." in after
    run = client.get("/v1/runs/web-a1", headers=bearer(creds.runtime_key)).json()
    assert run["objective"] == "Fix the flaky test and add a regression test"
    assert run["version"] == version["version"] + 1
