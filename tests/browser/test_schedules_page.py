"""Scheduled work in headless Chromium at phone width (issue 18 item 6): a person creates
a schedule through the Schedules page, a run started under it is listed with a link to
its page, and the person pauses it; the page says so and nothing scrolls sideways.
"""

from __future__ import annotations

import re

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


def test_create_a_schedule_on_the_page_then_pause_it(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    add_user(core, creds.tenant_id, "lead@acme.test")
    page = new_context(viewport=PHONE).new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Schedules").click()
    expect(page.locator("#schedules-heading")).to_have_text("Schedules")
    expect(page.locator("#no-schedules")).to_be_visible()

    # A refused form comes back as typed, with why.
    page.get_by_label("Standing instruction").fill("Reconcile yesterday's invoices")
    page.get_by_label("Cadence").fill("every morning")
    page.get_by_label("Name (optional)").fill("invoice reconciliation")
    page.locator("#create-schedule-button").click()
    expect(page.locator("#schedule-error")).to_contain_text("not a cron expression")
    expect(page.get_by_label("Cadence")).to_have_value("every morning")
    expect(page.get_by_label("Standing instruction")).to_have_value(
        "Reconcile yesterday's invoices"
    )

    page.get_by_label("Cadence").fill("0 9 * * 1-5")
    page.get_by_label("Authority: the people the runs act for (optional)").fill("lead@acme.test")
    page.locator("#create-schedule-button").click()
    expect(page).to_have_url(re.compile(r"/schedules/sch_[^?]+\?saved=created$"))
    expect(page.locator("#schedule-saved")).to_contain_text("created")
    expect(page.locator("#schedule-state")).to_have_text("Active")
    expect(page.locator("#instruction-text")).to_have_text("Reconcile yesterday's invoices")
    expect(page.locator("#schedule-authority")).to_contain_text("lead@acme.test")
    schedule_id = page.url.split("/schedules/")[1].split("?")[0]

    runtime.create_run("sched-run-1", title="Invoices of Monday", schedule={"id": schedule_id})
    page.reload()
    page.get_by_role("link", name="Invoices of Monday").click()
    expect(page).to_have_url(re.compile(r"/runs/sched-run-1$"))
    page.go_back()

    page.get_by_label("Reason (optional; shown on this page and in the API)").fill("quarter close")
    page.locator("#pause-schedule").click()
    expect(page.locator("#schedule-saved")).to_contain_text("paused")
    expect(page.locator("#schedule-state")).to_have_text("Paused")
    expect(page.locator("#schedule-paused")).to_contain_text("quarter close")
    expect(page.locator("#resume-schedule")).to_be_visible()
    assert runtime.http.get(f"/v1/schedules/{schedule_id}").json()["state"] == "paused"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "schedule-phone")

    page.get_by_role("link", name="All schedules").click()
    row = page.locator(f'[data-schedule-id="{schedule_id}"]')
    expect(row.locator(".badge")).to_have_text("Paused")
    expect(row).to_contain_text("Invoices of Monday")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "schedules-phone")
