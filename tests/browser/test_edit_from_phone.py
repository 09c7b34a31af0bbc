"""Edit before approving from a phone (issue 19 item 3), in headless Chromium at 390x844:
the command is in a monospace box on the run page, the person fixes it, presses
"Approve edited", and the request is answered with the edited command; an edit the
schema refuses comes back as typed with the reason, never a 500."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import PHONE, BrowserServer, NewContext, Runtime, sign_in, user_client

pytestmark = pytest.mark.browser

EDITABLE = {
    "schema": {
        "type": "object",
        "properties": {"command": {"type": "string", "minLength": 1, "maxLength": 10000}},
        "required": ["command"],
    },
    "value": {"command": "rm -rf ./build"},
}


def test_fix_a_command_from_the_phone(
    core: Core, creds: TenantCreds, web: BrowserServer, runtime: Runtime, new_context: NewContext
) -> None:
    runtime.create_run("phone-edit")
    expires = (core.db.clock() + timedelta(minutes=10)).isoformat()
    runtime.open_request(
        "phone-edit",
        "phone-bash",
        summary="Claude Code wants to use Bash",
        editable=EDITABLE,
        expires_at=expires,
    )
    phone = new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
    sign_in(phone, core, creds.tenant_id, creds.owner_id)
    phone.goto("/runs/phone-edit")
    box = phone.locator("#edit-value")
    expect(box).to_have_value("rm -rf ./build")
    assert "monospace" in box.evaluate("e => getComputedStyle(e).fontFamily")
    # Nothing wider than the phone's screen.
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]

    # Emptied: the schema refuses it; shown back with the reason, nothing approved.
    box.fill("")
    phone.locator("#approve-edited").click()
    expect(phone.locator("#edit-error")).to_contain_text("Nothing was approved")

    phone.locator("#edit-value").fill("rm -rf ./build/tmp")
    phone.locator("#approve-edited").click()
    expect(phone.locator("#answer-recorded")).to_contain_text("approved")

    me = user_client(web.url, creds.owner_token)
    try:
        req = me.get("/v1/input-requests/phone-bash").json()["input_request"]
    finally:
        me.close()
    assert req["decision"] == "approve" and req["edited"] is True
    assert req["value"] == {"command": "rm -rf ./build/tmp"}
