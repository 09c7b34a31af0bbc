"""Edit before approving on the run page, without JavaScript (issue 19 item 3): the
editable value in a form (a monospace textarea for ``{command: string}``, JSON
otherwise), "Approve edited" answering with the edited value, refused edits shown back
with the reason and never a 500. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds
from tests.conftest import bearer
from tests.integration.test_web import field, make_run, sign_in

COMMAND = {
    "type": "object",
    "properties": {"command": {"type": "string", "minLength": 1, "maxLength": 200}},
    "required": ["command"],
}
TASKS = {
    "type": "object",
    "properties": {"tasks": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
    "required": ["tasks"],
}


@pytest.fixture
def owner_csrf(client: TestClient, core: Core, creds: TenantCreds) -> str:
    return sign_in(client, core, creds.tenant_id, creds.owner_id)


def _ask(
    client: TestClient, creds: TenantCreds, clock: Clock, run_id: str, editable: dict[str, Any]
) -> None:
    make_run(client, creds, run_id)
    r = client.post(
        f"/v1/runs/{run_id}/input-requests",
        json={
            "input_request_id": f"{run_id}-ask",
            "kind": "approval",
            "summary": "Claude Code wants to use Bash",
            "expires_at": (clock() + timedelta(minutes=10)).isoformat(),
            "editable": editable,
        },
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text


def _form(page: str) -> dict[str, str]:
    part = page.split('id="edit-form"', 1)[1]
    return {
        name: field(part, name)
        for name in (
            "csrf_token",
            "expected_run_version",
            "expected_request_version",
            "idempotency_key",
        )
    }


def _request(client: TestClient, creds: TenantCreds, request_id: str) -> dict[str, Any]:
    got = client.get(f"/v1/input-requests/{request_id}", headers=bearer(creds.runtime_key))
    return dict(got.json()["input_request"])


def test_a_command_is_edited_and_approved(
    client: TestClient, creds: TenantCreds, clock: Clock, owner_csrf: str
) -> None:
    _ask(
        client, creds, clock, "web-e1", {"schema": COMMAND, "value": {"command": "rm -rf ./build"}}
    )
    page = client.get("/runs/web-e1")
    assert page.status_code == 200
    assert 'id="edit-form"' in page.text and 'data-mode="text"' in page.text
    assert 'class="mono"' in page.text and ">rm -rf ./build</textarea>" in page.text
    assert "Approve edited" in page.text
    form = _form(page.text)

    # Outside the schema (empty): shown back as typed, with the reason; nothing approved.
    r = client.post("/runs/web-e1/input-requests/web-e1-ask/edit", data={**form, "value": ""})
    assert r.status_code == 422 and 'id="edit-error"' in r.text
    assert "Nothing was approved" in r.text
    assert _request(client, creds, "web-e1-ask")["state"] == "pending"

    r = client.post(
        "/runs/web-e1/input-requests/web-e1-ask/edit",
        data={**form, "value": "rm -rf ./build/tmp\r\n"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    answered = _request(client, creds, "web-e1-ask")
    assert answered["decision"] == "approve" and answered["edited"] is True
    assert answered["value"] == {"command": "rm -rf ./build/tmp\n"}
    # Sent again (a double tap): the stored answer, no second effect.
    again = client.post(
        "/runs/web-e1/input-requests/web-e1-ask/edit",
        data={**form, "value": "rm -rf ./build/tmp\r\n"},
        follow_redirects=False,
    )
    assert again.status_code == 303


def test_a_json_value_is_edited_and_refusals_are_shown(
    client: TestClient, creds: TenantCreds, clock: Clock, owner_csrf: str
) -> None:
    _ask(client, creds, clock, "web-e2", {"schema": TASKS, "value": {"tasks": ["a", "b"]}})
    page = client.get("/runs/web-e2")
    assert 'data-mode="json"' in page.text
    form = _form(page.text)
    url = "/runs/web-e2/input-requests/web-e2-ask/edit"

    r = client.post(url, data={**form, "value": "{not json"})
    assert r.status_code == 422 and "not valid JSON" in r.text
    assert "{not json</textarea>" in r.text  # as typed
    r = client.post(url, data={**form, "value": json.dumps({"tasks": ["a", "b", "c", "d"]})})
    assert r.status_code == 422 and "Value.tasks" in r.text  # names the path
    # A stale page: refused with the current state, never a 500.
    stale = {**form, "expected_run_version": str(int(form["expected_run_version"]) - 1)}
    r = client.post(url, data={**stale, "value": json.dumps({"tasks": ["a"]})})
    assert r.status_code == 409, r.text
    # Without the CSRF token: refused.
    no_csrf = {k: v for k, v in form.items() if k != "csrf_token"}
    r = client.post(url, data={**no_csrf, "value": json.dumps({"tasks": ["a"]})})
    assert r.status_code == 403

    r = client.post(
        url, data={**form, "value": json.dumps({"tasks": ["a"]})}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    assert _request(client, creds, "web-e2-ask")["value"] == {"tasks": ["a"]}


def test_no_edit_form_without_an_editable_value(
    client: TestClient, creds: TenantCreds, clock: Clock, owner_csrf: str
) -> None:
    make_run(client, creds, "web-e3")
    r = client.post(
        "/v1/runs/web-e3/input-requests",
        json={"input_request_id": "plain", "kind": "approval", "summary": "Go?"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201
    page = client.get("/runs/web-e3")
    assert 'id="respond-form"' in page.text and 'id="edit-form"' not in page.text


def test_the_timeline_names_the_machine_that_answered(
    client: TestClient, creds: TenantCreds, clock: Clock, owner_csrf: str
) -> None:
    make_run(client, creds, "web-e4")
    r = client.post(
        "/v1/runs/web-e4/input-requests",
        json={"input_request_id": "ci-ask", "kind": "approval", "summary": "Go?", "callback": {}},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text
    callback = r.json()["callback"]
    path = callback["url"][callback["url"].index("/v1/callbacks/") :]
    assert client.post(path, json={"decision": "approve"}).status_code == 200
    page = client.get("/runs/web-e4")
    assert page.status_code == 200
    assert f"callback URL {callback['id']}" in page.text
