"""The people page and delegated tokens in headless Chromium (issue 18 items 4 and 1, in
the web app): an admin grants a member a project from /people, the member then opens the
project's run and sees the grant on their settings; the admin revokes it and the member's
run page is "no access" again. On a phone-sized screen the page reads without sideways
scrolling. An admin revokes a delegated token from the run page and the token gets 401."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.browser.conftest import (
    PHONE,
    BrowserServer,
    NewContext,
    Runtime,
    screenshot,
    sign_in,
)

pytestmark = pytest.mark.browser


def test_an_admin_grants_then_revokes_a_subject_from_the_page(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    member_id, _ = add_user(core, creds.tenant_id, "luis@acme.test")
    run_id = "people-grant-1"
    runtime.create_run(run_id, title="Plan the launch", subject={"type": "project", "id": "launch"})

    member = new_context().new_page()
    sign_in(member, core, creds.tenant_id, member_id)
    expect(member.locator('nav a[href="/people"]')).to_have_count(0)
    member.goto(f"/runs/{run_id}")
    expect(member.locator("h1")).to_have_text("You no longer have access to this")

    admin = new_context(viewport=PHONE).new_page()
    sign_in(admin, core, creds.tenant_id, creds.owner_id)
    admin.locator('nav a[href="/people"]').click()
    expect(admin.locator("#people-heading")).to_have_text("People")
    admin.locator("#grant-user").select_option(label="luis@acme.test")
    admin.locator("#grant-subject-type").fill("project")
    admin.locator("#grant-subject-id").fill("launch")
    admin.get_by_label("Approver: sees its runs and answers their requests").check()
    admin.locator("#grant-submit").click()
    expect(admin.locator("#people-saved")).to_have_text(
        "The subject was granted. It covers 1 run now."
    )
    grant = admin.locator(f"#member-{member_id} .grants li")
    expect(grant).to_have_count(1)
    expect(grant).to_contain_text("project launch")
    # 390 px wide: nothing wider than the screen.
    width = admin.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    screenshot(admin, "people-phone")

    member.goto(f"/runs/{run_id}")
    expect(member.locator("#run-title")).to_have_text("Plan the launch")
    member.goto("/settings")
    expect(member.locator("#my-grants")).to_contain_text("project launch")

    grant.get_by_role("button", name="Revoke").click()
    expect(admin.locator("#people-saved")).to_contain_text("The grant was revoked")
    expect(admin.locator(f"#member-{member_id} .grants li")).to_have_count(0)
    member.goto(f"/runs/{run_id}")
    expect(member.locator("h1")).to_have_text("You no longer have access to this")


def test_an_admin_revokes_a_delegated_token_from_the_run_page(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "people-delegation-1"
    runtime.create_run(run_id, title="Run the test suite")
    r = runtime.http.post(
        f"/v1/runs/{run_id}/delegations",
        json={"capabilities": ["runs.read"], "expires_in": 3600, "name": "test helper"},
    )
    assert r.status_code == 201, r.text
    made = r.json()
    assert (
        runtime.http.get(
            f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {made['token']}"}
        ).status_code
        == 200
    )

    admin = new_context().new_page()
    sign_in(admin, core, creds.tenant_id, creds.owner_id)
    admin.goto(f"/runs/{run_id}")
    row = admin.locator(f"#delegation-{made['id']}")
    expect(row).to_contain_text("test helper")
    expect(admin.locator(f"#delegation-state-{made['id']}")).to_have_text("Active")
    assert made["token"] not in admin.content()
    admin.locator("#delegations").scroll_into_view_if_needed()
    screenshot(admin, "run-delegations")
    admin.locator(f"#revoke-{made['id']}").click()
    expect(admin.locator(f"#delegation-state-{made['id']}")).to_have_text("Revoked")
    expect(admin.locator(f"#revoke-{made['id']}")).to_have_count(0)
    assert (
        runtime.http.get(
            f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {made['token']}"}
        ).status_code
        == 401
    )
