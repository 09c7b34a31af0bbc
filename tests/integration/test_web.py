"""The web app through HTTP, as a browser without JavaScript sees it (TestClient).

Sign-in links and sessions, CSRF on every form and on cookie-authenticated API calls,
the inbox, the run page and its answer form, deep links, settings and the service
worker. Every test runs on SQLite and PostgreSQL. What is asserted is what a person (or
an attacker) would notice: where they land, what a page says, what changed and what
did not. Browser behaviour (live updates, push) is for tests/browser.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from runbell.app import build, create_app
from runbell.cli.welcome import welcome_text
from runbell.flows import members
from runbell.flows.accounts import bootstrap_if_empty
from runbell.flows.context import Core
from runbell.store import sessions
from runbell.testing import Clock, TenantCreds, add_user
from runbell.web.forms import safe_next
from tests.conftest import SECRET_KEY, bearer, make_settings
from tests.peers import SmtpPeer, mail_text

PLANTED = "SECRET-PLANTED-WEB-7"
CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')
FIELD = re.compile(r'name="{}" value="([^"]*)"')


# --- helpers ---------------------------------------------------------------------------


def link_for(core: Core, tenant_id: str, user_id: str) -> str:
    with core.db.transaction() as tx:
        return sessions.create_login_link(tx.conn, tenant_id, user_id, tx.now)


def sign_in(client: TestClient, core: Core, tenant_id: str, user_id: str) -> str:
    """Sign ``client`` in through a real one-time link; returns the session's CSRF token."""
    r = client.get(f"/auth/{link_for(core, tenant_id, user_id)}", follow_redirects=False)
    assert r.status_code == 303, r.text
    page = client.get("/settings")
    assert page.status_code == 200, page.text
    match = CSRF_META.search(page.text)
    assert match, "signed-in pages carry the CSRF token"
    return match.group(1)


def field(html: str, name: str) -> str:
    match = re.search(FIELD.pattern.format(re.escape(name)), html)
    assert match, f"no field {name!r} on the page"
    return match.group(1)


def other_browser(client: TestClient) -> TestClient:
    """A second browser on the same server, with its own cookie jar."""
    return TestClient(client.app)


@pytest.fixture
def owner_browser(client: TestClient, core: Core, creds: TenantCreds) -> str:
    return sign_in(client, core, creds.tenant_id, creds.owner_id)


def make_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> None:
    body = {
        "owner": creds.owner_email,
        "title": f"Title of {run_id}",
        "state": "working",
        "details": {"secret": PLANTED},
        **fields,
    }
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text


def finish(client: TestClient, creds: TenantCreds, run_id: str) -> str:
    """A run that asked to be told when it completes, completed: its notification id."""
    make_run(client, creds, run_id, notify_on_complete=True)
    r = client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": f"{run_id}-done", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    [note] = r.json()["notifications"]
    return str(note["id"])


def ask(
    client: TestClient,
    creds: TenantCreds,
    run_id: str,
    request_id: str,
    kind: str = "approval",
    **extra: Any,
) -> dict[str, Any]:
    """Open an input request; returns the API's answer (request, run, notifications)."""
    body = {
        "input_request_id": request_id,
        "kind": kind,
        "summary": f"Deploy {request_id} to staging?",
        "details": {"diff": f"{PLANTED}-diff"},
        **extra,
    }
    r = client.post(
        f"/v1/runs/{run_id}/input-requests", json=body, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def open_ask(client: TestClient, creds: TenantCreds, run_id: str, request_id: str) -> str:
    """A working run that asks for approval: the notification id."""
    make_run(client, creds, run_id)
    opened = ask(client, creds, run_id, request_id)
    [note] = opened["notifications"]
    return str(note["id"])


def note_state(client: TestClient, token: str, note_id: str) -> str:
    r = client.get(f"/v1/notifications/{note_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return str(r.json()["state"])


def request_state(client: TestClient, token: str, request_id: str) -> str:
    r = client.get(f"/v1/input-requests/{request_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return str(r.json()["input_request"]["state"])


# --- sign-in links and sessions --------------------------------------------------------


def test_sign_in_link_opens_a_session_once(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A sign-in link sets an HttpOnly, SameSite=Lax, expiring cookie and lands on the
    inbox; the same link a second time is refused with a page saying it was used."""
    token = link_for(core, creds.tenant_id, creds.owner_id)
    r = client.get(f"/auth/{token}", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/"
    [cookie] = [c for c in r.headers.get_list("set-cookie") if c.startswith("rb_session=")]
    assert cookie.startswith("rb_session=rbs_")
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=lax", "path=/", "max-age=43200"} <= flags
    assert "secure" not in flags  # public_url is http here; see the https test
    assert client.get("/").status_code == 200

    again = other_browser(client).get(f"/auth/{token}", follow_redirects=False)
    assert again.status_code == 410
    assert "already used" in again.text
    assert "set-cookie" not in again.headers


def test_expired_and_unknown_links_are_refused(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """A link older than 15 minutes is refused (410), and a made-up one (404); neither
    signs anyone in."""
    clock.freeze()
    token = link_for(core, creds.tenant_id, creds.owner_id)
    clock.advance(15 * 60 + 1)
    r = client.get(f"/auth/{token}", follow_redirects=False)
    assert r.status_code == 410
    assert "expired" in r.text
    r = client.get("/auth/rbl_not-a-real-link", follow_redirects=False)
    assert r.status_code == 404
    assert "not a valid sign-in link" in r.text
    assert client.get("/", follow_redirects=False).status_code == 303  # still signed out


def test_cookie_is_secure_when_served_over_https(tmp_path: Path, db_url: str, clock: Clock) -> None:
    """With an https public URL the session cookie is marked Secure."""
    rb = build(
        make_settings(tmp_path, db_url, public_url="https://runbell.example"),
        clock=clock,
        migrate=False,
    )
    try:
        from runbell.testing import make_tenant

        creds = make_tenant(rb)
        token = link_for(rb, creds.tenant_id, creds.owner_id)
        with TestClient(create_app(rb, bridge=False), base_url="https://runbell.example") as c:
            r = c.get(f"/auth/{token}", follow_redirects=False)
        assert r.status_code == 303
        [cookie] = [c for c in r.headers.get_list("set-cookie") if "rb_session=" in c]
        assert "secure" in {p.strip().lower() for p in cookie.split(";")}
    finally:
        rb.db.dispose()


@pytest.mark.parametrize("path", ["/", "/settings", "/runs/anything", "/n/ntf_whatever"])
def test_pages_without_a_session_redirect_to_sign_in(client: TestClient, path: str) -> None:
    r = client.get(path, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == f"/login?next={path}"


def test_deep_link_survives_sign_in(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """Opening /n/{id} signed out, then the sign-in link, lands on that notification."""
    note_id = finish(client, creds, "deep-1")
    r = client.get(f"/n/{note_id}", follow_redirects=False)
    target = r.headers["location"]
    assert target == f"/login?next=/n/{note_id}"
    assert client.get(target).status_code == 200
    # A link from an administrator names no destination: the browser remembers it.
    token = link_for(core, creds.tenant_id, creds.owner_id)
    r = client.get(f"/auth/{token}", follow_redirects=False)
    assert r.headers["location"] == f"/n/{note_id}"
    page = client.get(r.headers["location"])
    assert page.status_code == 200
    assert "Title of deep-1" in page.text


@pytest.mark.parametrize(
    "target",
    ["//evil.example/x", "https://evil.example/", "/\\evil.example", "evil.example", "/\r\nX: y"],
)
def test_sign_in_never_redirects_off_site(
    client: TestClient, core: Core, creds: TenantCreds, target: str
) -> None:
    token = link_for(core, creds.tenant_id, creds.owner_id)
    r = client.get(f"/auth/{token}", params={"next": target}, follow_redirects=False)
    location = r.headers["location"]
    assert not urlsplit(location).netloc and not location.startswith("//")
    assert location == "/"


def test_safe_next_keeps_only_same_site_paths() -> None:
    assert safe_next("/runs/a?x=1") == "/runs/a?x=1"
    for bad in ("//evil.example", "http://evil.example", "/\\evil", "javascript:x", "", None):
        assert safe_next(bad) == "/"


def test_sign_out_ends_the_session(client: TestClient, owner_browser: str) -> None:
    r = client.post("/logout", data={"csrf_token": owner_browser}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/login?signed_out=1"
    assert client.get("/", follow_redirects=False).status_code == 303


def test_revoked_member_is_signed_out_at_once(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Revoking a membership ends its browser sessions on the next request: pages
    redirect to sign-in (which says why) and the API answers 401."""
    bob_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    bob = other_browser(client)
    sign_in(bob, core, creds.tenant_id, bob_id)
    assert bob.get("/").status_code == 200
    members.revoke_member(core, creds.tenant_id, bob_id)
    r = bob.get("/", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=/"
    login = bob.get("/login")
    assert "Your session has ended or your access changed" in login.text
    assert bob.get("/v1/notifications").status_code == 401


# --- the sign-in page ------------------------------------------------------------------


def test_login_page_without_email_points_to_the_cli(client: TestClient) -> None:
    page = client.get("/login")
    assert page.status_code == 200
    assert "runbell user login-link" in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_emailed_sign_in_link_does_not_reveal_members(
    tmp_path: Path, db_url: str, clock: Clock
) -> None:
    """With SMTP set, a member and a stranger get the same answer; only the member gets
    mail, and the emailed link signs them in and keeps where they were going."""
    with SmtpPeer() as smtp:
        rb = build(
            make_settings(
                tmp_path,
                db_url,
                smtp_host="127.0.0.1",
                smtp_port=smtp.port,
                smtp_from="Runbell <rb@runbell.test>",
            ),
            clock=clock,
            migrate=False,
        )
        try:
            from runbell.testing import make_tenant

            creds = make_tenant(rb)
            with TestClient(create_app(rb, bridge=False)) as c:
                form = c.get("/login?next=/settings")
                csrf = field(form.text, "csrf_token")
                answers = []
                for address in (creds.owner_email, "stranger@elsewhere.test"):
                    r = c.post(
                        "/login",
                        data={"csrf_token": csrf, "email": address, "next": "/settings"},
                    )
                    assert r.status_code == 200
                    answers.append(r.text)
                assert answers[0] == answers[1]
                assert "If that address belongs to a member" in answers[0]
                [mail] = smtp.parsed()
                assert mail["To"] == creds.owner_email
                text = mail_text(mail)
                link = re.search(r"http://testserver/auth/\S+", text)
                assert link, text
                r = c.get(link.group(0), follow_redirects=False)
                assert r.status_code == 303
                assert r.headers["location"] == "/settings"
                refused = c.post(
                    "/login", data={"csrf_token": "forged", "email": creds.owner_email}
                )
                assert refused.status_code == 403
                assert len(smtp.parsed()) == 1
        finally:
            rb.db.dispose()


def test_cli_prints_a_working_sign_in_link(
    client: TestClient,
    creds: TenantCreds,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from runbell.cli import main

    monkeypatch.setenv("RUNBELL_DATABASE_URL", settings.resolved_database_url())
    monkeypatch.setenv("RUNBELL_SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("RUNBELL_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("RUNBELL_PUBLIC_URL", "http://testserver")
    code = main(["user", "login-link", creds.owner_email, "--tenant", creds.tenant_id])
    out, err = capsys.readouterr()
    assert code == 0, err
    link = re.search(r"http://testserver/auth/\S+", out)
    assert link, out
    r = client.get(link.group(0), follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/").status_code == 200


def test_first_start_prints_a_sign_in_link(client: TestClient, core: Core) -> None:
    first = bootstrap_if_empty(core, "first@example.com")
    assert first is not None
    text = welcome_text(first, "http://testserver")
    link = re.search(r"http://testserver/auth/\S+", text)
    assert link, text
    assert "curl" in text  # the API walkthrough stays
    r = client.get(link.group(0), follow_redirects=False)
    assert r.status_code == 303
    assert "first@example.com" in client.get("/").text


# --- CSRF ------------------------------------------------------------------------------


def test_forms_without_the_csrf_token_change_nothing(
    client: TestClient, core: Core, creds: TenantCreds, owner_browser: str
) -> None:
    """Acknowledge, settings, answer and sign-out refuse a missing or wrong token with a
    403 page, and leave everything as it was."""
    note_id = finish(client, creds, "csrf-1")
    ask_note = open_ask(client, creds, "csrf-2", "req-csrf")
    version = client.get("/v1/runs/csrf-2", headers=bearer(creds.runtime_key)).json()["version"]
    prefs_before = client.get("/v1/me/preferences", headers=bearer(creds.owner_token)).json()
    forms = [
        (f"/notifications/{note_id}/ack", {"next": "/"}),
        ("/settings", {"timezone": "Asia/Tokyo", "consent_chat": "urgent"}),
        (
            "/runs/csrf-2/input-requests/req-csrf/respond",
            {
                "decision": "approve",
                "expected_run_version": str(version),
                "expected_request_version": "1",
                "idempotency_key": "k-csrf",
            },
        ),
        ("/settings/chat", {"url": "json://127.0.0.1:9/x"}),
        ("/logout", {}),
    ]
    for path, data in forms:
        for token in (None, "wrong-token"):
            body = dict(data) if token is None else {**data, "csrf_token": token}
            r = client.post(path, data=body, follow_redirects=False)
            assert r.status_code == 403, (path, token, r.text)
            assert "Nothing was changed" in r.text
    assert note_state(client, creds.owner_token, note_id) == "open"
    assert note_state(client, creds.owner_token, ask_note) == "open"
    assert request_state(client, creds.owner_token, "req-csrf") == "pending"
    assert client.get("/v1/me/preferences", headers=bearer(creds.owner_token)).json() == (
        prefs_before
    )
    chats = client.get("/v1/me/chat-destinations", headers=bearer(creds.owner_token)).json()
    assert chats["destinations"] == []
    assert client.get("/", follow_redirects=False).status_code == 200  # still signed in


def test_cookie_authenticated_api_calls_need_the_csrf_header(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    """The session cookie works for the JSON API; unsafe calls also need X-CSRF-Token
    (except device receipts, which are telemetry)."""
    note_id = finish(client, creds, "api-1")
    assert client.get("/v1/notifications").status_code == 200
    assert client.get("/v1/events?after=earliest").status_code == 200
    r = client.post(f"/v1/notifications/{note_id}/ack")
    assert r.status_code == 403
    assert "X-CSRF-Token" in r.json()["detail"]
    r = client.post(f"/v1/notifications/{note_id}/ack", headers={"X-CSRF-Token": "nope"})
    assert r.status_code == 403
    assert note_state(client, creds.owner_token, note_id) == "open"
    r = client.post(
        f"/v1/notifications/{note_id}/receipts", json={"kind": "displayed", "channel": "webpush"}
    )
    assert r.status_code == 201, r.text
    assert note_state(client, creds.owner_token, note_id) == "open"  # a receipt decides nothing
    r = client.post(f"/v1/notifications/{note_id}/ack", headers={"X-CSRF-Token": owner_browser})
    assert r.status_code == 200
    assert r.json()["state"] == "acknowledged"


def test_bearer_auth_ignores_the_cookie(
    client: TestClient, core: Core, creds: TenantCreds, owner_browser: str
) -> None:
    """A program's Authorization header wins over a browser cookie (no CSRF involved)."""
    bob_id, bob_token = add_user(core, creds.tenant_id, "bob@acme.test")
    me = client.get("/v1/me", headers=bearer(bob_token)).json()
    assert me["user_id"] == bob_id
    assert client.get("/v1/me").json()["user_id"] == creds.owner_id


# --- inbox -----------------------------------------------------------------------------


def test_inbox_shows_neutral_items_grouped_and_acknowledges(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    """Open items appear with their neutral summary, urgency and unread mark; a pending
    approval sits under "Needs you", a finished run under "For your information";
    acknowledging moves it out of the open lists."""
    done = finish(client, creds, "inbox-done")
    asking = open_ask(client, creds, "inbox-ask", "req-inbox")
    page = client.get("/").text
    needs, fyi = page.split('id="needs-you"')[1].split('id="fyi"')
    assert f'id="n-{asking}"' in needs and f'id="n-{done}"' not in needs
    assert f'id="n-{done}"' in fyi.split('id="earlier"')[0]
    assert "A run needs your input" in needs
    assert "A run finished" in fyi
    assert "Title of inbox-ask" in needs  # run titles group the items (signed in)
    assert "Time-sensitive" in needs or "Normal" in needs
    assert "(unread)" in page
    assert PLANTED not in page  # details stay on the run page

    r = client.post(
        f"/notifications/{done}/ack",
        data={"csrf_token": owner_browser, "next": "/"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/"
    page = client.get("/").text
    open_part = page.split('id="earlier"')[0]
    assert f'id="n-{done}"' not in open_part
    assert f'id="n-{done}"' in page.split('id="earlier"')[1]  # listed under Earlier
    assert note_state(client, creds.owner_token, done) == "acknowledged"


def test_inbox_carries_the_feed_position_for_live_updates(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    """The page names the feed cursor it was rendered at, so the live stream resumes
    from there (no gap between render and subscribe)."""
    finish(client, creds, "cursor-1")
    page = client.get("/").text
    cursor = re.search(r'data-cursor="(\d+)"', page)
    assert cursor
    events = client.get(f"/v1/events?after={cursor.group(1)}").json()
    assert events["events"] == []
    finish(client, creds, "cursor-2")
    later = client.get(f"/v1/events?after={cursor.group(1)}").json()["events"]
    assert "notification.created" in {e["type"] for e in later}


# --- privacy of details ----------------------------------------------------------------


def test_details_never_reach_someone_who_cannot_see_the_run(
    client: TestClient, core: Core, creds: TenantCreds, owner_browser: str
) -> None:
    """Another member sees neither the run page, nor the owner's deep link, nor anything
    of its details; the sign-in page shows nothing of it either."""
    note_id = open_ask(client, creds, "private-1", "req-private")
    owner_page = client.get("/runs/private-1").text
    assert PLANTED in owner_page  # the owner, signed in, sees the details

    bob_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    bob = other_browser(client)
    sign_in(bob, core, creds.tenant_id, bob_id)
    pages = {
        "/runs/private-1": 404,
        f"/n/{note_id}": 404,
        "/": 200,
        "/settings": 200,
        "/runs/no-such-run": 404,
        "/n/ntf_no_such_note": 404,
    }
    texts = []
    for path, status in pages.items():
        r = bob.get(path)
        assert r.status_code == status, path
        assert PLANTED not in r.text, path
        assert "Title of private-1" not in r.text, path
        texts.append(r.text)
    assert texts[0] == texts[1] == texts[4] == texts[5]  # the same page: nothing leaks
    assert "You no longer have access to this" in texts[0]
    assert PLANTED not in other_browser(client).get("/login").text


def test_deep_link_after_access_is_lost(client: TestClient, creds: TenantCreds, core: Core) -> None:
    """A member named on a run gets its link; once the run no longer names them, the
    link says they no longer have access, and shows no details."""
    bob_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    make_run(client, creds, "shared-1", owner="bob@acme.test", notify_on_complete=True)
    r = client.post(
        "/v1/runs/shared-1/signals",
        json={"event_id": "s1", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    [note] = r.json()["notifications"]
    bob = other_browser(client)
    sign_in(bob, core, creds.tenant_id, bob_id)
    assert PLANTED in bob.get(f"/n/{note['id']}").text
    # Ownership moves away from bob: he may no longer see the run.
    with core.db.transaction() as tx:
        from runbell.domain.people import FULL
        from runbell.store import access

        access.set_run_people(tx.conn, creds.tenant_id, "shared-1", {creds.owner_id: FULL})
    r = bob.get(f"/n/{note['id']}")
    assert r.status_code == 403
    assert "You no longer have access to this" in r.text
    assert PLANTED not in r.text


# --- deep links and the run page -------------------------------------------------------


def test_deep_link_opens_the_run_with_the_notification_in_context(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    """/n/{id} shows the run now: title, objective, owner, state and version, the pending
    decision with its details, the timeline and the notification's deliveries; opening
    it is recorded as seen, not as a decision."""
    make_run(client, creds, "ctx-1", objective="Ship the login fix")
    opened = ask(client, creds, "ctx-1", "req-ctx")
    [note] = opened["notifications"]
    page = client.get(f"/n/{note['id']}")
    assert page.status_code == 200
    text = page.text
    for expected in (
        "Title of ctx-1",
        "Ship the login fix",
        creds.owner_email,
        "Waiting for input",
        f'<span id="run-version">{opened["run"]["version"]}</span>',
        "Deploy req-ctx to staging?",
        f"{PLANTED}-diff",  # request details, signed in
        "You opened this from a notification",
        "Timeline",
        "Inbox",  # the inbox delivery of this notification
        'id="approve"',
        'id="reject"',
    ):
        assert expected in text, expected
    assert 'id="not-actionable"' not in text
    after = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token))
    assert after.json()["first_seen_at"] is not None
    assert after.json()["state"] == "open"  # opening is not approval
    assert request_state(client, creds.owner_token, "req-ctx") == "pending"


def test_deep_link_to_a_superseded_request_says_why(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    make_run(client, creds, "sup-1")
    [first] = ask(client, creds, "sup-1", "req-old")["notifications"]
    ask(client, creds, "sup-1", "req-new")
    page = client.get(f"/n/{first['id']}").text
    banner = page.split('id="not-actionable"')[1].split("</div>")[0]
    assert "A newer request replaced this one" in banner
    assert "Below is the run as it is now" in banner
    # The current request is offered, bound to the current versions.
    assert "Deploy req-new to staging?" in page
    assert "/input-requests/req-new/respond" in page
    assert "/input-requests/req-old/respond" not in page


def test_deep_link_to_an_answered_request_says_who_answered(
    client: TestClient, core: Core, creds: TenantCreds, owner_browser: str
) -> None:
    make_run(client, creds, "ans-1")
    opened = ask(client, creds, "ans-1", "req-ans")
    [note] = opened["notifications"]
    r = client.post(
        "/v1/input-requests/req-ans/responses",
        json={
            "decision": "reject",
            "expected_run_version": opened["run"]["version"],
            "expected_request_version": 1,
        },
        headers={**bearer(creds.owner_token), "Idempotency-Key": "phone-1"},
    )
    assert r.status_code == 200, r.text
    page = client.get(f"/n/{note['id']}").text
    banner = page.split('id="not-actionable"')[1].split("</div>")[0]
    assert "already answered by you" in banner
    assert "(reject)" in banner
    assert 'id="respond-form"' not in page


def test_times_are_shown_in_the_persons_timezone(
    client: TestClient, creds: TenantCreds, owner_browser: str, clock: Clock
) -> None:
    now = clock.freeze(datetime(2026, 6, 1, 12, 0, tzinfo=UTC))
    r = client.put(
        "/v1/me/preferences", json={"timezone": "Asia/Tokyo"}, headers=bearer(creds.owner_token)
    )
    assert r.status_code == 200
    make_run(client, creds, "tz-1")
    ask(client, creds, "tz-1", "req-tz", expires_at=(now + timedelta(minutes=30)).isoformat())
    page = client.get("/runs/tz-1").text
    assert "1 Jun 2026, 21:30 JST" in page  # 12:30 UTC, in Tokyo
    assert "in 30 minutes" in page
    assert 'data-countdown="2026-06-01T12:30:00Z"' in page


# --- answering from the run page -------------------------------------------------------


def respond_form(page: str) -> dict[str, str]:
    return {
        name: field(page, name)
        for name in (
            "csrf_token",
            "expected_run_version",
            "expected_request_version",
            "idempotency_key",
        )
    }


def test_approving_from_the_page_records_one_answer(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    """Approve answers once and says so; submitting the same form again replays the
    answer instead of answering twice."""
    note_id = open_ask(client, creds, "ok-1", "req-ok")
    page = client.get(f"/n/{note_id}").text
    form = {**respond_form(page), "decision": "approve"}
    url = "/runs/ok-1/input-requests/req-ok/respond"
    r = client.post(url, data=form, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/runs/ok-1?answered=req-ok"
    done = client.get(r.headers["location"]).text
    assert "Your answer was recorded: approved" in done
    assert request_state(client, creds.owner_token, "req-ok") == "answered"
    assert note_state(client, creds.owner_token, note_id) == "resolved"

    twice = client.post(url, data=form, follow_redirects=False)  # a double submit
    assert twice.status_code == 303
    run = client.get("/v1/runs/ok-1", headers=bearer(creds.runtime_key)).json()
    assert run["state"] == "working"
    transitions_to_working = [
        e
        for e in client.get("/v1/events?after=earliest&limit=500").json()["events"]
        if e["type"] == "input_request.answered"
    ]
    assert len(transitions_to_working) == 1


def test_choice_and_text_answers(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    make_run(client, creds, "pick-1")
    ask(
        client,
        creds,
        "pick-1",
        "req-pick",
        kind="choice",
        options=[{"id": "blue", "label": "Blue deploy"}, {"id": "green", "label": "Green"}],
    )
    page = client.get("/runs/pick-1").text
    assert 'type="radio" name="value"' in page and "Blue deploy" in page
    empty = client.post(
        "/runs/pick-1/input-requests/req-pick/respond",
        data={**respond_form(page), "decision": "answer"},
    )
    assert empty.status_code == 422
    assert "Choose an option or write an answer first" in empty.text
    r = client.post(
        "/runs/pick-1/input-requests/req-pick/respond",
        data={**respond_form(page), "decision": "answer", "value": "blue"},
    )
    assert r.status_code == 200
    assert "Your answer was recorded: “Blue deploy”" in r.text

    make_run(client, creds, "say-1")
    ask(client, creds, "say-1", "req-say", kind="text")
    page = client.get("/runs/say-1").text
    assert '<textarea id="answer-text" name="value"' in page
    r = client.post(
        "/runs/say-1/input-requests/req-say/respond",
        data={**respond_form(page), "decision": "answer", "value": "use the <b>old</b> key"},
    )
    assert r.status_code == 200
    assert "use the &lt;b&gt;old&lt;/b&gt; key" in r.text  # escaped, never markup


def test_an_answer_from_a_stale_page_is_refused_with_the_current_state(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    """A form rendered before the run moved on is refused in plain words; nothing is
    recorded and the page shows what is current."""
    note_id = open_ask(client, creds, "stale-1", "req-stale")
    page = client.get(f"/n/{note_id}").text
    old_form = {**respond_form(page), "decision": "approve"}
    ask(client, creds, "stale-1", "req-stale-2")  # a newer request replaces it
    r = client.post("/runs/stale-1/input-requests/req-stale/respond", data=old_form)
    assert r.status_code == 409
    refused = r.text.split('id="action-refused"')[1].split("</div>")[0]
    assert "A newer request replaced this one." in refused
    assert "Your answer was not recorded and nothing ran" in refused
    assert request_state(client, creds.owner_token, "req-stale") == "superseded"
    assert request_state(client, creds.owner_token, "req-stale-2") == "pending"
    assert "Deploy req-stale-2 to staging?" in r.text


def test_answered_on_another_device_is_refused_here(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    note_id = open_ask(client, creds, "dev-1", "req-dev")
    page = client.get(f"/n/{note_id}").text
    form = respond_form(page)
    other = {**form, "idempotency_key": "from-the-phone"}
    assert (
        client.post(
            "/runs/dev-1/input-requests/req-dev/respond",
            data={**other, "decision": "reject"},
            follow_redirects=False,
        ).status_code
        == 303
    )
    r = client.post(
        "/runs/dev-1/input-requests/req-dev/respond", data={**form, "decision": "approve"}
    )
    assert r.status_code == 409
    assert "This request was already answered by you" in r.text
    r = client.get("/v1/input-requests/req-dev", headers=bearer(creds.owner_token)).json()
    assert r["input_request"]["decision"] == "reject"


def test_a_member_who_may_not_answer_sees_no_form_and_is_refused(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """An admin member may see every run but answers only when the run names them."""
    admin_id, _ = add_user(core, creds.tenant_id, "admin@acme.test", role="admin")
    make_run(client, creds, "auth-1")
    opened = ask(client, creds, "auth-1", "req-auth")
    admin = other_browser(client)
    csrf = sign_in(admin, core, creds.tenant_id, admin_id)
    page = admin.get("/runs/auth-1").text
    assert "You may see this run but not answer its requests" in page
    assert 'id="respond-form"' not in page
    r = admin.post(
        "/runs/auth-1/input-requests/req-auth/respond",
        data={
            "csrf_token": csrf,
            "decision": "approve",
            "expected_run_version": str(opened["run"]["version"]),
            "expected_request_version": "1",
            "idempotency_key": "admin-try",
        },
    )
    assert r.status_code == 403
    assert "You may not answer this request" in r.text
    assert request_state(client, creds.owner_token, "req-auth") == "pending"


# --- settings --------------------------------------------------------------------------


def test_settings_change_preferences_like_the_api(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    page = client.get("/settings").text
    assert creds.owner_email in page
    assert 'id="consent-email-normal"' in page and 'id="enable-push"' in page
    r = client.post(
        "/settings",
        data={
            "csrf_token": owner_browser,
            "consent_email": ["urgent"],
            "consent_webpush": ["time_sensitive", "urgent"],
            "quiet_start_0": "22:00",
            "quiet_end_0": "07:00",
            "timezone": "Europe/Paris",
        },
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert "saved" in client.get(r.headers["location"]).text
    prefs = client.get("/v1/me/preferences", headers=bearer(creds.owner_token)).json()
    assert prefs["consent"]["email"] == ["urgent"]
    assert prefs["consent"]["webpush"] == ["time_sensitive", "urgent"]
    assert prefs["consent"]["chat"] == []
    assert prefs["quiet_hours"] == [{"start": "22:00", "end": "07:00"}]
    assert prefs["timezone"] == "Europe/Paris"
    again = client.get("/settings").text
    assert 'id="consent-email-urgent" name="consent_email" value="urgent" checked' in again
    assert 'value="Europe/Paris"' in again


def test_settings_refuse_a_bad_timezone_and_keep_what_was_typed(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    before = client.get("/v1/me/preferences", headers=bearer(creds.owner_token)).json()
    r = client.post(
        "/settings",
        data={"csrf_token": owner_browser, "timezone": "Mars/Olympus", "consent_email": "low"},
    )
    assert r.status_code == 422
    assert "Unknown IANA timezone" in r.text
    assert 'value="Mars/Olympus"' in r.text
    after = client.get("/v1/me/preferences", headers=bearer(creds.owner_token)).json()
    assert after == before


def test_settings_chat_destinations(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    r = client.post(
        "/settings/chat",
        data={"csrf_token": owner_browser, "url": "mailto://x@example.com", "label": "no"},
    )
    assert r.status_code == 422
    assert "That chat destination was not added" in r.text
    r = client.post(
        "/settings/chat",
        data={
            "csrf_token": owner_browser,
            "url": "ntfys://ntfy.sh/runbell-topic-x",
            "label": "My phone",
        },
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    page = client.get(r.headers["location"]).text
    assert "My phone" in page and "runbell-topic-x" not in page  # the URL is a secret
    [dest] = client.get("/v1/me/chat-destinations", headers=bearer(creds.owner_token)).json()[
        "destinations"
    ]
    r = client.post(
        f"/settings/chat/{dest['id']}/delete",
        data={"csrf_token": owner_browser},
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert (
        client.get("/v1/me/chat-destinations", headers=bearer(creds.owner_token)).json()[
            "destinations"
        ]
        == []
    )


def test_browser_registers_its_push_subscription_with_the_session(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    """What the settings page's script does after the permission click: read the VAPID
    key and register the subscription with the session cookie and CSRF header."""
    key = client.get("/v1/push/vapid-public-key").json()["public_key"]
    assert len(key) > 80
    sub = {
        "endpoint": "https://push.example.net/wpush/abc123",
        "expirationTime": None,
        "keys": {"p256dh": "B" + "x" * 86, "auth": "a" * 22},
        "user_agent": "Test Browser",
    }
    assert client.post("/v1/me/push-subscriptions", json=sub).status_code == 403
    r = client.post("/v1/me/push-subscriptions", json=sub, headers={"X-CSRF-Token": owner_browser})
    assert r.status_code == 201, r.text
    page = client.get("/settings").text
    assert "Test Browser" in page
    r = client.post(
        f"/settings/push/{r.json()['id']}/delete",
        data={"csrf_token": owner_browser},
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert "Test Browser" not in client.get("/settings").text


# --- static files and the service worker ----------------------------------------------


def test_service_worker_and_assets_are_served(client: TestClient) -> None:
    sw = client.get("/sw.js")
    assert sw.status_code == 200
    assert sw.headers["content-type"].startswith("text/javascript")
    assert sw.headers["cache-control"] == "no-cache"
    for handler in ("push", "notificationclick", "notificationclose", "runbellUrlFor"):
        assert handler in sw.text
    js = client.get("/static/app.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert client.get("/static/app.css").headers["content-type"].startswith("text/css")


def test_readding_a_revoked_member_does_not_revive_old_sessions(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Revocation ends browser sessions for good: re-adding the person later does not
    bring a (possibly copied) old cookie back to life."""
    from runbell.store import accounts

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    assert client.get("/", follow_redirects=False).status_code == 200
    members.revoke_member(core, creds.tenant_id, creds.owner_id)
    with core.db.transaction() as tx:
        accounts.add_member(tx.conn, creds.tenant_id, creds.owner_id, "owner", tx.now)
    r = client.get("/", follow_redirects=False)
    assert r.status_code in (302, 303) and "/login" in r.headers["location"]


# --- the icon and the API reference ---------------------------------------------------


def test_favicon_is_an_icon(client: TestClient) -> None:
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"
    svg = client.get("/static/favicon.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert 'href="/favicon.ico"' in client.get("/login").text


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_api_reference_loads_nothing_from_another_site(client: TestClient, path: str) -> None:
    """The offline rendering itself is in tests/browser/test_api_docs.py; here: every
    script and stylesheet the page names is a path on this server, and is served."""
    page = client.get(path)
    assert page.status_code == 200
    assert page.headers["content-security-policy"].startswith(
        "default-src 'self'; script-src 'self';"
    )
    urls = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assets = [u for u in urls if u.endswith((".js", ".css")) or ".js?" in u or ".css?" in u]
    assert len(assets) >= 2, urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
    for url in assets:
        r = client.get(url)
        assert r.status_code == 200, url
        assert len(r.content) > 100, url
    assert "<script>" not in page.text  # nothing inline for the CSP to refuse


# --- why the sign-in page is shown ----------------------------------------------------


@pytest.mark.parametrize(
    ("next_path", "why"),
    [
        ("/n/ntf_123", "Sign in to see the run this link points at."),
        ("/runs/deploy-1", "Sign in to see the run this link points at."),
        ("/settings", "Sign in to change your notification settings."),
        ("/", None),
    ],
)
def test_sign_in_page_says_why_it_is_shown(
    client: TestClient, next_path: str, why: str | None
) -> None:
    page = client.get("/login", params={"next": next_path}).text
    if why is None:
        assert 'id="sign-in-why"' not in page
    else:
        assert why in page.split('id="sign-in-why"')[1].split("</p>")[0]
    # Not a demo server: nothing about a demo mailbox.
    assert "demo-mailbox-hint" not in page


# --- the run page's deliveries and progress ---------------------------------------------


@pytest.mark.usefixtures("mailing")
def test_inbox_row_says_it_is_the_notification_itself(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    """The inbox "delivery" is the record itself, made with the run's change: the page says
    so instead of "Delivered · 0 attempts"; other channels count their attempts."""
    note_id = open_ask(client, creds, "rows-1", "req-rows")
    page = client.get(f"/n/{note_id}").text
    table = page.split('class="deliveries"')[1].split("</table>")[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)
    cells = [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S) for row in rows]
    assert cells[0] == ["Channel", "Status", "Attempts"]
    inbox = [c for c in cells if c[0] == "Inbox"]
    assert inbox == [
        ["Inbox", "In your Runbell inbox: this is the notification itself, so nothing is sent"]
    ]
    assert 'colspan="2"' in table
    others = [c for c in cells[1:] if c[0] != "Inbox"]
    assert others, "email at least (queued: an SMTP relay is configured)"
    for channel, _status, attempts in others:
        assert attempts == "none" or (attempts.isdigit() and int(attempts) > 0), (channel, attempts)


def test_progress_note_shows_while_running_only(
    client: TestClient, creds: TenantCreds, owner_browser: str
) -> None:
    make_run(client, creds, "prog-1")
    r = client.post(
        "/v1/runs/prog-1/progress",
        json={"message": "running tests", "counts": {"done": 2, "total": 5, "unit": "files"}},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 202, r.text
    page = client.get("/runs/prog-1").text
    assert "Last progress note" in page
    assert "running tests (2 of 5 files)" in page
    assert '<time datetime="' in page.split('id="run-progress"')[1].split("</dd>")[0]
    done = client.post(
        "/v1/runs/prog-1/signals",
        json={"event_id": "prog-1-done", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    assert done.status_code == 200, done.text
    page = client.get("/runs/prog-1").text
    assert "Last progress note" not in page and "running tests" not in page
