"""Acting from the notification, in the real service worker (issue 19 item 2).

The server's worker really sends each push to the local push service, which decrypts it;
the DevTools protocol hands that plaintext to ``/sw.js``, which shows it with its buttons.
A button's click is dispatched into the service worker (there is no CDP command for a
click): its own ``notificationclick`` handler posts the action with the token from the
notification's data to ``POST /v1/push-actions``. Covered: approve where the rule allows
it, acknowledge, approve refused where it does not, and approve refused after a newer
request (the browser is then sent the newer notification in place of the old).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, Worker, expect

from runbell.channels.webpush import collapse_topic
from runbell.flows.attention import NEUTRAL_SUMMARY
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import (
    BrowserServer,
    NewContext,
    Runtime,
    sign_in,
    user_client,
    wait_until,
)
from tests.browser.test_web_flows import FAKE_SUBSCRIBE, SHOWN, PushWatch, pushes
from tests.channels.push_receiver import PushReceiver

pytestmark = pytest.mark.browser

LOCK_SCREEN_RULE = {
    "id": "acme.answer_from_lock_screen",
    "when": {"attention": "input_required"},
    "decision": "push",
    "urgency": "time_sensitive",
    "lock_screen_answers": True,
}

# Runs the service worker's own notificationclick handler for the button `action` of the
# notification with `tag`, as a click on that button would; returns what the handler got
# from the server (self.runbellLastAction) and what is shown under the tag afterwards.
CLICK_ACTION = """
async ([tag, action]) => {
  const [notification] = await self.registration.getNotifications({ tag });
  if (!notification) return { outcome: null, shown: [] };
  self.runbellLastAction = null;
  const event = new NotificationEvent("notificationclick", { notification, action });
  const pending = [];
  event.waitUntil = (promise) => { pending.push(promise); };
  self.dispatchEvent(event);
  await Promise.all(pending);
  const left = await self.registration.getNotifications({ tag });
  return {
    outcome: self.runbellLastAction,
    shown: left.map((n) => ({ title: n.title, body: n.body, data: n.data })),
  };
}
"""

ACTIONS_SHOWN = """
async () => {
  const registration = await navigator.serviceWorker.ready;
  const shown = await registration.getNotifications();
  return shown.map((n) => (n.actions || []).map((a) => [a.action, a.title]));
}
"""


def set_policy(base: str, creds: TenantCreds, rules: list[dict[str, Any]]) -> None:
    with user_client(base, creds.admin_key) as admin:
        r = admin.put("/v1/policy", json={"rules": rules})
        assert r.status_code == 200, r.text


def request_state(base: str, creds: TenantCreds, request_id: str) -> str:
    with user_client(base, creds.owner_token) as owner:
        r = owner.get(f"/v1/input-requests/{request_id}")
        assert r.status_code == 200, r.text
        return str(r.json()["input_request"]["state"])


def notification_state(base: str, creds: TenantCreds, note_id: str) -> str:
    with user_client(base, creds.owner_token) as owner:
        r = owner.get(f"/v1/notifications/{note_id}")
        assert r.status_code == 200, r.text
        return str(r.json()["state"])


def subscribed_page(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    new_context: NewContext,
    push_service: PushReceiver,
) -> tuple[BrowserContext, Page, PushWatch]:
    base = web.url
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
    return context, page, PushWatch(context, page, base)


def worker_of(context: BrowserContext) -> Worker:
    if context.service_workers:
        return context.service_workers[0]
    return context.wait_for_event("serviceworker")


def click(context: BrowserContext, tag: str, action: str) -> dict[str, Any]:
    return dict(worker_of(context).evaluate(CLICK_ACTION, [tag, action]))


def show(page: Page, watch: PushWatch, service: PushReceiver, count: int) -> Any:
    """Wait for the server's push #count, hand it to the service worker, return it."""
    got = pushes(page, service, count)[count - 1]
    watch.deliver(got.plaintext.decode("utf-8"))
    return got


def test_approve_and_acknowledge_from_the_notification(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    push_service: PushReceiver,
) -> None:
    base = web.url
    set_policy(base, creds, [LOCK_SCREEN_RULE])
    context, page, watch = subscribed_page(core, creds, web, new_context, push_service)

    runtime.create_run("act-a")
    runtime.open_request("act-a", "approve-a", details={"command": "git push origin main"})
    got = show(page, watch, push_service, 1)
    tag = collapse_topic(f"{creds.tenant_id}:act-a")
    (shown,) = page.evaluate(SHOWN)
    assert (shown["tag"], shown["title"]) == (tag, NEUTRAL_SUMMARY["input_required"])
    # The buttons a device shows first are the decision; the token stays in data.
    (buttons,) = page.evaluate(ACTIONS_SHOWN)
    assert buttons[:2] == [["approve", "Approve"], ["reject", "Reject"]]
    assert shown["data"]["token"] == got.payload["token"]
    assert got.payload["token"] not in shown["title"] + shown["body"] + shown["data"]["url"]

    clicked = click(context, tag, "approve")
    assert clicked["outcome"]["ok"] is True, clicked
    assert clicked["outcome"]["body"]["decision"] == "approve"
    assert clicked["shown"] == []
    assert request_state(base, creds, "approve-a") == "answered"

    # Acknowledge (offered on every push) on another run's alert.
    runtime.create_run("act-b")
    count = len(push_service.received)  # before asking: its push may arrive at once
    opened = runtime.open_request("act-b", "approve-b")
    (note,) = [n for n in opened["notifications"] if n["attention_type"] == "input_required"]
    wait_until(page, lambda: len(push_service.received) > count, "the push for act-b")
    newest = push_service.received[-1]
    assert newest.payload["id"] == note["id"]
    watch.deliver(newest.plaintext.decode("utf-8"))
    tag_b = collapse_topic(f"{creds.tenant_id}:act-b")
    acked = click(context, tag_b, "acknowledge")
    assert acked["outcome"]["ok"] is True, acked
    assert notification_state(base, creds, note["id"]) == "acknowledged"
    assert request_state(base, creds, "approve-b") == "pending"  # acknowledging is not approving


def test_approve_is_refused_where_not_allowed_and_after_a_newer_request(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    push_service: PushReceiver,
) -> None:
    base = web.url
    context, page, watch = subscribed_page(core, creds, web, new_context, push_service)

    # The default policy: no lock-screen answers, so no Approve button ...
    runtime.create_run("act-c")
    runtime.open_request("act-c", "approve-c")
    show(page, watch, push_service, 1)
    tag = collapse_topic(f"{creds.tenant_id}:act-c")
    (buttons,) = page.evaluate(ACTIONS_SHOWN)
    assert [b[0] for b in buttons] == ["acknowledge", "snooze"]
    # ... and an Approve sent anyway (a forged click) is refused, the request untouched.
    refused = click(context, tag, "approve")
    assert refused["outcome"]["status"] == 403, refused
    assert [n["title"] for n in refused["shown"]] == ["Not done"]
    assert request_state(base, creds, "approve-c") == "pending"

    # With the rule on: a request, then a newer one this device never got.
    set_policy(base, creds, [LOCK_SCREEN_RULE])
    runtime.create_run("act-d")
    runtime.open_request("act-d", "approve-d1")
    show(page, watch, push_service, 2)
    tag_d = collapse_topic(f"{creds.tenant_id}:act-d")
    newer = runtime.open_request("act-d", "approve-d2")
    (newer_note,) = [n for n in newer["notifications"] if n["attention_type"] == "input_required"]
    pushes(page, push_service, 3)  # sent, but not handed to this browser

    stale = click(context, tag_d, "approve")
    assert stale["outcome"]["status"] == 409, stale
    assert [n["title"] for n in stale["shown"]] == ["Not done"]
    assert request_state(base, creds, "approve-d1") == "superseded"
    assert request_state(base, creds, "approve-d2") == "pending"

    # The server sends the current state in its place: the newer request, with buttons.
    replacement = show(page, watch, push_service, 4)
    assert replacement.payload["replace_only"] is True
    assert replacement.payload["id"] == newer_note["id"]
    now_shown = [n for n in page.evaluate(SHOWN) if n["tag"] == tag_d]
    assert [n["title"] for n in now_shown] == [NEUTRAL_SUMMARY["input_required"]]
    answered = click(context, tag_d, "approve")
    assert answered["outcome"]["ok"] is True, answered
    assert request_state(base, creds, "approve-d2") == "answered"


def test_a_german_recipients_push_and_its_refusal_are_german(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    push_service: PushReceiver,
) -> None:
    """The service worker has no catalogue: the push brings its words (title, body,
    buttons, and the "not done" notice a refused button leaves) in the recipient's
    language (issue 19 item 6)."""
    base = web.url
    context, page, watch = subscribed_page(core, creds, web, new_context, push_service)
    with user_client(base, creds.owner_token) as owner:
        r = owner.put("/v1/me/preferences", json={"locale": "de"})
        assert r.status_code == 200, r.text

    runtime.create_run("act-de")
    runtime.open_request("act-de", "approve-de")
    got = show(page, watch, push_service, 1)
    assert got.payload["not_done"] == {
        "title": "Nicht erledigt",
        "body": "Das hat sich seit dem Senden geändert. Öffnen Sie Runbell, um den "
        "aktuellen Stand zu sehen.",
    }
    tag = collapse_topic(f"{creds.tenant_id}:act-de")
    (shown,) = page.evaluate(SHOWN)
    assert shown["title"] == "Ein Lauf braucht Ihre Eingabe"
    (buttons,) = page.evaluate(ACTIONS_SHOWN)
    assert [b[1] for b in buttons][:1] == ["Bestätigen"]
    # A forged Approve (the default policy offers none) is refused: the notice is German.
    refused = click(context, tag, "approve")
    assert refused["outcome"]["status"] == 403, refused
    assert [(n["title"], n["body"]) for n in refused["shown"]] == [
        (got.payload["not_done"]["title"], got.payload["not_done"]["body"])
    ]
    assert request_state(base, creds, "approve-de") == "pending"
