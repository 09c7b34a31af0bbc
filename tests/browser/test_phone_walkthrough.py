"""The phone walkthrough of docs/web.md ("On a phone", issue 19 item 8), in headless
Chromium at 390x844: a person whose phone gets browser notifications finds a request in
the inbox, opens it (``/n/{id}``: the command first, the risk line, then Approve and
Reject, all on the first screen), fixes the command, approves the edited version, and
reads the run's trail: the answer "with an edited value" and where the alert was
delivered. At each step the test checks what the person must see, and saves a
screenshot of the screen as it is (390x844, never the full page) to
test-artifacts/screenshots/phone-<n>-<step>.png, copied to docs/screenshots/.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from playwright.sync_api import Locator, Page, expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import (
    PHONE,
    BrowserServer,
    NewContext,
    Runtime,
    screenshot,
    sign_in,
    user_client,
    wait_until,
)
from tests.browser.test_web_flows import FAKE_SUBSCRIBE
from tests.channels.push_receiver import PushReceiver

pytestmark = pytest.mark.browser

PROJECT = "/home/dev/shop"
ASKED = "rm -rf ./build"
FIXED = "rm -rf ./build/cache"


def on_first_screen(page: Page, what: Locator) -> dict[str, float]:
    """``what`` lies wholly inside the first 390x844 screen; its box."""
    box = what.bounding_box()
    assert box is not None
    assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    return box


def test_answer_from_a_phone_step_by_step(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    push_service: PushReceiver,
) -> None:
    # The phone: signed in, browser notifications on (the page's own code subscribes,
    # through a local push service; see test_web_flows.py).
    context = new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.grant_permissions(["notifications"], origin=web.url)
    context.add_init_script(script=FAKE_SUBSCRIBE % json.dumps(push_service.new_subscription()))
    page = context.new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/settings")
    page.locator("#enable-push").click()
    expect(page.locator("#push-status")).to_have_text(
        "Browser notifications are on for this device."
    )

    # Claude Code asks to run a Bash command, with the command editable.
    runtime.create_run("phone-walk", title="Claude Code: shop")
    action = {"kind": "shell", "command": ASKED, "cwd": PROJECT}
    opened = runtime.open_request(
        "phone-walk",
        "phone-walk-bash",
        summary="Claude Code wants to use Bash",
        details={"tool_input": action, "permission_mode": "default", "cwd": PROJECT},
        action=action,
        editable={
            "schema": {
                "type": "object",
                "properties": {"command": {"type": "string", "minLength": 1}},
                "required": ["command"],
            },
            "value": {"command": ASKED},
        },
        expires_at=(core.db.clock() + timedelta(minutes=30)).isoformat(),
    )
    (note,) = [n["id"] for n in opened["notifications"] if n["attention_type"] == "input_required"]
    wait_until(page, lambda: len(push_service.received) >= 1, "the push to the phone")
    assert push_service.received[-1].payload["id"] == note
    assert not push_service.rejected, push_service.rejected

    # 1. The inbox: the request is under "Needs you", its link on the first screen.
    page.goto("/")
    item = page.locator(f"#needs-you #n-{note}")
    expect(item).to_be_visible()
    link = item.locator("a.item-link")
    expect(link).to_have_attribute("href", f"/n/{note}")
    on_first_screen(page, link)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "phone-1-inbox", full_page=False)

    # 2. The deep link: the command first, then the risk line, then the buttons, on the
    # first screen without scrolling.
    link.click()
    page.wait_for_url(f"**/n/{note}")
    command = page.locator("#action-command")
    expect(command).to_contain_text(ASKED)
    assert "monospace" in command.evaluate("e => getComputedStyle(e).fontFamily")
    risk = page.locator("#action-risks [data-risk=recursive_delete]")
    expect(risk).to_be_visible()
    approve, reject = page.locator("#approve"), page.locator("#reject")
    seen = on_first_screen(page, command)
    flagged = on_first_screen(page, risk)
    button = on_first_screen(page, approve)
    on_first_screen(page, reject)
    assert seen["y"] + seen["height"] <= flagged["y"] < button["y"], (seen, flagged, button)
    expect(page.locator("#opened-from")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "phone-2-preview", full_page=False)

    # 3. Edit before approving: the command in a monospace box under the buttons.
    box = page.locator("#edit-value")
    box.scroll_into_view_if_needed()
    expect(box).to_have_value(ASKED)
    assert "monospace" in box.evaluate("e => getComputedStyle(e).fontFamily")
    box.fill(FIXED)
    edit_button = page.locator("#approve-edited")
    edit_button.scroll_into_view_if_needed()
    expect(edit_button).to_be_in_viewport()
    expect(box).to_be_in_viewport()
    screenshot(page, "phone-3-edit", full_page=False)

    # 4. Approved as edited: the page says so, with the command that will run.
    edit_button.click()
    recorded = page.locator("#answer-recorded")
    expect(recorded).to_contain_text("approved")
    expect(page.locator("#answer-edited")).to_have_text(FIXED)
    on_first_screen(page, recorded)
    screenshot(page, "phone-4-approved", full_page=False)

    with user_client(web.url, creds.owner_token) as me:
        req = me.get("/v1/input-requests/phone-walk-bash").json()["input_request"]
    assert (req["decision"], req["edited"], req["value"]) == ("approve", True, {"command": FIXED})

    # 5. The trail: the edited answer in the timeline, and where the alert went.
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("the request was approved with an edited value")
    expect(timeline).to_contain_text("by you")
    delivered = page.locator(f"#note-{note} table.deliveries")
    expect(delivered.locator("tr.inbox-row")).to_have_count(1)
    pushed = delivered.locator("tr", has_text="Browser notification")
    expect(pushed.locator("td").nth(1)).to_have_text("Delivered")
    # The timeline at the top of the screen, the deliveries under it.
    page.locator("#timeline-heading").evaluate("e => e.scrollIntoView({block: 'start'})")
    expect(page.locator("#timeline-heading")).to_be_in_viewport()
    expect(pushed).to_be_in_viewport()
    screenshot(page, "phone-5-trail", full_page=False)
