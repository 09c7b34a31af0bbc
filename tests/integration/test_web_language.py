"""Languages (issue 19 item 6): what a person reads is in their language, with dates in
their timezone written their language's way.

Before sign-in the browser's ``Accept-Language`` decides (the sign-in page, the pages a
sign-in link answers with); once signed in, the person's ``locale`` preference (the
settings page or ``PUT /v1/me/preferences``). English stays the default. Pushes and
emails are worded in the recipient's language: checked on what the real RFC 8030
receiver decrypts and what aiosmtpd receives. SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds
from tests.channels.push_receiver import PushReceiver
from tests.conftest import Env, bearer
from tests.integration.test_escalation import ok, subscribe, vapid_key
from tests.integration.test_fallback import FALLBACK_RULE, fail_run
from tests.integration.test_web import ask, field, make_run, sign_in
from tests.peers import Dispatcher, SmtpPeer, mail_text

HTML_LANG = re.compile(r'<html lang="([a-z]+)">')


def lang_of(page: str) -> str:
    match = HTML_LANG.search(page)
    assert match, "every page names its language"
    return match.group(1)


def prefer(client: TestClient, token: str, **prefs: str) -> None:
    r = client.put("/v1/me/preferences", json=prefs, headers=bearer(token))
    assert r.status_code == 200, r.text


# --- before sign-in: Accept-Language ----------------------------------------------------


def test_the_sign_in_page_follows_accept_language(client: TestClient) -> None:
    german = client.get("/login", headers={"Accept-Language": "de-DE,de;q=0.9,en;q=0.8"})
    assert german.status_code == 200
    assert lang_of(german.text) == "de"
    assert "Bei Runbell anmelden" in german.text
    assert "Sign in to Runbell" not in german.text
    # Quality values count; a language we do not have falls back to English.
    assert lang_of(client.get("/login", headers={"Accept-Language": "fr, de;q=0.5"}).text) == "de"
    for header in ({"Accept-Language": "fr-FR, es;q=0.5"}, {}):
        page = client.get("/login", headers=header).text
        assert lang_of(page) == "en"
        assert "Sign in to Runbell" in page


def test_sign_in_link_pages_follow_accept_language(client: TestClient) -> None:
    r = client.get("/auth/not-a-real-token", headers={"Accept-Language": "de"})
    assert r.status_code == 404
    assert lang_of(r.text) == "de"
    assert "Dieser Anmeldelink kann nicht verwendet werden" in r.text
    assert "Das ist kein gültiger Anmeldelink." in r.text


def test_the_sign_in_email_is_in_the_language_of_the_page_that_asked(
    make_env: Callable[..., Env],
) -> None:
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        german = {"Accept-Language": "de"}
        csrf = field(env.client.get("/login", headers=german).text, "csrf_token")
        r = env.client.post(
            "/login",
            data={"csrf_token": csrf, "email": env.creds.owner_email, "next": "/"},
            headers=german,
        )
        assert r.status_code == 200
        assert "Sehen Sie in Ihre E-Mails" in r.text
        [mail] = smtp.parsed()
        assert mail["Subject"] == "Ihr Runbell-Anmeldelink"
        text = mail_text(mail)
        assert "Öffnen Sie diesen Link, um sich anzumelden." in text
        assert re.search(r"http://testserver/auth/\S+", text)


# --- signed in: the person's preference -----------------------------------------------


def test_the_settings_page_chooses_the_language(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/settings").text
    assert 'id="locale"' in page and '<option value="de" lang="de">Deutsch</option>' in page
    form = {"csrf_token": csrf, "timezone": "Europe/Berlin", "locale": "de"}
    r = client.post("/settings", data=form)
    assert r.status_code == 200, r.text  # followed the redirect to the saved page
    assert lang_of(r.text) == "de"
    assert "Einstellungen" in r.text
    assert '<option value="de" lang="de" selected>Deutsch</option>' in r.text
    # Signed in, the preference wins over the browser's header.
    inbox = client.get("/", headers={"Accept-Language": "en"})
    assert lang_of(inbox.text) == "de" and "Posteingang" in inbox.text
    refused = client.post("/settings", data={**form, "locale": "tlh"})
    assert refused.status_code == 422
    assert "Wählen Sie eine der angebotenen Sprachen." in refused.text
    back = client.post("/settings", data={**form, "locale": "en"})
    assert lang_of(back.text) == "en" and "Your notification settings were saved." in back.text


def test_a_german_reader_sees_the_inbox_and_the_run_page_in_german(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    now = clock.freeze(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    sign_in(client, core, creds.tenant_id, creds.owner_id)
    prefer(client, creds.owner_token, locale="de", timezone="Europe/Berlin")
    make_run(client, creds, "de-1")
    ask(client, creds, "de-1", "req-de", expires_at=(now + timedelta(minutes=30)).isoformat())

    inbox = client.get("/").text
    assert lang_of(inbox) == "de"
    assert "Posteingang" in inbox and "Braucht Sie" in inbox
    assert "Ein Lauf braucht Ihre Eingabe" in inbox  # the stored summary, worded for them
    # 12:00 UTC is 13:00 in Berlin in winter: German date, German zone name.
    assert "1. Dez. 2026, 13:00 MEZ" in inbox
    assert "in 30 Minuten" in inbox
    assert "Needs you" not in inbox and "Acknowledge" not in inbox

    run = client.get("/runs/de-1").text
    assert lang_of(run) == "de"
    for words in ("Entscheidung", "Genehmigen", "Ablehnen", "Über diesen Lauf", "Verlauf"):
        assert words in run, words
    assert "1. Dez. 2026, 13:30 MEZ" in run  # the request's expiry
    assert "Decision" not in run and "About this run" not in run

    # Someone else, in English, reads the same rows in English.
    prefer(client, creds.owner_token, locale="en")
    assert "Needs you" in client.get("/").text


# --- deliveries: worded for their recipient ---------------------------------------------


def test_push_and_email_to_a_german_recipient_are_german(make_env: Callable[..., Env]) -> None:
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        with (
            PushReceiver(expected_vapid_key=vapid_key(env)) as push,
            Dispatcher(env.core, env.clock) as d,
        ):
            env.clock.freeze(datetime.now(UTC).replace(microsecond=0))
            ok(env.client.put("/v1/policy", json={"rules": [FALLBACK_RULE]}, headers=env.admin))
            prefer(env.client, env.creds.owner_token, locale="de")
            sub = subscribe(env, push)

            fail_run(env, "de-push")
            while d.tick():
                pass
            (got,) = push.received
            assert got.payload["title"] == "Ein Lauf ist fehlgeschlagen"
            assert (
                got.payload["body"]
                == "Ein Lauf wurde mit einem Fehler beendet. Öffnen Sie Runbell für Details."
            )

            # The browser is gone: the rule falls back to email, German too.
            push.unsubscribe(sub)
            fail_run(env, "de-mail")
            while d.tick():
                pass
            [mail] = smtp.parsed()
            assert mail["Subject"] == "Ein Lauf ist fehlgeschlagen"
            text = mail_text(mail)
            assert "In Runbell öffnen:" in text
            assert "Ändern, welche E-Mails Sie erhalten:" in text
            html = mail.get_body(("html",)).get_content()
            assert '<html lang="de">' in html
            assert "tool crashed" not in text  # still neutral (invariant 11)
