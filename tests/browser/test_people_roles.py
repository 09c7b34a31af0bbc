"""Viewers and approvers on the run page in headless Chromium (issue 18 item 4): a viewer
sees the request without its buttons and is told why, and cannot propose amendments; an
approver answers it from the page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.browser.conftest import BrowserServer, NewContext, Runtime, sign_in

pytestmark = pytest.mark.browser


def test_a_viewer_sees_the_request_without_buttons_and_an_approver_answers_it(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    viewer_id, _ = add_user(core, creds.tenant_id, "viewer@acme.test")
    approver_id, _ = add_user(core, creds.tenant_id, "approver@acme.test")
    run_id = "people-page-1"
    runtime.create_run(run_id, authority={"viewers": [viewer_id], "approvers": [approver_id]})
    runtime.open_request(run_id, "people-req-1", summary="Move the launch tasks to Friday?")

    viewer = new_context().new_page()
    sign_in(viewer, core, creds.tenant_id, viewer_id)
    viewer.goto(f"/runs/{run_id}")
    expect(viewer.locator(".request-summary")).to_have_text("Move the launch tasks to Friday?")
    expect(viewer.locator("#cannot-answer")).to_contain_text(
        "You may see this run but not answer its requests"
    )
    expect(viewer.locator("#approve")).to_have_count(0)
    expect(viewer.locator("#reject")).to_have_count(0)
    expect(viewer.locator("#cannot-amend")).to_contain_text("not propose amendments")
    expect(viewer.locator("#propose-form")).to_have_count(0)

    approver = new_context().new_page()
    sign_in(approver, core, creds.tenant_id, approver_id)
    approver.goto(f"/runs/{run_id}")
    expect(approver.locator("#cannot-answer")).to_have_count(0)
    approver.locator("#approve").click()
    expect(approver.locator("#answer-recorded")).to_contain_text("approved")
    seen = runtime.http.get("/v1/input-requests/people-req-1").json()
    assert seen["input_request"]["answered_by"]["id"] == approver_id
