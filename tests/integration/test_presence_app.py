"""Presence only from a person's app (issue 18 item 9), on SQLite and PostgreSQL.

A person watching the live UI is not interrupted by a push for a completion they are
looking at (``completed.owner_present``). Only their app counts as watching: the web
app's signed-in pages, or a client that declares itself the person's app (a user token
with ``X-Runbell-Client: app``; the SDK's ``Client(as_app=True)``). A script streaming
with the person's token, or a runtime with an API key, does not hold back their pushes:
the push is delivered, to the real local push receiver.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from runbell.client import Client
from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds
from tests.channels.push_receiver import PushReceiver
from tests.conftest import LiveServer, bearer
from tests.integration.test_feed import put_run, signal, wait_until
from tests.integration.test_web import link_for
from tests.peers import Dispatcher
from tests.timeouts import WAIT


@pytest.fixture
def server(core: Core) -> Iterator[LiveServer]:
    with LiveServer(core) as live:
        yield live


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=WAIT) as client:
        yield client


@pytest.fixture
def push(http: httpx.Client, creds: TenantCreds) -> Iterator[PushReceiver]:
    """The owner's browser, subscribed to web push at the local push receiver."""
    key = http.get("/v1/push/vapid-public-key").json()["public_key"]
    with PushReceiver(expected_vapid_key=key) as receiver:
        sub = receiver.new_subscription()
        r = http.post("/v1/me/push-subscriptions", json=sub, headers=bearer(creds.owner_token))
        assert r.status_code == 201, r.text
        yield receiver


def present(core: Core, creds: TenantCreds) -> bool:
    return core.presence.is_present(creds.tenant_id, creds.owner_id)


def complete(http: httpx.Client, creds: TenantCreds, run_id: str) -> dict[str, Any]:
    """A run the owner asked to hear about completes: the policy's one notification."""
    (note,) = signal(http, creds.runtime_key, run_id, f"{run_id}-done", "completed")[
        "notifications"
    ]
    return dict(note)


def drain(d: Dispatcher) -> None:
    while d.tick():
        pass


def read_until_event(lines: Iterator[str]) -> None:
    """Read the stream until an event arrives: the server has passed the point where a
    watching stream is counted."""
    for line in lines:
        if line.startswith("data:"):
            return
    raise AssertionError("the stream ended before an event arrived")


def test_a_script_streaming_with_the_persons_token_does_not_hold_back_their_push(
    core: Core, clock: Clock, creds: TenantCreds, http: httpx.Client, push: PushReceiver
) -> None:
    with (
        Dispatcher(core, clock) as d,
        http.stream("GET", "/v1/events/stream", headers=bearer(creds.owner_token)) as stream,
    ):
        lines = stream.iter_lines()
        put_run(http, creds.runtime_key, "scripted", creds.owner_email, notify_on_complete=True)
        read_until_event(lines)  # the script is streaming the owner's feed
        assert not present(core, creds)
        note = complete(http, creds, "scripted")
        assert (note["decision"], note["rule_id"]) == ("push", "completed.requested")
        drain(d)
        assert len(push.received) == 1  # delivered, not held back


def test_an_api_key_never_counts_even_when_it_says_it_is_an_app(
    core: Core, clock: Clock, creds: TenantCreds, http: httpx.Client, push: PushReceiver
) -> None:
    headers = {**bearer(creds.runtime_key), "X-Runbell-Client": "app"}
    with (
        Dispatcher(core, clock) as d,
        http.stream("GET", "/v1/events/stream", headers=headers) as stream,
    ):
        lines = stream.iter_lines()
        put_run(http, creds.runtime_key, "keyed", creds.owner_email, notify_on_complete=True)
        read_until_event(lines)
        assert not present(core, creds)
        note = complete(http, creds, "keyed")
        assert note["decision"] == "push"
        drain(d)
        assert len(push.received) == 1


def test_the_web_apps_stream_holds_back_the_push(
    core: Core, clock: Clock, creds: TenantCreds, http: httpx.Client, push: PushReceiver
) -> None:
    # The owner signs in through a real one-time link: the browser's session cookie.
    r = http.get(f"/auth/{link_for(core, creds.tenant_id, creds.owner_id)}")
    assert r.status_code in (200, 303), r.text
    assert "rb_session" in http.cookies
    put_run(http, creds.runtime_key, "watched", creds.owner_email, notify_on_complete=True)
    with Dispatcher(core, clock) as d, http.stream("GET", "/v1/events/stream") as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()  # kept: a dropped iterator closes the stream
        next(lines)  # the page's EventSource is open
        wait_until(lambda: present(core, creds), "the open page to count as watching")
        note = complete(http, creds, "watched")
        assert (note["decision"], note["rule_id"]) == ("inbox", "completed.owner_present")
        drain(d)
        assert push.received == []  # held back: the person is looking at it
    wait_until(lambda: not present(core, creds), "the closed page to stop counting")


def test_a_person_token_that_declares_an_app_counts(
    core: Core, creds: TenantCreds, http: httpx.Client
) -> None:
    headers = {**bearer(creds.owner_token), "X-Runbell-Client": "app"}
    put_run(http, creds.runtime_key, "declared", creds.owner_email, notify_on_complete=True)
    with http.stream("GET", "/v1/events/stream", headers=headers) as stream:
        lines = stream.iter_lines()
        next(lines)
        wait_until(lambda: present(core, creds), "the declared app to count as watching")
        note = complete(http, creds, "declared")
        assert note["rule_id"] == "completed.owner_present"


def test_the_sdk_as_a_persons_app_counts_while_it_waits_and_a_plain_sdk_does_not(
    core: Core, creds: TenantCreds, http: httpx.Client, server: LiveServer
) -> None:
    put_run(http, creds.runtime_key, "sdk-plain", creds.owner_email, notify_on_complete=True)
    put_run(http, creds.runtime_key, "sdk-app", creds.owner_email, notify_on_complete=True)
    with Client(server.url, creds.owner_token) as plain:
        head = plain.head_cursor()
        before = core.hub.waiter_count()
        waiting = threading.Thread(target=lambda: plain.events(after=head, wait=WAIT))
        waiting.start()
        wait_until(lambda: core.hub.waiter_count() > before, "the script's long-poll to wait")
        assert not present(core, creds)
        note = complete(http, creds, "sdk-plain")  # also wakes the waiting script
        waiting.join(WAIT)
        assert note["rule_id"] == "completed.requested"
    with Client(server.url, creds.owner_token, as_app=True) as app:
        head = app.head_cursor()
        waiting = threading.Thread(target=lambda: app.events(after=head, wait=WAIT))
        waiting.start()
        wait_until(lambda: present(core, creds), "the app's wait to count as watching")
        note = complete(http, creds, "sdk-app")
        waiting.join(WAIT)
        assert note["rule_id"] == "completed.owner_present"
    wait_until(lambda: not present(core, creds), "the app's wait to end")
