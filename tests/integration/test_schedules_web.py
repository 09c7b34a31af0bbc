"""The schedules pages (issue 18 item 6, web): a person lists the schedules they may see,
opens one (its instruction and every version, authority, the runs it started), and
creates, edits, pauses, resumes and revokes through forms that call the flows the API
calls. A refused form is shown again as sent, with why, and nothing is written; a
schedule the person may not see, or another tenant's, is the same 404 page. Every test
runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user, make_tenant
from tests.conftest import bearer
from tests.integration.test_web import field, other_browser, sign_in
from tests.peers import WebhookReceiver

INSTRUCTION = "Every weekday at 9: reconcile yesterday's invoices against the ledger"


@pytest.fixture(autouse=True)
def lead(core: Core, creds: TenantCreds) -> tuple[str, str]:
    """The person the schedules' authority names."""
    return add_user(core, creds.tenant_id, "lead@acme.test")


@pytest.fixture
def owner_csrf(client: TestClient, core: Core, creds: TenantCreds) -> str:
    return sign_in(client, core, creds.tenant_id, creds.owner_id)


def api_create(client: TestClient, token: str, **fields: Any) -> dict[str, Any]:
    body = {
        "name": "invoice reconciliation",
        "instruction": INSTRUCTION,
        "cadence": "0 9 * * 1-5",
        "authority": {"users": ["lead@acme.test"]},
        **fields,
    }
    r = client.post("/v1/schedules", json=body, headers=bearer(token))
    assert r.status_code == 201, r.text
    return dict(r.json())


def api_get(client: TestClient, creds: TenantCreds, schedule_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/schedules/{schedule_id}", headers=bearer(creds.admin_key))
    assert r.status_code == 200, r.text
    return dict(r.json())


def api_list(client: TestClient, creds: TenantCreds) -> list[dict[str, Any]]:
    r = client.get("/v1/schedules", headers=bearer(creds.admin_key))
    assert r.status_code == 200, r.text
    return list(r.json()["schedules"])


def create_form(client: TestClient, csrf: str, **fields: str) -> Any:
    page = client.get("/schedules")
    assert page.status_code == 200, page.text
    form = page.text.split('id="create-schedule-form"', 1)[1]
    data = {
        "csrf_token": csrf,
        "idempotency_key": field(form, "idempotency_key"),
        "name": "nightly export",
        "instruction": "Export the day's orders to the warehouse",
        "cadence": "0 2 * * *",
        "mode": "record_only",
        "authority": "lead@acme.test",
        **fields,
    }
    return client.post("/schedules", data=data, follow_redirects=False)


def text(page: Any) -> str:
    return html.unescape(page.text)


def test_the_list_and_a_schedule_show_what_it_is_and_the_runs_it_started(
    client: TestClient, creds: TenantCreds, owner_csrf: str
) -> None:
    sched = api_create(client, creds.owner_token)
    started = client.put(
        "/v1/runs/inv-1",
        json={"state": "working", "title": "Invoices of Monday", "schedule": {"id": sched["id"]}},
        headers=bearer(creds.runtime_key),
    )
    assert started.status_code == 201, started.text

    listed = client.get("/schedules")
    assert listed.status_code == 200
    shown = text(listed)
    assert 'href="/schedules" aria-current="page"' in shown  # in the site navigation
    assert f'href="/schedules/{sched["id"]}"' in shown
    assert "invoice reconciliation" in shown and "Active" in shown
    assert "0 9 * * 1-5" in shown and "Record only" in shown
    assert "Instruction version 1" in shown
    assert f"{creds.owner_email} (you)" in shown
    assert "Users: lead@acme.test" in shown
    assert 'href="/runs/inv-1"' in shown and "Invoices of Monday" in shown

    page = client.get(f"/schedules/{sched['id']}")
    assert page.status_code == 200
    one = text(page)
    assert INSTRUCTION in one and 'id="version-1"' in one
    assert "(version 1)" in one  # the authority's version
    assert 'href="/runs/inv-1"' in one and "instruction version 1" in one
    assert 'id="instruction-form"' in one and 'id="pause-schedule"' in one


def test_create_edit_pause_resume_and_revoke_through_the_forms(
    client: TestClient, creds: TenantCreds, owner_csrf: str
) -> None:
    made = create_form(client, owner_csrf)
    assert made.status_code == 303, made.text
    location = made.headers["location"]
    assert location.startswith("/schedules/sch_") and location.endswith("?saved=created")
    schedule_id = location.split("/")[2].split("?")[0]
    [stored] = api_list(client, creds)
    assert stored["id"] == schedule_id and stored["owner"] == creds.owner_id
    assert stored["authority"] == {"users": ["lead@acme.test"]}
    assert stored["mode"] == "record_only" and stored["cadence"] == "0 2 * * *"
    assert "The schedule was created." in client.get(location).text

    edited = client.post(
        f"/schedules/{schedule_id}/instruction",
        data={"csrf_token": owner_csrf, "instruction": "Export orders and refunds"},
        follow_redirects=False,
    )
    assert edited.status_code == 303
    after = api_get(client, creds, schedule_id)
    assert [v["version"] for v in after["versions"]] == [2, 1]
    assert after["instruction"]["text"] == "Export orders and refunds"
    page = text(client.get(f"/schedules/{schedule_id}"))
    assert 'id="version-2"' in page and "Export the day's orders to the warehouse" in page

    def act(action: str, reason: str = "") -> Any:
        data = {"csrf_token": owner_csrf, "reason": reason}
        return client.post(f"/schedules/{schedule_id}/{action}", data=data, follow_redirects=False)

    assert act("pause", "quarter close").status_code == 303
    assert api_get(client, creds, schedule_id)["state"] == "paused"
    page = text(client.get(f"/schedules/{schedule_id}"))
    assert "Paused" in page and "quarter close" in page and 'id="resume-schedule"' in page
    assert act("resume").status_code == 303
    assert api_get(client, creds, schedule_id)["state"] == "active"
    assert act("revoke", "the warehouse moved").status_code == 303
    revoked = api_get(client, creds, schedule_id)
    assert revoked["state"] == "revoked" and revoked["state_reason"] == "the warehouse moved"
    page = text(client.get(f"/schedules/{schedule_id}"))
    assert 'id="schedule-revoked"' in page and "the warehouse moved" in page
    assert 'id="instruction-form"' not in page and 'id="state-form"' not in page

    # A revoked schedule is not edited nor resumed: the page says why, nothing changes.
    refused = client.post(
        f"/schedules/{schedule_id}/instruction",
        data={"csrf_token": owner_csrf, "instruction": "sneaky"},
    )
    assert refused.status_code == 409
    assert "The instruction was not changed" in text(refused) and "is revoked" in text(refused)
    assert act("resume").status_code == 409
    after = api_get(client, creds, schedule_id)
    assert after["state"] == "revoked" and len(after["versions"]) == 2


def test_a_refused_form_is_shown_again_as_sent_and_nothing_is_written(
    client: TestClient, core: Core, creds: TenantCreds, owner_csrf: str
) -> None:
    bad = create_form(client, owner_csrf, name="typo", cadence="every morning")
    assert bad.status_code == 422
    shown = text(bad)
    assert 'id="schedule-error"' in shown and "cadence" in shown and "Nothing was saved." in shown
    assert 'value="every morning"' in shown and 'value="typo"' in shown  # as sent
    assert "Export the day's orders to the warehouse</textarea>" in shown

    no_url = create_form(client, owner_csrf, mode="webhook")
    assert no_url.status_code == 422 and "url" in text(no_url)
    assert 'id="mode-webhook" name="mode" value="webhook" checked' in no_url.text

    stranger = create_form(client, owner_csrf, authority="nobody@else.test")
    assert stranger.status_code == 422 and "nobody@else.test" in text(stranger)

    # A member may make their own schedules, not someone else's: the flow says no.
    member_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    member = other_browser(client)
    member_csrf = sign_in(member, core, creds.tenant_id, member_id)
    theirs = create_form(member, member_csrf, owner=creds.owner_email)
    assert theirs.status_code == 403, theirs.text
    assert "The schedule was not created" in text(theirs)
    assert f'value="{creds.owner_email}"' in theirs.text

    # Without the session's CSRF token nothing is created either.
    forged = create_form(client, "forged")
    assert forged.status_code == 403 and "Nothing was changed" in forged.text
    assert api_list(client, creds) == []

    mine = create_form(member, member_csrf)
    assert mine.status_code == 303
    [made] = api_list(client, creds)
    assert made["owner"] == member_id


def test_a_schedule_the_person_may_not_see_and_another_tenants_are_404(
    client: TestClient, core: Core, creds: TenantCreds, owner_csrf: str
) -> None:
    sched = api_create(client, creds.owner_token)
    member_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    member = other_browser(client)
    member_csrf = sign_in(member, core, creds.tenant_id, member_id)
    assert sched["id"] not in member.get("/schedules").text  # a member lists their own
    assert 'id="no-schedules"' in member.get("/schedules").text
    hidden = member.get(f"/schedules/{sched['id']}")
    assert hidden.status_code == 404 and "You no longer have access to this" in hidden.text
    for action in ("pause", "revoke"):
        r = member.post(f"/schedules/{sched['id']}/{action}", data={"csrf_token": member_csrf})
        assert r.status_code == 404
    r = member.post(
        f"/schedules/{sched['id']}/instruction",
        data={"csrf_token": member_csrf, "instruction": "x"},
    )
    assert r.status_code == 404
    assert api_get(client, creds, sched["id"])["state"] == "active"

    beta = make_tenant(core, "beta")
    theirs = api_create(client, beta.owner_token, authority=None)
    assert client.get(f"/schedules/{theirs['id']}").status_code == 404
    r = client.post(f"/schedules/{theirs['id']}/pause", data={"csrf_token": owner_csrf})
    assert r.status_code == 404
    assert theirs["id"] not in client.get("/schedules").text
    got = client.get(f"/v1/schedules/{theirs['id']}", headers=bearer(beta.admin_key)).json()
    assert got["state"] == "active"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as rx:
        yield rx


def test_a_webhook_schedule_shows_its_secret_once(
    client: TestClient, creds: TenantCreds, owner_csrf: str, receiver: WebhookReceiver
) -> None:
    made = create_form(client, owner_csrf, mode="webhook", url=receiver.url("/start"))
    assert made.status_code == 201, made.text
    assert 'id="schedule-secret"' in made.text and "whsec_" in made.text
    [stored] = api_list(client, creds)
    again = client.get(f"/schedules/{stored['id']}")
    assert "whsec_" not in again.text and 'id="schedule-next"' in again.text
    assert 'id="no-firings"' in again.text
