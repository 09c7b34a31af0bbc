"""Cancelling from the run page in headless Chromium (issue 10): the button is there only
for those who may cancel while the run goes on; pressing it shows ``stopping`` and the
request; when the runtime reports ``cancelled``, the page follows and shows what was kept.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.browser.conftest import BrowserServer, NewContext, Runtime, sign_in

pytestmark = pytest.mark.browser


def test_cancel_from_the_page_then_see_what_was_kept(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "cancel-page-1"
    runtime.create_run(run_id)
    runtime.progress(run_id, "pushing files", done=4, total=5, unit="files")

    # A tenant admin sees every run but is not in its authority: no button for them.
    admin_id, _ = add_user(core, creds.tenant_id, "admin@acme.test", role="admin")
    onlooker = new_context().new_page()
    sign_in(onlooker, core, creds.tenant_id, admin_id)
    onlooker.goto(f"/runs/{run_id}")
    expect(onlooker.locator("#run-state")).to_have_text("Working")
    expect(onlooker.locator("#cancel-run")).to_have_count(0)

    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#cancellation")).to_contain_text("nothing is undone")
    page.locator("#cancel-reason").fill("wrong branch")
    page.locator("#cancel-run").click()

    expect(page.locator("#run-state")).to_have_text("Stopping")
    expect(page.locator("#cancel-requested")).to_contain_text("Cancellation requested by you")
    expect(page.locator("#cancel-requested")).to_contain_text("wrong branch")
    expect(page.locator("#cancel-stopping")).to_contain_text("kept, not undone")
    expect(page.locator("#cancel-run")).to_have_count(0)  # asked once; no second button
    expect(page.locator(".notice.problem")).to_have_count(0)

    # The runtime sees the request and settles: the page follows without a reload.
    seen = runtime.http.get(f"/v1/runs/{run_id}").json()
    assert seen["cancel_requested"]["reason"] == "wrong branch"
    runtime.signal(
        run_id,
        "settled",
        "cancelled",
        report={"summary": "4 of 5 files pushed; the fifth never started"},
    )
    expect(page.locator("#run-state")).to_have_text("Cancelled")
    summary = page.locator("#cancel-summary")
    expect(summary).to_contain_text("Kept: 4 of 5 files pushed; the fifth never started")
    expect(summary).to_contain_text("cancelling does not undo it")
    expect(page.locator("#cancel-run")).to_have_count(0)
