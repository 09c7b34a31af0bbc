"""The run page's Operations section in headless Chromium: what the counts count, the
uncertain item with its evidence, and the review updating live when a lookup settles it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import BrowserServer, NewContext, Runtime, screenshot, sign_in

pytestmark = pytest.mark.browser


def test_the_ledger_shows_on_the_run_page_and_follows_the_lookup(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "ledger-1"
    runtime.create_run(run_id, title="Sync five invoices")
    ops = [
        {
            "operation_id": f"inv-{i}",
            "target": {"type": "invoice", "id": f"INV-{i}"},
            "intent": "mark paid",
            "details": {"amount": 100 + i},
        }
        for i in range(1, 6)
    ]
    r = runtime.http.post(f"/v1/runs/{run_id}/operations", json={"operations": ops})
    assert r.status_code == 201, r.text

    def move(op_id: str, state: str, **evidence: str) -> None:
        body = {"state": state, "evidence": evidence or None}
        r = runtime.http.patch(f"/v1/runs/{run_id}/operations/{op_id}", json=body)
        assert r.status_code == 200, r.text

    for i in range(1, 5):
        move(f"inv-{i}", "sent")
    for i in (1, 2):
        move(f"inv-{i}", "confirmed", receipt_id=f"rcpt-{i}")
    move("inv-3", "conflict", status="409 version mismatch")
    move("inv-4", "uncertain", error="timeout after 30 s", checked_by="worker-a")
    runtime.signal(run_id, "done", "completed")

    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    section = page.locator("#operations")
    expect(page.locator("#operations-counts")).to_have_text(
        "2 confirmed, 1 conflict, 1 uncertain, 1 planned"
    )
    expect(page.locator("#operations-outcome")).to_contain_text("Outcome unknown")
    expect(page.locator("#ops-confirmed li")).to_have_count(2)
    expect(page.locator("#ops-conflicts")).to_contain_text("INV-3")
    uncertain = page.locator("#ops-uncertain")
    expect(uncertain).to_contain_text("mark paid · invoice INV-4")
    expect(uncertain).to_contain_text("timeout after 30 s")
    expect(uncertain).to_contain_text("worker-a")
    expect(page.locator("#ops-in-flight")).to_contain_text("INV-5")
    # Groups come in the order a reader needs them; details never show here.
    headings = section.locator("h3").all_inner_texts()
    assert headings == [
        "Confirmed (2)",
        "Conflicts (1)",
        "Uncertain: may have landed, being checked (1)",
        "Sent or planned, no reply yet (1)",
    ]
    expect(section).not_to_contain_text("105")
    screenshot(page, "run-ledger-review")

    # A lookup settles the lost reply: the page follows without a reload.
    page.evaluate("window.__sameDocument = true")
    move("inv-4", "confirmed", lookup="invoice INV-4 is paid", checked_by="reconciler")
    expect(page.locator("#operations-counts")).to_have_text("3 confirmed, 1 conflict, 1 planned")
    expect(page.locator("#ops-uncertain")).to_have_count(0)
    expect(page.locator("#ops-confirmed")).to_contain_text("reconciler")
    assert page.evaluate("window.__sameDocument === true")
    expect(page.locator("#timeline")).to_contain_text("3 confirmed, 1 conflict, 1 planned")
