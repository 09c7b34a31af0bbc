"""The runs overview (/runs) in headless Chromium: runs in the right groups, each row
linking to its run page and saying what its counts count; the page follows the feed;
readable at phone width (390 x 844)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Locator, Page, expect

from runbell.flows.attention import raise_attention
from runbell.flows.context import Core
from runbell.flows.policy import policy_in
from runbell.store import runs as run_store
from runbell.testing import TenantCreds
from tests.browser.conftest import PHONE, BrowserServer, NewContext, Runtime, screenshot, sign_in

pytestmark = pytest.mark.browser


def stall(core: Core, tenant_id: str, run_id: str) -> None:
    """A ``stalled`` notification through the attention path the stall sweep uses."""
    with core.db.transaction() as tx:
        run = run_store.require_run(tx.conn, tenant_id, run_id, for_update=True)
        raise_attention(
            tx,
            policy_in(core, tx, tenant_id),
            run,
            attention="stalled",
            version=run.version,
            facts={},
            reason="no progress",
            owner_present=False,
        )


def seed(core: Core, creds: TenantCreds, runtime: Runtime) -> None:
    runtime.create_run("ask", title="Approve the launch dates")
    runtime.open_request("ask", "ask-1", summary="Move 12 tasks to Friday?")
    runtime.create_run("quiet", title="Nightly import")
    stall(core, creds.tenant_id, "quiet")
    runtime.create_run("review", title="Sync the CRM")
    runtime.signal("review", "review-done", "completed", effects_verified=False)
    runtime.create_run("busy", title="Move launch tasks")
    runtime.progress("busy", "moving tasks", confirmed=9, conflicts=2)
    runtime.create_run("done", title="Write the announcement")
    runtime.signal("done", "done-done", "completed", effects_verified=True)


def group(page: Page, name: str) -> Locator:
    return page.locator(f"#group-{name}")


def test_the_overview_shows_runs_in_their_groups_and_links_to_run_pages(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    seed(core, creds, runtime)
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.get_by_role("link", name="Runs", exact=True).click()
    expect(page).to_have_url(f"{web.url}/runs")
    expect(page.get_by_role("heading", name="Runs", level=1)).to_be_visible()

    expect(group(page, "needs_you").locator(".run-link")).to_have_text(["Approve the launch dates"])
    expect(group(page, "needs_you")).to_contain_text("Waiting for: Move 12 tasks to Friday?")
    expect(group(page, "stalled").locator(".run-link")).to_have_text(["Nightly import"])
    expect(group(page, "needs_review").locator(".run-link")).to_have_text(["Sync the CRM"])
    expect(group(page, "working").locator(".run-link")).to_have_text(["Move launch tasks"])
    expect(group(page, "working")).to_contain_text("9 confirmed, 2 conflicts")
    expect(group(page, "working")).not_to_contain_text(" of ")
    expect(group(page, "finished").locator(".run-link")).to_have_text(["Write the announcement"])
    expect(group(page, "finished")).to_contain_text("Completed")

    group(page, "stalled").get_by_role("link", name="Nightly import").click()
    expect(page).to_have_url(f"{web.url}/runs/quiet")
    expect(page.locator("#run-title")).to_have_text("Nightly import")


def test_empty_groups_say_so_and_the_page_follows_the_feed(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/runs")
    expect(group(page, "needs_you")).to_contain_text("Nothing is waiting for your answer.")
    expect(group(page, "finished")).to_contain_text("No run has finished yet.")
    page.evaluate("window.__sameDocument = true")

    # The runtime starts a run and asks: the page shows it without a reload.
    runtime.create_run("live", title="Rotate the keys")
    expect(group(page, "working").locator(".run-link")).to_have_text(["Rotate the keys"])
    runtime.open_request("live", "live-1", summary="Rotate now?")
    expect(group(page, "needs_you").locator(".run-link")).to_have_text(["Rotate the keys"])
    expect(group(page, "working")).to_contain_text("No other run is in progress.")
    expect(page.locator("#runs-changed")).to_contain_text("Updated")
    assert page.evaluate("window.__sameDocument === true"), "the page reloaded on its own"


def test_the_overview_is_readable_at_phone_width(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    seed(core, creds, runtime)
    runtime.create_run(
        "long", title="A run with a rather long title that must wrap on a phone screen"
    )
    page = new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/runs")
    expect(group(page, "working").locator(".run-link")).to_have_count(2)
    # Nothing runs off the side: no horizontal scrolling at 390 px.
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    for name in ("needs_you", "stalled", "needs_review", "working", "finished"):
        box = group(page, name).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    font = page.evaluate(
        "parseFloat(getComputedStyle(document.querySelector('.run-link')).fontSize)"
    )
    assert font >= 16
    screenshot(page, "runs-overview-phone")
