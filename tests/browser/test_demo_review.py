"""The invoice demo's review, as a newcomer meets it in headless Chromium (issue 16 row
13): the uncertain invoice waits for them with what happens next; once they open it the
demo's lookup settles it while they watch, the live notice says what changed (the review,
not "the run is now completed": row 18), and the page keeps the invoice's history —
uncertain at …, confirmed by the lookup at …, with the evidence. Also row 18's settings
table on a phone: no word broken inside ("Lo/w", "Nor/mal")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from runbell import demo
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import (
    PHONE,
    BrowserServer,
    NewContext,
    screenshot,
    sign_in,
    user_client,
    wait_until,
)
from tests.timeouts import WAIT, WAIT_MS

pytestmark = pytest.mark.browser


@pytest.fixture
def ledger_agent(
    core: Core, creds: TenantCreds, web: BrowserServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """The demo's invoice sync (runbell.demo.ledger_agent) on its own event loop, as
    `runbell serve --demo` runs it; the lookup a second after the review is opened."""
    monkeypatch.setattr(demo, "LOOKUP_AFTER_SEEN_S", 1.0)
    ready = threading.Event()
    loop: dict[str, object] = {}

    def run() -> None:
        async def main() -> None:
            stop = asyncio.Event()
            loop["loop"], loop["stop"] = asyncio.get_running_loop(), stop
            ready.set()
            await demo.ledger_agent(core, creds.tenant_id, creds.owner_id, stop)
            await stop.wait()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(WAIT)
    yield
    the_loop, stop = loop["loop"], loop["stop"]
    the_loop.call_soon_threadsafe(stop.set)  # type: ignore[attr-defined]
    thread.join(WAIT)


def test_the_review_waits_for_the_person_and_keeps_its_history(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    ledger_agent: None,
    new_context: NewContext,
) -> None:
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    me = user_client(web.url, creds.owner_token)

    def review_id() -> str | None:
        notes = me.get("/v1/notifications").json()["notifications"]
        found = [n["id"] for n in notes if n["attention_type"] == "needs_review"]
        return found[0] if found else None

    wait_until(page, lambda: review_id() is not None, "the sync's review", timeout_s=WAIT)
    me.close()

    # The inbox shows it; opening it is what the demo waits for.
    page.goto("/")
    page.get_by_role("link", name="A run finished and needs review").click()
    uncertain = page.locator("#ops-uncertain")
    expect(uncertain).to_contain_text("mark paid · invoice INV-1004")
    expect(uncertain).to_contain_text("no reply within 30 s")
    expect(uncertain).to_contain_text("seconds after you open this review")
    expect(page.locator("#operations-outcome")).to_contain_text("looked up by the runtime")
    # The badge is the ledger's (issue 18 item 7), and the review is a decision.
    expect(page.locator("#run-state")).to_have_text("Outcome unknown")
    expect(page.locator("#review-intro")).to_be_visible()
    screenshot(page, "demo-review-waiting")
    page.evaluate("window.__sameDocument = true")

    # The lookup settles it while the person watches: no reload.
    expect(page.locator("#operations-counts")).to_have_text("5 confirmed", timeout=WAIT_MS)
    expect(page.locator("#operations-outcome")).to_contain_text("Verified")
    expect(page.locator("#ops-uncertain")).to_have_count(0)
    expect(page.locator("#run-state")).to_have_text("Completed")
    expect(page.locator("#no-decision")).to_be_visible()  # the review closed with the ledger
    # What changed is the review, not the state: the notice says so.
    notice = page.locator("#run-changed")
    expect(notice).to_contain_text("its operations were reviewed (5 confirmed)")
    expect(notice).to_contain_text("the run is still completed")
    expect(notice).not_to_contain_text("the run is now completed")
    # What was uncertain and how it was settled stays on the page.
    expect(page.locator("#operations-settled")).to_contain_text(
        "1 operation (invoice-4) was uncertain and was settled by a lookup"
    )
    history = page.locator("#history-invoice-4 > li")
    expect(history).to_have_count(4)
    expect(history.nth(2)).to_contain_text("uncertain")
    expect(history.nth(2)).to_contain_text("no reply within 30 s")
    expect(history.nth(2)).not_to_contain_text("What happens next")  # it happened
    expect(history.nth(3)).to_contain_text("confirmed")
    expect(history.nth(3)).to_contain_text("GET /invoices/INV-1004: status paid")
    expect(history.nth(3)).to_contain_text("demo reconciler")
    assert page.evaluate("window.__sameDocument === true")
    screenshot(page, "demo-review-settled")

    # Still there on a fresh load, after the review was resolved.
    page.reload()
    expect(page.locator("#history-invoice-4 > li")).to_have_count(4)


def test_the_settings_table_keeps_words_whole_on_a_phone(
    core: Core, creds: TenantCreds, web: BrowserServer, new_context: NewContext
) -> None:
    page = new_context(viewport=PHONE).new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/settings")
    lines = page.locator("table.consent thead th").evaluate_all(
        """ths => ths.map(th => {
            const range = document.createRange();
            range.selectNodeContents(th);
            const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
            return [th.textContent.trim(), tops.size];
        })"""
    )
    by_label = dict(lines)
    assert by_label["Low"] == 1 and by_label["Normal"] == 1 and by_label["Urgent"] == 1, lines
    # Nothing of the page runs off the side of the phone; the table scrolls in its box.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
