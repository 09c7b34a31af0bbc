"""The delivery API: webhook endpoints (SSRF at registration, secrets shown once,
tenancy), deliveries (filters, paging, replay), preferences, push subscriptions and
chat destinations (DESIGN §2 inv. 7, 14; §3; §6). Every test runs on SQLite and
PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.channels.push_receiver import PushReceiver
from tests.conftest import bearer
from tests.peers import Dispatcher, HttpPeer, WebhookReceiver

# --- helpers -------------------------------------------------------------------------


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = dict(response.json())
    assert body["status"] == status
    return body


def metric(client: TestClient, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def finish_run(client: TestClient, creds: TenantCreds, run_id: str, **run: Any) -> dict[str, Any]:
    rt = bearer(creds.runtime_key)
    body = {"owner": creds.owner_email, "state": "working", **run}
    ok(client.put(f"/v1/runs/{run_id}", json=body, headers=rt), 201)
    answer = ok(
        client.post(
            f"/v1/runs/{run_id}/signals",
            json={"event_id": f"{run_id}-done", "state": "completed"},
            headers=rt,
        )
    )
    assert answer["outcome"] == "applied"
    return dict(answer)


@pytest.fixture
def peer() -> Iterator[HttpPeer]:
    """A listener on 127.0.0.1 that counts connections: hostile spellings of its own
    address must be refused without ever reaching it."""
    with HttpPeer() as p:
        yield p


def hostile_urls(port: int) -> list[str]:
    return [
        # private, loopback, link-local, CGNAT, reserved, documentation, multicast
        "https://10.0.0.1/hook",
        "https://172.16.5.4/hook",
        "https://192.168.1.1/hook",
        f"https://127.0.0.2:{port}/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://100.64.0.1/hook",
        "https://0.0.0.0/hook",
        "https://192.0.2.10/hook",
        "https://198.18.0.1/hook",
        "https://224.0.0.1/hook",
        "https://255.255.255.255/hook",
        # other spellings of 127.0.0.1 (the allow-list matches the literal text only)
        f"https://2130706433:{port}/hook",
        f"https://0177.0.0.1:{port}/hook",
        f"https://0x7f000001:{port}/hook",
        f"https://0x7f.0.0.1:{port}/hook",
        f"https://127.1:{port}/hook",
        f"https://[::ffff:127.0.0.1]:{port}/hook",
        # IPv6: loopback, mapped, NAT64, 6to4, link-local, unique-local, zone id
        f"https://[::1]:{port}/hook",
        "https://[::ffff:10.0.0.1]/hook",
        "https://[64:ff9b::a00:1]/hook",
        "https://[2002:a00:1::1]/hook",
        "https://[fe80::1]/hook",
        "https://[fe80::1%25eth0]/hook",
        "https://[fc00::1]/hook",
        "https://[::]/hook",
        # names that only mean something inside our network
        f"https://localhost:{port}/hook",
        f"https://LOCALHOST.:{port}/hook",
        f"https://hooks.localhost:{port}/hook",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://printer.local/hook",
        f"https://vm:{port}/hook",
        # plain http to a host nobody allow-listed, other schemes, hidden hosts
        "http://example.com/hook",
        f"http://127.0.0.1.nip.io:{port}/hook",
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "gopher://example.com:70/1",
        f"https://user:pw@127.0.0.1:{port}/hook",
    ]


# --- webhook endpoints -----------------------------------------------------------------


def test_hostile_webhook_urls_are_refused_at_registration_before_any_connection(
    client: TestClient, creds: TenantCreds, peer: HttpPeer
) -> None:
    """Hostile webhook URLs get 422 at registration and nothing is ever contacted."""
    admin = bearer(creds.admin_key)
    urls = hostile_urls(peer.port)
    assert len(urls) >= 25
    for url in urls:
        r = client.post("/v1/webhook-endpoints", json={"url": url}, headers=admin)
        body = problem(r, 422)
        assert body["type"].endswith("/unsafe-destination"), (url, body)
        assert url not in body["detail"]  # a URL may carry a token: never echoed whole
    assert ok(client.get("/v1/webhook-endpoints", headers=admin)) == {"endpoints": []}
    assert peer.connections == 0 and peer.requests == []


def test_allow_listed_receiver_is_accepted_and_its_secret_shown_once(
    client: TestClient, creds: TenantCreds, peer: HttpPeer
) -> None:
    """An allow-listed receiver registers; its secret is shown once and never again."""
    admin = bearer(creds.admin_key)
    created = ok(
        client.post(
            "/v1/webhook-endpoints",
            json={"url": peer.url("/x"), "event_types": ["run.finished"]},
            headers=admin,
        ),
        201,
    )
    secret = created["secret"]
    assert secret.startswith("whsec_")
    assert created["status"] == "enabled"
    assert created["event_types"] == ["run.finished"]
    endpoint_id = created["id"]

    rotated = ok(client.post(f"/v1/webhook-endpoints/{endpoint_id}/rotate-secret", headers=admin))
    for r in (
        client.get(f"/v1/webhook-endpoints/{endpoint_id}", headers=admin),
        client.get("/v1/webhook-endpoints", headers=admin),
    ):
        assert r.status_code == 200
        assert secret not in r.text and rotated["secret"] not in r.text
        assert "whsec_" not in r.text
    assert peer.connections == 0  # registration never calls the receiver


def test_patch_validates_url_filter_and_fields(
    client: TestClient, creds: TenantCreds, peer: HttpPeer
) -> None:
    """PATCH refuses bad URLs, filters and fields with 422; a valid change applies."""
    admin = bearer(creds.admin_key)
    created = ok(
        client.post("/v1/webhook-endpoints", json={"url": peer.url("/x")}, headers=admin), 201
    )
    path = f"/v1/webhook-endpoints/{created['id']}"
    for bad, field in (
        ({"url": "https://169.254.169.254/"}, None),
        ({"url": None}, "url"),
        ({"event_types": ["run.exploded"]}, "event_types.0"),
        ({"status": "paused"}, "status"),
        ({"secret": "whsec_AAAA"}, "secret"),
    ):
        body = problem(client.patch(path, json=bad, headers=admin), 422)
        if field is not None:
            assert body["field"] == field, body
    assert ok(client.get(path, headers=admin))["url"] == peer.url("/x")

    changed = ok(
        client.patch(
            path,
            json={"url": peer.url("/y"), "event_types": ["notification.created"]},
            headers=admin,
        )
    )
    assert changed["url"] == peer.url("/y")
    assert changed["event_types"] == ["notification.created"]


def test_another_tenants_endpoint_is_404_on_every_route(
    core: Core, client: TestClient, creds: TenantCreds, peer: HttpPeer
) -> None:
    """Another tenant's endpoint id is 404 on every endpoint route and never listed."""
    other = make_tenant(core, "globex")
    created = ok(
        client.post(
            "/v1/webhook-endpoints", json={"url": peer.url()}, headers=bearer(other.admin_key)
        ),
        201,
    )
    path = f"/v1/webhook-endpoints/{created['id']}"
    admin = bearer(creds.admin_key)
    since = {"since": "2020-01-01T00:00:00Z"}
    for r in (
        client.get(path, headers=admin),
        client.patch(path, json={"status": "disabled"}, headers=admin),
        client.post(f"{path}/rotate-secret", headers=admin),
        client.post(f"{path}/recover", params=since, headers=admin),
    ):
        problem(r, 404)
    assert ok(client.get("/v1/webhook-endpoints", headers=admin)) == {"endpoints": []}
    assert ok(client.get(path, headers=bearer(other.admin_key)))["status"] == "enabled"


def test_recover_needs_an_aware_since(
    client: TestClient, creds: TenantCreds, peer: HttpPeer
) -> None:
    """recover needs ?since= with a timezone offset (422 naming it otherwise)."""
    admin = bearer(creds.admin_key)
    created = ok(client.post("/v1/webhook-endpoints", json={"url": peer.url()}, headers=admin), 201)
    path = f"/v1/webhook-endpoints/{created['id']}/recover"
    body = problem(client.post(path, params={"since": "2030-01-01T00:00:00"}, headers=admin), 422)
    assert body["field"] == "since"
    assert problem(client.post(path, headers=admin), 422)["field"] == "since"
    nothing = client.post(path, params={"since": "2030-01-01T00:00:00Z"}, headers=admin)
    assert (nothing.status_code, nothing.json()) == (202, {"requeued": 0})


def test_webhook_endpoints_need_an_admin(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    """Runtime keys and members cannot list or register tenant webhooks (403)."""
    _, member = add_user(core, creds.tenant_id, "member@acme.test")
    for token in (creds.runtime_key, member):
        problem(client.get("/v1/webhook-endpoints", headers=bearer(token)), 403)
        problem(
            client.post(
                "/v1/webhook-endpoints",
                json={"url": "https://hooks.example.com/x"},
                headers=bearer(token),
            ),
            403,
        )


# --- deliveries ------------------------------------------------------------------------


def test_deliveries_filter_page_and_replay_rules(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    """Deliveries filter and page; replaying accepted is 409, unknown 404, runtime 403."""
    admin = bearer(creds.admin_key)
    with WebhookReceiver() as good, WebhookReceiver(default_status=500) as bad:
        clock.freeze(datetime.now(UTC))
        for rx in (good, bad):
            created = ok(
                client.post(
                    "/v1/webhook-endpoints",
                    json={"url": rx.url(), "event_types": ["run.finished"]},
                    headers=admin,
                ),
                201,
            )
            rx.secrets = [created["secret"]]
        finish_run(client, creds, "list-1")
        finish_run(client, creds, "list-2")
        with Dispatcher(core, clock) as d:
            for _ in range(40):
                pending = [
                    x
                    for x in ok(client.get("/v1/deliveries", headers=admin))["deliveries"]
                    if x["status"] in ("queued", "retry_scheduled")
                ]
                if not pending:
                    break
                clock.freeze(min(datetime.fromisoformat(x["next_attempt_at"]) for x in pending))
                assert d.tick() >= 1
            else:
                raise AssertionError("deliveries still pending")

    everything = ok(client.get("/v1/deliveries", headers=admin))["deliveries"]
    webhook = ok(client.get("/v1/deliveries", params={"channel": "webhook"}, headers=admin))
    dead = ok(client.get("/v1/deliveries", params={"status": "dead"}, headers=admin))
    assert {x["channel"] for x in everything} == {"webhook", "inbox"}
    assert len(webhook["deliveries"]) == 4
    assert {x["channel"] for x in webhook["deliveries"]} == {"webhook"}
    assert sorted(x["status"] for x in webhook["deliveries"]) == ["accepted"] * 2 + ["dead"] * 2
    assert len(dead["deliveries"]) == 2
    assert {(x["channel"], x["status"]) for x in dead["deliveries"]} == {("webhook", "dead")}
    both = ok(
        client.get(
            "/v1/deliveries",
            params={"status": ["dead", "accepted"], "channel": "inbox"},
            headers=admin,
        )
    )
    assert [x["status"] for x in both["deliveries"]] == ["accepted", "accepted"]

    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = ok(client.get("/v1/deliveries", params=params, headers=admin))
        assert len(page["deliveries"]) <= 2
        seen += [x["id"] for x in page["deliveries"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [x["id"] for x in everything]
    assert len(set(seen)) == len(seen) == 6

    accepted = next(x for x in webhook["deliveries"] if x["status"] == "accepted")
    conflict = problem(client.post(f"/v1/deliveries/{accepted['id']}/replay", headers=admin), 409)
    assert "accepted" in conflict["detail"]
    problem(client.post("/v1/deliveries/msg_nope/replay", headers=admin), 404)
    problem(client.get("/v1/deliveries/msg_nope", headers=admin), 404)
    runtime = bearer(creds.runtime_key)
    problem(client.get("/v1/deliveries", headers=runtime), 403)
    problem(
        client.post(f"/v1/deliveries/{dead['deliveries'][0]['id']}/replay", headers=runtime), 403
    )
    problem(client.get("/v1/deliveries", params={"status": "lost"}, headers=admin), 422)


def test_another_tenants_delivery_is_404(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    """Another tenant's delivery is neither listed, readable nor replayable."""
    finish_run(client, creds, "mine-1")
    (mine,) = ok(client.get("/v1/deliveries", headers=bearer(creds.admin_key)))["deliveries"]
    other = bearer(make_tenant(core, "globex").admin_key)
    assert ok(client.get("/v1/deliveries", headers=other))["deliveries"] == []
    problem(client.get(f"/v1/deliveries/{mine['id']}", headers=other), 404)
    problem(client.post(f"/v1/deliveries/{mine['id']}/replay", headers=other), 404)


# --- preferences -----------------------------------------------------------------------


def test_preferences_defaults_and_validation(client: TestClient, creds: TenantCreds) -> None:
    """Preferences default sensibly; bad timezone, window or urgency is a 422."""
    owner = bearer(creds.owner_token)
    prefs = ok(client.get("/v1/me/preferences", headers=owner))
    assert prefs["consent"]["email"] == ["normal", "time_sensitive", "urgent"]
    assert prefs["consent"]["webpush"] == ["normal", "time_sensitive", "urgent"]
    assert prefs["quiet_hours"] == [] and prefs["timezone"] == "UTC"
    assert prefs["email"] == creds.owner_email

    assert (
        problem(
            client.put("/v1/me/preferences", json={"timezone": "Mars/Olympus"}, headers=owner), 422
        )["field"]
        == "timezone"
    )
    for window in (
        {"start": "25:00", "end": "07:00"},
        {"start": "22:00", "end": "22:00"},
        {"start": "22:00"},
        {"start": "22:00", "end": "07:00", "days": [7]},
    ):
        body = problem(
            client.put("/v1/me/preferences", json={"quiet_hours": [window]}, headers=owner), 422
        )
        assert body["field"].startswith("quiet_hours"), body
    body = problem(
        client.put("/v1/me/preferences", json={"consent": {"email": ["shouting"]}}, headers=owner),
        422,
    )
    assert body["field"].startswith("consent"), body
    problem(
        client.put("/v1/me/preferences", json={"consent": {"fax": ["urgent"]}}, headers=owner),
        422,
    )
    problem(
        client.put(
            "/v1/me/preferences",
            json={"timezone": "Europe/Berlin", "quiet_hours": [{"start": "x", "end": "y"}]},
            headers=owner,
        ),
        422,
    )
    assert ok(client.get("/v1/me/preferences", headers=owner)) == prefs
    problem(client.get("/v1/me/preferences", headers=bearer(creds.admin_key)), 403)


def test_withdrawing_email_consent_counts_an_opt_out_and_stops_new_email(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    """Withdrawing email consent counts an opt-out and stops new email deliveries."""
    owner, admin = bearer(creds.owner_token), bearer(creds.admin_key)
    before = metric(client, "runbell_opt_outs_total", channel="email", urgency="normal")
    saved = ok(
        client.put(
            "/v1/me/preferences",
            json={"consent": {"email": ["time_sensitive", "urgent"]}},
            headers=owner,
        )
    )
    assert saved["consent"]["email"] == ["time_sensitive", "urgent"]
    assert saved["consent_record"]["email"]["how"] == "user"
    assert metric(client, "runbell_opt_outs_total", channel="email", urgency="normal") == before + 1

    answer = finish_run(client, creds, "optout-1", notify_on_complete=True)
    (note,) = answer["notifications"]
    assert (note["decision"], note["urgency"]) == ("push", "normal")
    trail = ok(client.get(f"/v1/notifications/{note['id']}/trail", headers=admin))
    assert [d["channel"] for d in trail["deliveries"]] == ["inbox"]
    assert ok(client.get("/v1/deliveries", params={"channel": "email"}, headers=admin)) == {
        "deliveries": [],
        "next_cursor": None,
    }


# --- push subscriptions ----------------------------------------------------------------


def test_push_subscription_upserts_by_endpoint_and_belongs_to_its_user(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    """Re-subscribing updates (200); only its owner can delete a push subscription."""
    owner = bearer(creds.owner_token)
    with PushReceiver() as push:
        sub = push.new_subscription()
        first = ok(client.post("/v1/me/push-subscriptions", json=sub, headers=owner), 201)
        again = {**sub, "expirationTime": None, "user_agent": "Firefox 140"}
        second = ok(client.post("/v1/me/push-subscriptions", json=again, headers=owner), 200)
    assert second["id"] == first["id"]
    assert second["user_agent"] == "Firefox 140"
    listed = ok(client.get("/v1/me/push-subscriptions", headers=owner))["subscriptions"]
    assert [s["id"] for s in listed] == [first["id"]]
    assert sub["endpoint"] not in str(listed)  # the endpoint is a capability: host only

    _, member_token = add_user(core, creds.tenant_id, "member@acme.test")
    member = bearer(member_token)
    problem(client.delete(f"/v1/me/push-subscriptions/{first['id']}", headers=member), 404)
    assert ok(client.get("/v1/me/push-subscriptions", headers=member))["subscriptions"] == []
    r = client.delete(f"/v1/me/push-subscriptions/{first['id']}", headers=owner)
    assert r.status_code == 204
    assert ok(client.get("/v1/me/push-subscriptions", headers=owner))["subscriptions"] == []


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://10.0.0.1/push/abc",
        "https://169.254.169.254/push/abc",
        "https://[::ffff:10.0.0.1]/push/abc",
        "https://localhost/push/abc",
        "ftp://push.example.com/abc",
    ],
)
def test_push_subscription_to_a_hostile_endpoint_is_refused(
    client: TestClient, creds: TenantCreds, endpoint: str
) -> None:
    """A push endpoint inside our network, or not http(s), is refused with 422."""
    owner = bearer(creds.owner_token)
    with PushReceiver() as push:
        keys = push.new_subscription()["keys"]
    body = {"endpoint": endpoint, "keys": keys}
    problem(client.post("/v1/me/push-subscriptions", json=body, headers=owner), 422)
    assert ok(client.get("/v1/me/push-subscriptions", headers=owner))["subscriptions"] == []


# --- chat destinations -----------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "json://10.0.0.5/x",
        "jsons://10.0.0.5/x",
        "jsons://169.254.169.254/x",
        "json://localhost/x",
        "ntfys://192.168.1.10/topic",
        "gotifys://[::1]/token123",
        "windows://",
        "mailto://user:pw@example.com",
    ],
)
def test_chat_destination_inside_our_network_is_refused(
    client: TestClient, creds: TenantCreds, url: str
) -> None:
    """A chat URL aimed inside our network, or a non-chat plugin, is refused with 422."""
    owner = bearer(creds.owner_token)
    problem(client.post("/v1/me/chat-destinations", json={"url": url}, headers=owner), 422)
    assert ok(client.get("/v1/me/chat-destinations", headers=owner))["destinations"] == []


@pytest.mark.parametrize(
    "url",
    [
        "json://127.0.0.1:9/hook,json://10.0.0.1/x",  # Apprise.add: two services
        "json://127.0.0.1:9/hook;json://10.0.0.1/x",
        "json://127.0.0.1:9/a,b",
        "slack://T000/B000/XXXX/#ops,#all",
        "discord://1234/abcd,efg",
        "json://127.0.0.1:9/hook?-X-Extra=a,b",
    ],
)
def test_chat_url_with_a_list_separator_is_refused(
    client: TestClient, creds: TenantCreds, url: str
) -> None:
    """A comma or semicolon is a list to Apprise (of URLs or of targets): refused as one
    destination, naming the field, and nothing is stored."""
    for path, who in (
        ("/v1/me/chat-destinations", creds.owner_token),
        ("/v1/chat-destinations", creds.admin_key),
    ):
        body = problem(client.post(path, json={"url": url}, headers=bearer(who)), 422)
        assert body["field"] == "url"
        assert "',' or ';'" in body["detail"]
        assert "127.0.0.1" not in body["detail"] and "XXXX" not in body["detail"]
    listed = client.get("/v1/me/chat-destinations", headers=bearer(creds.owner_token))
    assert ok(listed)["destinations"] == []


def test_chat_destination_spelling_our_own_address_never_reaches_it(
    client: TestClient, creds: TenantCreds, peer: HttpPeer
) -> None:
    """Loopback spellings are refused for chat too, and their listener is never called."""
    owner = bearer(creds.owner_token)
    port = peer.port
    for url in (
        f"json://2130706433:{port}/x",
        f"json://0x7f000001:{port}/x",
        f"json://127.0.0.2:{port}/x",
        f"json://[::ffff:127.0.0.1]:{port}/x",
        f"json://[::1]:{port}/x",
        f"json://localhost:{port}/x",
        f"jsons://127.0.0.2:{port}/x",
    ):
        r = client.post("/v1/me/chat-destinations", json={"url": url}, headers=owner)
        problem(r, 422)
    assert ok(client.get("/v1/me/chat-destinations", headers=owner))["destinations"] == []
    assert peer.connections == 0


def test_chat_destination_is_only_ever_shown_redacted(
    client: TestClient, creds: TenantCreds
) -> None:
    """Chat URLs are only ever shown redacted: no user, password or path token."""
    owner = bearer(creds.owner_token)
    url = "json://tok-user-7c:tok-pass-9d@127.0.0.1:1/secret-path-5e"
    created = client.post("/v1/me/chat-destinations", json={"url": url}, headers=owner)
    listed = client.get("/v1/me/chat-destinations", headers=owner)
    assert ok(created, 201)["url"] == "json://127.0.0.1:1/…"
    for r in (created, listed):
        for part in ("tok-user-7c", "tok-pass-9d", "secret-path-5e"):
            assert part not in r.text
    assert [d["url"] for d in ok(listed)["destinations"]] == ["json://127.0.0.1:1/…"]


def test_push_subscription_cannot_be_taken_over_by_knowing_its_endpoint(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Another member posting someone's endpoint with other keys gets 409; the owner's
    subscription (and their pushes) stay theirs."""

    endpoint = "http://127.0.0.1:9/push/abc"
    keys = {"p256dh": "B" + "A" * 86, "auth": "C" * 22}
    mine = client.post(
        "/v1/me/push-subscriptions",
        json={"endpoint": endpoint, "keys": keys},
        headers={"Authorization": f"Bearer {creds.owner_token}"},
    )
    assert mine.status_code == 201, mine.text
    _, other = add_user(core, creds.tenant_id, "mallory@acme.test")
    stolen = client.post(
        "/v1/me/push-subscriptions",
        json={"endpoint": endpoint, "keys": {"p256dh": "B" + "Z" * 86, "auth": "D" * 22}},
        headers={"Authorization": f"Bearer {other}"},
    )
    assert stolen.status_code == 409
    listed = client.get(
        "/v1/me/push-subscriptions", headers={"Authorization": f"Bearer {creds.owner_token}"}
    ).json()
    assert [s["id"] for s in listed["subscriptions"]] == [mine.json()["id"]]
