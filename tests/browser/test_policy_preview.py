"""The settings page previews an edited attention policy against the last 7 days (issue
10 item 9), in headless Chromium: an administrator edits the policy, presses "Preview",
sees what would change, and saves. And a digest (item 7) opens as the list of its runs."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from runbell.flows import digests
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import BrowserServer, NewContext, Runtime, screenshot, sign_in

pytestmark = pytest.mark.browser

CANDIDATE = {
    "rules": [
        {
            "id": "failed.quiet",
            "when": {"attention": "failed", "error_user_action": False},
            "decision": "inbox",
            "urgency": "low",
        }
    ]
}


def test_the_settings_page_previews_a_policy_before_it_is_saved(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    runtime.create_run("nightly-build")
    runtime.signal("nightly-build", "nightly-build-end", "failed")  # failed.default: push
    runtime.create_run("docs-sync")
    runtime.signal("docs-sync", "docs-sync-end", "completed")  # completed.default: inbox

    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/settings")
    editor = page.locator("#policy-text")
    expect(editor).to_be_visible()
    editor.fill(json.dumps(CANDIDATE, indent=2))
    page.locator("#preview-policy").click()

    preview = page.locator("#policy-preview")
    expect(preview).to_be_visible()
    expect(page.locator("#preview-summary")).to_contain_text("2 recorded decisions replayed")
    expect(page.locator("#preview-summary")).to_contain_text("1 would change")
    changes = page.locator("#preview-changes tbody tr")
    expect(changes).to_have_count(1)
    expect(changes.first).to_contain_text("nightly-build")
    expect(changes.first).to_contain_text("Push (Normal) · failed.default")
    expect(changes.first).to_contain_text("Inbox only (Low) · failed.quiet")
    preview.scroll_into_view_if_needed()
    screenshot(page, "policy-preview")
    # The draft survives the preview, and nothing was saved yet.
    assert json.loads(editor.input_value()) == CANDIDATE
    r = runtime.http.get("/v1/policy", headers={"Authorization": f"Bearer {creds.admin_key}"})
    assert r.json()["tenant_rules"] == {"rules": []}

    page.locator("#save-policy").click()
    expect(page.locator("#settings-saved")).to_have_text("The attention policy was saved.")
    r = runtime.http.get("/v1/policy", headers={"Authorization": f"Bearer {creds.admin_key}"})
    assert r.json()["tenant_rules"]["rules"][0]["id"] == "failed.quiet"


def test_a_bad_policy_is_refused_with_why_and_kept_in_the_editor(
    core: Core, creds: TenantCreds, web: BrowserServer, new_context: NewContext
) -> None:
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/settings")
    page.locator("#policy-text").fill('{"rules": [{"id": "x", "decision": "shout"}]}')
    page.locator("#preview-policy").click()
    expect(page.locator("#policy-error")).to_contain_text("decision must be one of")
    expect(page.locator("#policy-text")).to_have_value(
        '{"rules": [{"id": "x", "decision": "shout"}]}'
    )


def test_a_digest_opens_as_a_list_of_its_runs(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    rule = {
        "id": "completed.digest_all",
        "when": {"attention": "completed"},
        "decision": "digest",
        "urgency": "low",
        "digest_window_s": 600,
    }
    admin = {"Authorization": f"Bearer {creds.admin_key}"}
    assert runtime.http.put("/v1/policy", json={"rules": [rule]}, headers=admin).is_success
    for name in ("lint-fix", "docs-sync", "dep-bump"):
        runtime.create_run(name)
        runtime.signal(name, f"{name}-end", "completed")
    assert digests.flush_due(core, core.db.clock() + timedelta(seconds=601)) == 1

    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.locator(".item-link", has_text="3 runs finished").click()
    expect(page.locator("#digest-title")).to_have_text("3 runs finished")
    links = page.locator("#digest-items a")
    expect(links).to_have_count(3)
    expect(page.locator("#digest-items")).to_contain_text("Deploy docs-sync")
    screenshot(page, "digest")
    page.locator("#digest-items a", has_text="Deploy lint-fix").click()
    expect(page).to_have_url(re.compile(r"/runs/lint-fix$"))
