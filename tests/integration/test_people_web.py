"""The people page without JavaScript (issue 18 item 4, in the web app): an admin grants
a member a subject through the form and the member then sees the subject's runs; revoking
takes them away again (404); a member may not grant (403, nothing changed) and sees their
own grants read-only on /settings; another tenant's grant id is a 404; a refused form
says why. Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user, make_tenant
from tests.conftest import bearer
from tests.integration.test_web import PLANTED, make_run, other_browser, sign_in

LAUNCH = {"type": "project", "id": "launch"}


def grant_ids(client: TestClient, creds: TenantCreds, user_id: str) -> list[str]:
    r = client.get(f"/v1/subject-grants?user={user_id}", headers=bearer(creds.admin_key))
    assert r.status_code == 200, r.text
    return [g["id"] for g in r.json()["grants"]]


def test_an_admin_grants_a_subject_from_the_page_and_revokes_it(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    member_id, _ = add_user(core, creds.tenant_id, "luis@acme.test")
    make_run(client, creds, "web-g1", subject=LAUNCH)
    make_run(client, creds, "web-g2", subject={"type": "project", "id": "other"})
    member = other_browser(client)
    member_csrf = sign_in(member, core, creds.tenant_id, member_id)
    assert member.get("/runs/web-g1").status_code == 404
    assert "No subjects are granted to you" in member.get("/settings").text

    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/people")
    assert page.status_code == 200
    assert 'href="/people" aria-current="page"' in page.text
    assert "luis@acme.test" in page.text and 'id="grant-form"' in page.text
    for role in ("viewer", "approver", "amender"):
        assert f'id="grant-role-{role}"' in page.text

    form = {
        "user": member_id,
        "subject_type": "project",
        "subject_id": "launch",
        "role": "approver",
    }
    # Without the session's CSRF token nothing is granted.
    r = client.post("/people/grants", data=form, follow_redirects=False)
    assert r.status_code == 403 and "Nothing was changed" in r.text
    assert grant_ids(client, creds, member_id) == []

    r = client.post("/people/grants", data={**form, "csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/people?saved=granted")
    shown = client.get(r.headers["location"]).text
    assert "The subject was granted. It covers 1 run now." in shown
    [grant_id] = grant_ids(client, creds, member_id)
    assert f'id="grant-{grant_id}"' in shown
    # Sending the same form again changes nothing.
    again = client.post("/people/grants", data={**form, "csrf_token": csrf})
    assert again.status_code == 200 and "already had this grant" in again.text
    assert grant_ids(client, creds, member_id) == [grant_id]

    run_page = member.get("/runs/web-g1")
    assert run_page.status_code == 200 and "Title of web-g1" in run_page.text
    assert member.get("/runs/web-g2").status_code == 404
    mine = member.get("/settings").text
    assert f'id="my-grant-{grant_id}"' in mine and "project launch" in mine
    assert f"/people/grants/{grant_id}/revoke" not in mine  # read-only for the member
    assert 'href="/people"' not in mine  # no People link for a member

    # A member may not revoke it either.
    r = member.post(f"/people/grants/{grant_id}/revoke", data={"csrf_token": member_csrf})
    assert r.status_code == 403 and "Only administrators manage people" in r.text
    assert grant_ids(client, creds, member_id) == [grant_id]

    r = client.post(
        f"/people/grants/{grant_id}/revoke", data={"csrf_token": csrf}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/people?saved=revoked"
    assert "The grant was revoked" in client.get("/people?saved=revoked").text
    assert grant_ids(client, creds, member_id) == []
    assert member.get("/runs/web-g1").status_code == 404
    # Revoking it again: it is no longer there, said so, nothing else changes.
    r = client.post(f"/people/grants/{grant_id}/revoke", data={"csrf_token": csrf})
    assert r.status_code == 404 and "There is no such grant" in r.text


def test_a_member_cannot_see_the_page_nor_grant(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    member_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    make_run(client, creds, "web-g3", subject=LAUNCH)
    csrf = sign_in(client, core, creds.tenant_id, member_id)
    assert 'href="/people"' not in client.get("/").text
    page = client.get("/people")
    assert page.status_code == 403 and "Only administrators manage people" in page.text
    assert creds.owner_email not in page.text and 'id="grant-form"' not in page.text
    r = client.post(
        "/people/grants",
        data={
            "csrf_token": csrf,
            "user": member_id,
            "subject_type": "project",
            "subject_id": "launch",
            "role": "viewer",
        },
    )
    assert r.status_code == 403 and "Nothing was changed" in r.text
    assert grant_ids(client, creds, member_id) == []
    assert client.get("/runs/web-g3").status_code == 404


def test_a_refused_grant_says_why_and_keeps_the_form(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    member_id, _ = add_user(core, creds.tenant_id, "ana@acme.test")
    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    base = {"csrf_token": csrf, "user": member_id, "subject_type": "project", "role": "viewer"}
    cases = [
        ({**base, "subject_id": ""}, "subject is {type, id}"),
        ({**base, "subject_id": "launch", "role": "boss"}, "role must be one of"),
        ({**base, "subject_id": "launch", "user": "nobody@acme.test"}, "is not a member"),
        ({**base, "subject_id": "x" * 201}, "at most 200 characters"),
        ({**base, "subject_id": "launch", "subject_type": "t" * 101}, "at most 100 characters"),
    ]
    for data, why in cases:
        r = client.post("/people/grants", data=data)
        assert r.status_code == 422, (data, r.text)
        assert "That grant was not made" in r.text and why in r.text
        assert 'id="people-error"' in r.text
    kept = client.post("/people/grants", data={**base, "subject_id": "launch", "role": "boss"})
    assert 'value="project"' in kept.text
    assert re.search(rf'<option value="{member_id}" selected>', kept.text)
    assert grant_ids(client, creds, member_id) == []


def test_another_tenants_grant_is_a_404_and_is_not_revoked(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    other = make_tenant(core, "globex")
    theirs_id, _ = add_user(core, other.tenant_id, "eve@globex.test")
    r = client.post(
        "/v1/subject-grants",
        json={"user": theirs_id, "subject": LAUNCH, "role": "viewer"},
        headers=bearer(other.admin_key),
    )
    assert r.status_code == 201, r.text
    theirs = r.json()["id"]

    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/people").text
    assert "eve@globex.test" not in page and theirs not in page
    r = client.post(f"/people/grants/{theirs}/revoke", data={"csrf_token": csrf})
    assert r.status_code == 404 and "There is no such grant" in r.text
    assert PLANTED not in r.text
    # Nor can a grant be made for another tenant's member.
    r = client.post(
        "/people/grants",
        data={
            "csrf_token": csrf,
            "user": theirs_id,
            "subject_type": "project",
            "subject_id": "launch",
            "role": "viewer",
        },
    )
    assert r.status_code == 422 and "is not a member" in r.text
    assert grant_ids(client, other, theirs_id) == [theirs]
