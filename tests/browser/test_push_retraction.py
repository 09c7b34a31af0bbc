"""Escalation that retracts, in the real service worker (issue 10 item 8): a push shown on
one device is replaced in place — same tag, neutral "handled" text, silently — once the
notification is answered elsewhere; a device that no longer shows it gets nothing new.

Same set-up as test_web_flows.py's push test: a local push service decrypts what the
server's worker really sent, and the DevTools protocol hands it to ``/sw.js``.
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from runbell.channels.webpush import collapse_topic
from runbell.flows.attention import NEUTRAL_SUMMARY, RETRACTED_BODY, RETRACTED_TITLE
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import BrowserServer, NewContext, Runtime, sign_in, user_client
from tests.browser.test_web_flows import (
    FAKE_SUBSCRIBE,
    SHOWN,
    PushWatch,
    only_notification,
    pushes,
)
from tests.channels.push_receiver import PushReceiver

pytestmark = pytest.mark.browser

CLOSE_ALL = """
async () => {
  for (const n of await self.registration.getNotifications()) n.close();
  return (await self.registration.getNotifications()).length;
}
"""


def test_an_answer_elsewhere_replaces_the_shown_push_in_place(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    push_service: PushReceiver,
) -> None:
    base, run_id = web.url, "deploy-r"
    subscription = push_service.new_subscription()
    context = new_context()
    context.grant_permissions(["notifications"], origin=base)
    context.add_init_script(script=FAKE_SUBSCRIBE % json.dumps(subscription))
    page = context.new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/settings")
    page.locator("#enable-push").click()
    expect(page.locator("#push-status")).to_have_text(
        "Browser notifications are on for this device."
    )
    watch = PushWatch(context, page, base)
    tag = collapse_topic(f"{creds.tenant_id}:{run_id}")

    runtime.create_run(run_id)
    opened = runtime.open_request(run_id, "approve-r")
    note_id = only_notification(opened)
    (first,) = pushes(page, push_service, 1)
    watch.deliver(first.plaintext.decode("utf-8"))
    (shown,) = page.evaluate(SHOWN)
    assert (shown["tag"], shown["title"]) == (tag, NEUTRAL_SUMMARY["input_required"])

    # Answered on another device (the API, as that device's page would call it).
    with user_client(base, creds.owner_token) as owner:
        r = owner.post(
            "/v1/input-requests/approve-r/responses",
            json={
                "decision": "approve",
                "expected_run_version": opened["run"]["version"],
                "expected_request_version": 1,
            },
            headers={"Idempotency-Key": "answer-r"},
        )
        assert r.status_code == 200, r.text
    replacement = pushes(page, push_service, 2)[1]
    assert replacement.topic == first.topic == tag
    assert replacement.payload["replace_only"] is True
    assert replacement.payload["id"] == note_id

    watch.deliver(replacement.plaintext.decode("utf-8"))
    (now_shown,) = page.evaluate(SHOWN)
    assert now_shown["tag"] == tag
    assert (now_shown["title"], now_shown["body"]) == (RETRACTED_TITLE, RETRACTED_BODY)
    assert now_shown["data"]["retracted"] is True

    # A device that no longer shows it (opened or dismissed there): nothing new appears.
    worker = context.service_workers[0] if context.service_workers else None
    if worker is None:
        worker = context.wait_for_event("serviceworker")
    assert worker.evaluate(CLOSE_ALL) == 0
    watch.deliver(replacement.plaintext.decode("utf-8"))
    assert page.evaluate(SHOWN) == []
