"""The small pages a newcomer meets around the app, in headless Chromium: the API
reference with no way out of the machine, the icon, the sign-in page reached from a deep
link, and the demo mailbox that sign-in mail lands in.

The server here is wired like `runbell serve --demo`: its own mail sink as the SMTP relay
and the demo's routes (/demo/mailbox), so sign-in by email works end to end.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from runbell import demo
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import BrowserServer, NewContext, Runtime, wait_until

pytestmark = pytest.mark.browser


@pytest.fixture
def demo_state(core: Core) -> Iterator[demo.DemoState]:
    """The demo's mail sink as the SMTP relay, as cli._demo sets it up."""
    state = demo.DemoState()
    core.settings.smtp_host, core.settings.smtp_port = demo.start_mail_sink(state)
    yield state
    state.smtp.stop()


@pytest.fixture
def web(core: Core, port: int, demo_state: demo.DemoState) -> Iterator[BrowserServer]:
    """The app as `runbell serve --demo` wires it, /demo/mailbox included."""
    with BrowserServer(core, port, routers=[demo.sink_router(core, demo_state)]) as server:
        yield server


# --- the icon --------------------------------------------------------------------------------


def test_favicon_is_served_and_linked(web: BrowserServer, new_context: NewContext) -> None:
    page = new_context().new_page()
    icon = page.request.get("/favicon.ico")
    assert icon.status == 200
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.body()[:4] == b"\x00\x00\x01\x00"  # an ICO header, not an HTML error page

    page.goto("/login")
    links = page.locator("link[rel=icon]").evaluate_all("els => els.map(e => [e.href, e.type])")
    assert [f"{web.url}/favicon.ico", ""] in links
    assert [f"{web.url}/static/favicon.svg", "image/svg+xml"] in links
    svg = page.request.get("/static/favicon.svg")
    assert svg.status == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    # Chromium itself can decode both (a broken file renders 0 x 0).
    for url in ("/favicon.ico", "/static/favicon.svg"):
        size = page.evaluate(
            """async (url) => {
                const img = new Image();
                img.src = url;
                await img.decode();
                return [img.naturalWidth, img.naturalHeight];
            }""",
            url,
        )
        assert size[0] > 0 and size[1] > 0, (url, size)


# --- sign-in from a deep link, through the demo mailbox -------------------------------------


def test_deep_link_sign_in_says_why_and_the_demo_mailbox_delivers(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    demo_state: demo.DemoState,
) -> None:
    run_id = "mailbox-1"
    runtime.create_run(run_id)
    opened = runtime.open_request(run_id, "approve-mailbox-1")
    (note_id,) = [
        n["id"] for n in opened["notifications"] if n["attention_type"] == "input_required"
    ]

    page = new_context().new_page()
    # The link an alert carries, opened before signing in: the page says why it asks.
    page.goto(f"/n/{note_id}")
    expect(page).to_have_url(re.compile(rf"/login\?next=/n/{note_id}$"))
    expect(page.locator("#sign-in-why")).to_have_text(
        "Sign in to see the run this link points at. You will land on it right after."
    )
    # In the demo it also says where the link mail lands, with a link to go and look.
    hint = page.locator("#demo-mailbox-hint")
    expect(hint).to_contain_text("the sign-in mail lands in the demo mailbox")
    expect(hint.get_by_role("link", name="demo mailbox")).to_have_attribute("href", "/demo/mailbox")

    page.locator("#login-email").fill(creds.owner_email)
    page.locator("#send-link").click()
    expect(page.locator("h1")).to_have_text("Check your email")
    page.get_by_role("link", name="Open the demo mailbox").click()
    expect(page).to_have_url(f"{web.url}/demo/mailbox")

    # The mailbox looks like the app: its stylesheet, its header, a way back.
    expect(page.locator("#mailbox-heading")).to_have_text("Demo mailbox")
    assert page.locator("link[rel=stylesheet]").evaluate_all(
        "els => els.map(e => new URL(e.href).pathname)"
    ) == ["/static/app.css"]
    width = page.locator("main").evaluate("el => getComputedStyle(el).maxWidth")
    assert width == "800px", width  # app.css's 50rem column, not the browser default
    expect(page.locator("#back-to-inbox")).to_have_attribute("href", "/")
    expect(page.locator("header.top .brand")).to_have_attribute("href", "/")

    # The sign-in mail arrives (sent after the form's answer): its link can be clicked.
    def arrived() -> bool:
        return any(m["subject"] == "Your Runbell sign-in link" for m in demo_state.mails)

    wait_until(page, arrived, "the sign-in mail in the demo mailbox")
    page.reload()
    mail = page.locator(".mail", has_text="Your Runbell sign-in link")
    link = mail.locator("a[href*='/auth/']")
    expect(link).to_have_count(1)
    href = link.get_attribute("href") or ""
    assert href.startswith(f"{web.url}/auth/") and f"next=/n/{note_id}" in href
    link.click()

    # Signed in, and on the run the deep link pointed at.
    expect(page).to_have_url(f"{web.url}/n/{note_id}")
    expect(page.locator("#opened-from")).to_be_visible()
    expect(page.locator("#approve")).to_be_enabled()

    # Back in the mailbox, the way back leads to the inbox (signed in now).
    page.goto("/demo/mailbox")
    page.locator("#back-to-inbox").click()
    expect(page).to_have_url(f"{web.url}/")
    expect(page.locator("#inbox-heading")).to_have_text("Inbox")
