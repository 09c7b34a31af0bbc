"""The web app in headless Chromium (Debian's /usr/bin/chromium, Playwright's sync API).

What a person does and sees, end to end against the real app under uvicorn with its
delivery worker: sign-in through a one-time link, the inbox updating live, answering from
the run page, a second device seeing the answer land, a stale page refused with an
explanation, browser push (subscribe, receive, replace, click), sign-out, and a planted
secret that must stay out of everything shown before sign-in, to the wrong member, on a
lock screen, or in the logs.

Push without a real push service: headless Chromium cannot reach one, so an init script
replaces ``PushManager.prototype.subscribe`` with a subscription whose endpoint is a local
push service (tests/channels/push_receiver.py) holding keys the test generated. The page's
own code then registers it with the server, the server's worker really encrypts and sends
each push to that service, which decrypts it; the decrypted pointer is handed to the
service worker with the DevTools protocol (``ServiceWorker.deliverPushMessage``). See
/work/shared/notes/browser-push-testing.md for the facts behind each step.

Email and chat bodies are checked for the planted secret in tests/channels
(test_email_channel.py, test_chat_channel.py) and tests/integration/test_delivery_engine.py.

Runs on SQLite only (see conftest.py). Screenshots for the docs land in
test-artifacts/screenshots/{inbox,run,settings}.png.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest
import structlog
from playwright.sync_api import BrowserContext, CDPSession, Page, expect

from runbell.channels.base import Outbound
from runbell.channels.webpush import collapse_topic, push_payload
from runbell.config import Settings
from runbell.flows.attention import NEUTRAL_BODY, NEUTRAL_SUMMARY
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import TenantCreds, add_user
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
from tests.channels.push_receiver import PushReceiver
from tests.conftest import SECRET_KEY

pytestmark = pytest.mark.browser

SECRET = "SECRET-PLANTED-42"
POINTER_FIELDS = {"v", "id", "tag", "title", "body", "url", "urgency", "require_interaction", "ts"}

# Replaces the browser's push subscription with one the test made (keys included): a real
# subscribe() cannot succeed headless. Records what the page asked for, so the test can
# check it passed the server's VAPID key. `%s` is the subscription as JSON.
FAKE_SUBSCRIBE = """
(() => {
  const sub = %s;
  function bytes(b64url) {
    const b64 = b64url.replace(/-/g, "+").replace(/_/g, "/");
    const raw = atob(b64 + "===".slice((b64.length + 3) %% 4));
    return Uint8Array.from(raw, (c) => c.charCodeAt(0)).buffer;
  }
  function b64url(buffer) {
    const raw = String.fromCharCode(...new Uint8Array(buffer));
    return btoa(raw).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
  }
  let current = null;
  window.__subscribeCalls = [];
  PushManager.prototype.subscribe = function (options) {
    const key = options && options.applicationServerKey;
    window.__subscribeCalls.push({
      userVisibleOnly: options && options.userVisibleOnly,
      applicationServerKey: key ? b64url(key.buffer || key) : null,
    });
    const s = Object.create(PushSubscription.prototype);
    Object.defineProperties(s, {
      endpoint: { value: sub.endpoint },
      expirationTime: { value: null },
      options: { value: { userVisibleOnly: true, applicationServerKey: key || null } },
      toJSON: {
        value: () => ({
          endpoint: sub.endpoint,
          expirationTime: null,
          keys: { p256dh: sub.keys.p256dh, auth: sub.keys.auth },
        }),
      },
      getKey: { value: (name) => bytes(sub.keys[name]) },
      unsubscribe: { value: () => { current = null; return Promise.resolve(true); } },
    });
    current = s;
    return Promise.resolve(s);
  };
  PushManager.prototype.getSubscription = function () {
    return Promise.resolve(current);
  };
})();
"""

# Runs the service worker's own notificationclick handler on the notification with `tag`.
# There is no CDP command for a click; script-made events reject waitUntil, so it is
# replaced on the event; clients.openWindow is refused without a real user gesture, so it
# is replaced too and the URL the handler asks for is returned.
CLICK = """
async (tag) => {
  const opened = [];
  const clients = self.clients;
  clients.openWindow = (url) => { opened.push(url); return Promise.resolve(null); };
  try {
    const [notification] = await self.registration.getNotifications({ tag });
    if (!notification) return { opened, left: -1 };
    const event = new NotificationEvent("notificationclick", { notification });
    const pending = [];
    event.waitUntil = (promise) => { pending.push(promise); };
    self.dispatchEvent(event);
    await Promise.all(pending);
    const left = await self.registration.getNotifications({ tag });
    return { opened, left: left.length };
  } finally {
    delete clients.openWindow;
  }
}
"""

# Every notification the registration shows (not only one tag: nothing else may be there).
SHOWN = """
async () => {
  const registration = await navigator.serviceWorker.ready;
  const shown = await registration.getNotifications();
  return shown.map((n) => ({ title: n.title, body: n.body, tag: n.tag, data: n.data }));
}
"""


def cli_login_link(settings: Settings, email: str, tenant_id: str) -> str:
    """The link an administrator gets from `runbell user login-link`."""
    from runbell.cli import main

    env = {
        "RUNBELL_DATABASE_URL": settings.resolved_database_url(),
        "RUNBELL_SECRET_KEY": SECRET_KEY,
        "RUNBELL_DATA_DIR": str(settings.data_dir),
        "RUNBELL_PUBLIC_URL": settings.public_url,
    }
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, env),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(["user", "login-link", email, "--tenant", tenant_id])
    assert code == 0, err.getvalue()
    found = re.search(re.escape(settings.public_url) + r"/auth/\S+", out.getvalue())
    assert found, out.getvalue()
    return found.group(0)


def only_notification(opened: dict[str, Any]) -> str:
    """The id of the one notification an opened input request raised for the owner."""
    notes = [n for n in opened["notifications"] if n["attention_type"] == "input_required"]
    assert len(notes) == 1, opened["notifications"]
    return str(notes[0]["id"])


# --- sign-in, live inbox, answering, a second device -------------------------------------


def test_sign_in_live_inbox_approve_and_second_device(
    core: Core,
    creds: TenantCreds,
    settings: Settings,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id, request_id = "deploy-1", "approve-push-1"

    # Sign in with the link an administrator printed; not signed in, pages send you there.
    desk = new_context().new_page()
    desk.goto("/")
    expect(desk).to_have_url(re.compile(r"/login\?next=/$"))
    link = cli_login_link(settings, creds.owner_email, creds.tenant_id)
    desk.goto(link)
    expect(desk).to_have_url(f"{web.url}/")
    expect(desk.locator("#inbox-heading")).to_have_text("Inbox")
    expect(desk.locator("#needs-you .empty")).to_be_visible()

    # The link worked once: anyone else holding it gets an explanation, not a session.
    replay = new_context().new_page()
    response = replay.goto(link)
    assert response is not None and response.status == 410
    expect(replay.locator("main")).to_contain_text("already used")
    expect(replay.locator("#sign-out")).to_have_count(0)

    # The runtime asks while the inbox is open: the inbox says so without a reload.
    desk.evaluate("window.__sameDocument = true")
    runtime.create_run(run_id, details={"diff": "3 files changed, 41 insertions"})
    opened = runtime.open_request(
        run_id, request_id, details={"branch": "fix/checkout", "tests": "212 passed"}
    )
    note_id = only_notification(opened)
    badge = desk.locator("#new-items")
    expect(badge).to_be_visible()
    expect(badge).to_contain_text("1 new")
    assert desk.evaluate("window.__sameDocument === true"), "the inbox reloaded on its own"

    # Asking to see it shows the request under "Needs you".
    badge.click()
    item = desk.locator(f"#needs-you #n-{note_id}")
    expect(item).to_be_visible()
    expect(item).to_contain_text("A run needs your input")
    expect(desk.locator("#needs-you .count")).to_have_text("(1)")
    screenshot(desk, "inbox")

    # A second device (a phone) shows the same request.
    phone = new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2)
    mobile = phone.new_page()
    sign_in(mobile, core, creds.tenant_id, creds.owner_id)
    mobile.goto(f"/runs/{run_id}")
    expect(mobile.locator("#approve")).to_be_enabled()
    expect(mobile.locator("#request-details")).to_contain_text("fix/checkout")
    expect(mobile.locator("#run-changed")).to_be_hidden()
    screenshot(mobile, "run")

    # Approve on the desktop, from the run page the inbox item opens.
    item.locator("a.item-link").click()
    expect(desk).to_have_url(f"{web.url}/n/{note_id}")
    expect(desk.locator("#opened-from")).to_be_visible()
    expect(desk.locator("#run-state")).to_have_text("Waiting for input")
    desk.locator("#approve").click()
    expect(desk).to_have_url(re.compile(rf"/runs/{run_id}\?answered={request_id}$"))
    expect(desk.locator("#answer-recorded")).to_contain_text("approved")
    expect(desk.locator("#run-state")).to_have_text("Working")
    expect(desk.locator("#no-decision")).to_be_visible()
    now = runtime.http.get(f"/v1/runs/{run_id}").json()
    assert now["state"] == "working" and now["pending_input_request"] is None

    # The phone sees it resolved live: nothing was chosen in its form, so the decision
    # shows the run as it is now (a form in use is kept instead: tests/browser/test_run_page.py).
    expect(mobile.locator("#run-changed")).to_be_visible()
    expect(mobile.locator("#run-changed")).to_contain_text("This request was answered")
    expect(mobile.locator("#run-state")).to_have_text("Working")
    expect(mobile.locator("#respond-form")).to_have_count(0)
    expect(mobile.locator("#no-decision")).to_be_visible()
    mobile.reload()
    expect(mobile.locator("#run-state")).to_have_text("Working")
    expect(mobile.locator("#no-decision")).to_be_visible()


def test_stale_page_gets_the_explanation_not_an_execution(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id, request_id = "deploy-2", "approve-push-2"
    runtime.create_run(run_id)
    version = runtime.open_request(run_id, request_id)["run"]["version"]

    page = new_context().new_page()
    # A tab that never hears about changes (its live stream cut, like a laptop waking
    # from sleep): the form stays enabled, so only the server can stop the answer.
    page.route("**/v1/events/stream*", lambda route: route.abort())
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run-version")).to_have_text(str(version))

    # The run changes behind the page: what the request asked about may be different now.
    runtime.update_run(run_id, objective="Ship the fix and also upgrade the payment SDK")

    with page.expect_response(lambda r: r.url.endswith("/respond")) as answered:
        page.locator("#approve").click()
    assert answered.value.status == 409
    refused = page.locator("#action-refused")
    expect(refused).to_contain_text(
        f"The run changed since this page was loaded (version {version} → {version + 1})"
    )
    expect(refused).to_contain_text("Your answer was not recorded and nothing ran.")
    expect(page.locator("#answer-recorded")).to_have_count(0)

    # Nothing ran: the request is still pending, the run still waits at the new version.
    with user_client(web.url, creds.owner_token) as owner:
        now = owner.get(f"/v1/input-requests/{request_id}").json()
    assert now["input_request"]["state"] == "pending"
    assert now["input_request"]["answered_by"] is None
    assert now["run"]["state"] == "input_required"
    assert now["run"]["version"] == version + 1
    # The page now shows the run as it is, for a deliberate answer.
    expect(page.locator("#run-version")).to_have_text(str(version + 1))
    expect(page.locator('input[name="expected_run_version"]')).to_have_value(str(version + 1))


# --- browser push ----------------------------------------------------------------------------


class PushWatch:
    """CDP on the page's target: the service worker registration id, and the push events
    Chromium records (``Push event completed`` means the handler, and its waitUntil, ran)."""

    def __init__(self, context: BrowserContext, page: Page, origin: str) -> None:
        self.page = page
        self.origin = origin
        self.registrations: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.cdp: CDPSession = context.new_cdp_session(page)
        self.cdp.on(
            "ServiceWorker.workerRegistrationUpdated",
            lambda p: self.registrations.extend(p["registrations"]),
        )
        self.cdp.on(
            "BackgroundService.backgroundServiceEventReceived",
            lambda p: self.events.append(p["backgroundServiceEvent"]),
        )
        self.cdp.send("ServiceWorker.enable")
        self.cdp.send("BackgroundService.startObserving", {"service": "pushMessaging"})
        self.cdp.send(
            "BackgroundService.setRecording", {"shouldRecord": True, "service": "pushMessaging"}
        )

    def registration_id(self) -> str:
        scope = self.origin + "/"

        def found() -> bool:
            return any(r["scopeURL"] == scope and not r["isDeleted"] for r in self.registrations)

        wait_until(self.page, found, f"a service worker registration for {scope}")
        live = [r for r in self.registrations if r["scopeURL"] == scope and not r["isDeleted"]]
        return str(live[-1]["registrationId"])

    def completed(self) -> list[dict[str, str]]:
        out = []
        for e in self.events:
            if e["eventName"] == "Push event completed":
                out.append({m["key"]: m["value"] for m in e.get("eventMetadata", [])})
        return out

    def deliver(self, data: str) -> None:
        """Hand one push to the service worker and wait until its handler has finished."""
        before = len(self.completed())
        self.cdp.send(
            "ServiceWorker.deliverPushMessage",
            {"origin": self.origin, "registrationId": self.registration_id(), "data": data},
        )
        wait_until(self.page, lambda: len(self.completed()) > before, "the push event to finish")
        status = self.completed()[before]
        assert status.get("Status") == "Success", status


def pushes(page: Page, service: PushReceiver, count: int) -> list[Any]:
    wait_until(page, lambda: len(service.received) >= count, f"push #{count} from the server")
    assert not service.rejected, service.rejected
    return list(service.received)


def test_push_subscribe_receive_replace_and_click(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    push_service: PushReceiver,
) -> None:
    base = web.url
    run_id = "deploy-3"
    subscription = push_service.new_subscription()  # endpoint + keys the test generated

    context = new_context()
    context.grant_permissions(["notifications"], origin=base)
    context.add_init_script(script=FAKE_SUBSCRIBE % json.dumps(subscription))
    page = context.new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)

    # Settings: the permission is asked for only after the click; then the page registers.
    page.goto("/settings")
    assert page.evaluate("window.__subscribeCalls.length") == 0
    page.locator("#enable-push").click()
    expect(page.locator("#push-status")).to_have_text(
        "Browser notifications are on for this device."
    )
    (call,) = page.evaluate("window.__subscribeCalls")
    with user_client(base, creds.owner_token) as owner:
        vapid = owner.get("/v1/push/vapid-public-key").json()["public_key"]
        assert call == {"userVisibleOnly": True, "applicationServerKey": vapid}
        listed = owner.get("/v1/me/push-subscriptions").json()["subscriptions"]
    assert [s["endpoint_host"] for s in listed] == [urlsplit(subscription["endpoint"]).netloc]
    with core.db.read() as conn:
        rows = conn.execute(
            t.push_subscriptions.select().where(t.push_subscriptions.c.user_id == creds.owner_id)
        ).all()
    assert [(r.endpoint, r.p256dh, r.auth) for r in rows] == [
        (subscription["endpoint"], subscription["keys"]["p256dh"], subscription["keys"]["auth"])
    ]
    page.reload()
    expect(page.locator(".devices li")).to_have_count(1)
    screenshot(page, "settings")

    watch = PushWatch(context, page, base)
    tag = collapse_topic(f"{creds.tenant_id}:{run_id}")

    # The runtime asks; the server's worker encrypts and sends a pointer to the push service.
    runtime.create_run(run_id)
    first_id = only_notification(runtime.open_request(run_id, "approve-3a"))
    (first,) = pushes(page, push_service, 1)
    pointer = first.payload
    # A person's alert also has its buttons and their token (issue 19 item 2; the default
    # policy offers no answers from the lock screen).
    assert set(pointer) == POINTER_FIELDS | {"actions", "token", "not_done"}
    assert [a["action"] for a in pointer["actions"]] == ["acknowledge", "snooze"]
    assert pointer["id"] == first_id
    assert pointer["tag"] == tag == first.topic  # notification tag == push Topic
    assert pointer["url"] == f"{base}/n/{first_id}"
    # Exactly what push_payload makes for this message (ts aside: the worker's clock).
    expected = push_payload(
        Outbound(
            delivery_id="-",
            tenant_id=creds.tenant_id,
            channel="webpush",
            destination="-",
            identity="-",
            attempt_no=1,
            now=core.db.clock(),
            urgency="normal",  # input_required.default: no expiry
            title=NEUTRAL_SUMMARY["input_required"],
            body=NEUTRAL_BODY["input_required"],
            deep_link=f"{base}/n/{first_id}",
            notification_id=first_id,
            run_id=run_id,
            collapse_key=f"{creds.tenant_id}:{run_id}",
            actions=tuple((a["action"], a["title"]) for a in pointer["actions"]),
            action_token=pointer["token"],
        )
    )
    assert {**pointer, "ts": 0} == {**expected, "ts": 0}

    # Delivered to the service worker: a notification with the run's tag.
    watch.deliver(first.plaintext.decode("utf-8"))
    shown = page.evaluate(SHOWN)
    assert len(shown) == 1, shown
    assert shown[0]["tag"] == tag
    assert shown[0]["title"] == pointer["title"]
    assert shown[0]["body"] == pointer["body"]
    assert shown[0]["data"]["id"] == first_id

    # A newer request for the same run: its push replaces the notification on screen.
    second_id = only_notification(runtime.open_request(run_id, "approve-3b"))
    second = pushes(page, push_service, 2)[1]
    assert second.payload["id"] == second_id
    assert second.payload["tag"] == tag
    watch.deliver(second.plaintext.decode("utf-8"))
    shown = page.evaluate(SHOWN)
    assert len(shown) == 1, shown
    assert shown[0]["data"]["id"] == second_id
    assert shown[0]["body"] == second.payload["body"]
    assert shown[0]["data"]["url"] == f"{base}/n/{second_id}"

    # A click runs the service worker's handler: it opens the deep link, closes the
    # notification, and reports "opened" (telemetry, never a decision).
    worker = context.service_workers[0] if context.service_workers else None
    if worker is None:
        worker = context.wait_for_event("serviceworker")
    clicked = worker.evaluate(CLICK, tag)
    assert clicked == {"opened": [f"{base}/n/{second_id}"], "left": 0}
    page.goto(clicked["opened"][0])
    expect(page.locator("#opened-from")).to_be_visible()
    expect(page.locator("#approve")).to_be_enabled()

    with user_client(base, creds.admin_key) as admin:
        trail = admin.get(f"/v1/notifications/{second_id}/trail").json()
        request = admin.get("/v1/input-requests/approve-3b").json()
    receipts = {(r["kind"], r["channel"]) for r in trail["receipts"]}
    assert {("displayed", "webpush"), ("opened", "webpush")} <= receipts, trail["receipts"]
    assert request["input_request"]["state"] == "pending"  # opening is not approval


# --- sign-out ----------------------------------------------------------------------------------


def test_run_page_hides_details_after_sign_out(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "deploy-4"
    runtime.create_run(run_id, details={"plan": "rotate the staging database password"})
    runtime.open_request(run_id, "approve-4", details={"command": "kubectl rollout restart"})

    context = new_context()
    page = context.new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run-details")).to_contain_text("rotate the staging database password")
    expect(page.locator("#request-details")).to_contain_text("kubectl rollout restart")
    (cookie,) = [c for c in context.cookies() if c["name"] == "rb_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"

    page.locator("#sign-out").click()
    expect(page).to_have_url(f"{web.url}/login?signed_out=1")
    expect(page.locator("main")).to_contain_text("You are signed out.")

    def hidden(p: Page) -> None:
        expect(p).to_have_url(re.compile(rf"/login\?next=/runs/{run_id}$"))
        html = p.content()
        assert "rotate the staging" not in html and "kubectl rollout" not in html

    # Back to the run page: through the history, and by its address.
    page.go_back()
    hidden(page)
    page.goto(f"/runs/{run_id}")
    hidden(page)

    # The old cookie is dead on the server, wherever it was copied to.
    copied = new_context()
    copied.add_cookies([{"name": cookie["name"], "value": cookie["value"], "url": web.url}])
    thief = copied.new_page()
    thief.goto(f"/runs/{run_id}")
    hidden(thief)


# --- the planted secret ------------------------------------------------------------------------


def test_planted_secret_stays_out_of_pages_pushes_and_logs(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    push_service: PushReceiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run_id, request_id = "deploy-5", "approve-5"
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logged:
        # The owner's browser is subscribed (the same call the settings page makes).
        with user_client(web.url, creds.owner_token) as owner:
            r = owner.post("/v1/me/push-subscriptions", json=push_service.new_subscription())
            assert r.status_code == 201, r.text
        runtime.create_run(run_id, details={"api_key": SECRET, "note": "planted"})
        note_id = only_notification(
            runtime.open_request(
                run_id, request_id, details={"command": f"curl -H 'Authorization: {SECRET}'"}
            )
        )

        # Before sign-in every page sends you to /login, and nothing of the run shows.
        anonymous = new_context().new_page()
        for path in ("/", "/login", f"/runs/{run_id}", f"/n/{note_id}", "/settings"):
            anonymous.goto(path)
            landed = urlsplit(anonymous.url)
            assert landed.path == "/login", (path, anonymous.url)
            assert parse_qs(landed.query).get("next", ["/"]) == ["/" if path == "/login" else path]
            expect(anonymous.locator("h1")).to_have_text("Sign in to Runbell")
            assert SECRET not in anonymous.content(), path

        # Another member, who may not see the run: the same "no access" page for both links.
        other_id, other_token = add_user(core, creds.tenant_id, "mallory@acme.test")
        mallory = new_context().new_page()
        sign_in(mallory, core, creds.tenant_id, other_id)
        for path in ("/", f"/runs/{run_id}", f"/n/{note_id}", "/settings"):
            mallory.goto(path)
            assert SECRET not in mallory.content(), path
            if path != "/" and path != "/settings":
                expect(mallory.locator("h1")).to_have_text("You no longer have access to this")
        with user_client(web.url, other_token) as other:
            assert other.get(f"/v1/runs/{run_id}").status_code == 404
            feed = other.get("/v1/events", params={"after": "earliest"})
            assert feed.status_code == 200 and SECRET not in feed.text

        # The push the server sent (what a lock screen could show) is a pointer only.
        (sent,) = pushes(mallory, push_service, 1)
        assert sent.payload["id"] == note_id
        assert SECRET not in sent.plaintext.decode("utf-8")

        # Control: signed in as the owner the details are there, so the scans above can fail.
        owner_page = new_context().new_page()
        sign_in(owner_page, core, creds.tenant_id, creds.owner_id)
        owner_page.goto(f"/runs/{run_id}")
        expect(owner_page.locator("#run-details")).to_contain_text(SECRET)
        expect(owner_page.locator("#request-details")).to_contain_text(SECRET)

    # The logs of all of that: captured (the capture is live) and free of the secret.
    names = {e.get("event") for e in logged}
    assert {"input_request.opened", "web.signed_in"} <= names, sorted(map(str, names))
    assert SECRET not in repr(logged)
    assert SECRET not in caplog.text
    assert not any(SECRET in repr(rec.args) for rec in caplog.records)
