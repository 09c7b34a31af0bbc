"""An inbox with 500 open notifications stays readable (issue 19 item 7), in headless
Chromium at phone size: twenty runs of ten agents, grouped and collapsed with their
counts in view, "Acknowledge all in this group" closing exactly one group, the filters as
links, no sideways scroll, and axe-core finding nothing.

The 500 are written straight into the store (one transaction): what this test is about
is the page, not how notifications are made (tests/integration covers that).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from runbell.domain.records import Notification
from runbell.flows.context import Core
from runbell.ids import new_id
from runbell.store import notifications as notes
from runbell.testing import TenantCreds
from tests.browser.conftest import (
    PHONE,
    BrowserServer,
    NewContext,
    Runtime,
    axe_violations,
    screenshot,
    sign_in,
)

pytestmark = pytest.mark.browser

RUNS, PER_RUN, AGENTS = 20, 25, 10
TYPES = ("completed", "failed", "stalled", "completed", "cancelled")


def seed(core: Core, creds: TenantCreds, runtime: Runtime) -> None:
    for r in range(RUNS):
        runtime.create_run(
            f"scale-{r:02d}",
            title=f"Nightly sync {r:02d}",
            subject={"type": "agent", "id": f"bot-{r % AGENTS}"},
        )
    with core.db.transaction() as tx:
        for r in range(RUNS):
            for k in range(PER_RUN):
                kind = TYPES[k % len(TYPES)]
                note: Notification = {
                    "id": new_id("ntf"),
                    "tenant_id": creds.tenant_id,
                    "recipient_user_id": creds.owner_id,
                    "run_id": f"scale-{r:02d}",
                    "transition_version": k + 1,
                    "attention_type": kind,
                    "urgency": "low",
                    "decision": "inbox",
                    "rule_id": f"{kind}.default",
                    "inputs": {},
                    "summary": f"A run {kind}",
                    "subject_version": None,
                    "input_request_id": None,
                    "reason": None,
                    "expires_at": None,
                    "state": "open",
                    "closed_at": None,
                    "closed_reason": None,
                    "created_at": tx.now,
                    "first_delivered_at": None,
                    "first_seen_at": None,
                }
                assert notes.insert_once(tx.conn, note)[1]


def open_count(core: Core, creds: TenantCreds) -> int:
    with core.db.read() as conn:
        return len(notes.open_for_recipient(conn, creds.tenant_id, creds.owner_id))


def test_five_hundred_open_items_stay_readable_and_a_group_is_acknowledged_at_once(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    seed(core, creds, runtime)
    assert open_count(core, creds) == RUNS * PER_RUN
    page = new_context(viewport=PHONE).new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    expect(page.locator("#inbox-heading")).to_have_text("Inbox")

    # Every group collapsed, its count in view; the filters say how many each shows.
    groups = page.locator("#fyi details.run-group")
    expect(groups).to_have_count(RUNS)
    expect(page.locator("#fyi details.run-group[open]")).to_have_count(0)
    expect(groups.first.locator(".group-count")).to_have_text(f"{PER_RUN} open")
    filters = page.get_by_role("navigation", name="Filter the inbox")
    expect(filters.get_by_role("link", name=re.compile(r"^All"))).to_have_text("All (500)")
    expect(filters.get_by_role("link", name=re.compile(r"^Failures"))).to_have_text(
        "Failures (200)"
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "inbox-500")
    assert axe_violations(page) == []

    # Open one group and acknowledge all in it: exactly its 25 close.
    first = groups.first
    title = first.locator(".group-title").inner_text()
    first.locator("summary").click()
    expect(first.locator(".item")).to_have_count(PER_RUN)
    first.get_by_role("button", name=re.compile(r"^Acknowledge all in this group")).click()
    expect(groups).to_have_count(RUNS - 1)
    expect(page.locator("#fyi .group-title", has_text=title)).to_have_count(0)
    expect(filters.get_by_role("link", name=re.compile(r"^All"))).to_have_text("All (475)")
    assert open_count(core, creds) == (RUNS - 1) * PER_RUN

    # By agent: ten groups of two runs each, collapsed too; one agent's failures only.
    page.get_by_role("navigation", name="Group the inbox").get_by_role(
        "link", name="Agent or project"
    ).click()
    expect(page).to_have_url(re.compile(r"\?group=agent$"))
    expect(groups).to_have_count(AGENTS)
    expect(page.locator("#fyi details.run-group[open]")).to_have_count(0)
    filters.get_by_role("link", name=re.compile(r"^Failures")).click()
    expect(filters.get_by_role("link", name=re.compile(r"^Failures"))).to_have_attribute(
        "aria-current", "page"
    )
    agents = page.get_by_role("navigation", name="Agents and projects")
    agents.locator("summary").click()
    agents.get_by_role("link", name=re.compile(r"^agent: bot-3 ")).click()
    expect(page.locator("#inbox-narrowed")).to_contain_text("agent: bot-3")
    expect(groups).to_have_count(1)
    expect(groups.first.locator(".group-count")).to_have_text(f"{2 * 10} open")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert axe_violations(page) == []
