"""The run page's badge and the review decision in headless Chromium (issue 18 item 7):
a completed run with 2 conflicts and 1 uncertain update says "Needs review", never a green
"Completed"; the runtime's summary is labelled as its claim; the owner decides what
happens next on the page, and when the lost reply is confirmed while they watch, the page
follows the ledger (a new review with the options that are left)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import NewContext, Runtime, screenshot, sign_in
from tests.timeouts import WAIT_MS

pytestmark = pytest.mark.browser


def seed_ledger(runtime: Runtime, run_id: str) -> None:
    """Twelve task updates: nine confirmed, two conflicts, one lost reply; then done."""
    runtime.create_run(run_id, title="Move launch tasks to Friday")
    ops = [
        {
            "operation_id": f"task-{i}",
            "target": {"type": "task", "id": f"T-{i}"},
            "intent": "move to Friday",
        }
        for i in range(1, 13)
    ]
    r = runtime.http.post(f"/v1/runs/{run_id}/operations", json={"operations": ops})
    assert r.status_code == 201, r.text

    def move(op_id: str, state: str) -> None:
        r = runtime.http.patch(f"/v1/runs/{run_id}/operations/{op_id}", json={"state": state})
        assert r.status_code == 200, r.text

    for i in range(1, 13):
        move(f"task-{i}", "sent")
    for i in range(1, 10):
        move(f"task-{i}", "confirmed")
    move("task-10", "conflict")
    move("task-11", "conflict")
    move("task-12", "uncertain")
    runtime.signal(
        run_id, f"{run_id}-done", "completed", report={"summary": "All tasks moved to Friday"}
    )


def test_needs_review_badge_and_the_decision_follow_the_ledger(
    core: Core, creds: TenantCreds, runtime: Runtime, new_context: NewContext
) -> None:
    seed_ledger(runtime, "launch-dates")
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/runs/launch-dates")
    badge = page.locator("#run-state")
    expect(badge).to_have_text("Needs review")
    expect(badge).to_have_attribute("data-badge", "needs-review")
    expect(page.locator("#run-badge-because")).to_have_text("9 confirmed, 2 conflicts, 1 uncertain")
    expect(page.locator("#agent-reports")).to_have_text(
        "The agent reports: All tasks moved to Friday"
    )
    expect(page.locator("#no-decision")).to_have_count(0)
    decision = page.locator("#decision")
    expect(decision.get_by_label("Ask the agent to retry the 2 that went wrong")).to_be_visible()
    expect(decision.get_by_label("Wait for the 1 in doubt to be looked up")).to_be_visible()
    screenshot(page, "review-needs-review")

    # The lost reply is looked up while the owner watches: the page follows the ledger.
    r = runtime.http.patch(
        "/v1/runs/launch-dates/operations/task-12",
        json={"state": "confirmed", "evidence": {"lookup": "T-12 is on Friday"}},
    )
    assert r.status_code == 200, r.text
    expect(badge).to_have_text("Completed with conflicts", timeout=WAIT_MS)
    expect(page.locator("#run-badge-because")).to_have_text("10 confirmed, 2 conflicts")
    expect(decision.get_by_label("Wait for the 1 in doubt to be looked up")).to_have_count(0)

    decision.get_by_label("Ask the agent to retry the 2 that went wrong").check()
    decision.get_by_role("button", name="Send answer").click()
    expect(page.locator("#answer-recorded")).to_contain_text(
        "Ask the agent to retry the 2 that went wrong"
    )
    expect(page.locator("#review-decided")).to_contain_text("you chose")
    expect(page.locator("#review-decided")).to_contain_text("10 confirmed, 2 conflicts")
    expect(badge).to_have_text("Completed with conflicts")  # deciding does not rewrite the ledger
    screenshot(page, "review-decided")
