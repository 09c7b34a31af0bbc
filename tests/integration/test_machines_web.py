"""Machine answers on the settings page (issue 19 item 4): an administrator turns callback
URLs and answering keys off and on again from ``/settings``, through the flow the CLI's
``runbell tenant machines`` uses, and the API then refuses and accepts them; a member gets
neither the switch nor the right to post it; a forged or unknown value changes nothing.
SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import timedelta

from fastapi.testclient import TestClient

from runbell.app import create_app
from runbell.flows import machine_answers
from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import bearer
from tests.integration.test_web import sign_in


def _callback(client: TestClient, core: Core, creds: TenantCreds) -> str:
    """A pending approval with a callback URL; the URL's path."""
    r = client.put(
        "/v1/runs/ci-web",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text
    body = {
        "input_request_id": "deploy-web",
        "kind": "approval",
        "summary": "Deploy to production?",
        "expires_at": (core.db.clock() + timedelta(minutes=10)).isoformat(),
        "callback": {},
    }
    r = client.post("/v1/runs/ci-web/input-requests", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    url = str(r.json()["callback"]["url"])
    return url[url.index("/v1/callbacks/") :]


def _state(html: str) -> str:
    match = re.search(r'id="machines-state" data-allowed="(on|off)"', html)
    assert match, "the settings page shows the machine answers switch"
    return match.group(1)


def test_an_admin_turns_machine_answers_off_and_on_from_the_settings_page(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    callback = _callback(client, core, creds)
    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    assert _state(client.get("/settings").text) == "on"

    r = client.post(
        "/settings/machines", data={"csrf_token": csrf, "allowed": "off"}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/settings?saved=machines-off#machines"
    page = client.get(r.headers["location"]).text
    assert _state(page) == "off"
    assert "Machine answers are off" in page and 'id="machines-on"' in page
    # The same switch the CLI reads, and the API obeys it.
    assert machine_answers.allowed(core, creds.tenant_id) is False
    refused = client.post(callback, json={"decision": "approve"})
    assert refused.status_code == 403 and "turned off" in refused.json()["detail"]

    # An unknown value changes nothing and says so.
    r = client.post("/settings/machines", data={"csrf_token": csrf, "allowed": "maybe"})
    assert r.status_code == 422
    assert 'id="machines-error"' in r.text and "Nothing was changed" in r.text
    assert machine_answers.allowed(core, creds.tenant_id) is False

    r = client.post("/settings/machines", data={"csrf_token": csrf, "allowed": "on"})
    assert r.status_code == 200  # followed to the page
    assert _state(r.text) == "on" and "Machines may answer" in r.text
    assert machine_answers.allowed(core, creds.tenant_id) is True
    answered = client.post(callback, json={"decision": "approve"})
    assert answered.status_code == 200, answered.text


def test_a_member_has_no_switch_and_a_forged_form_changes_nothing(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    member_id, _token = add_user(core, creds.tenant_id, "mia@acme.test")
    with TestClient(create_app(core, bridge=False)) as member:
        csrf = sign_in(member, core, creds.tenant_id, member_id)
        assert 'id="machines"' not in member.get("/settings").text
        r = member.post("/settings/machines", data={"csrf_token": csrf, "allowed": "off"})
        assert r.status_code == 403
    assert machine_answers.allowed(core, creds.tenant_id) is True

    # The administrator's form without the session's CSRF token: refused, nothing changes.
    sign_in(client, core, creds.tenant_id, creds.owner_id)
    for data in ({"allowed": "off"}, {"allowed": "off", "csrf_token": "forged"}):
        r = client.post("/settings/machines", data=data)
        assert r.status_code == 403 and "Nothing was changed" in r.text
    assert machine_answers.allowed(core, creds.tenant_id) is True
