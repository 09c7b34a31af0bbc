"""A signed-in German reader gets German on every page, whatever the browser sends
(issue 19 item 6): the person's stored ``locale`` wins over ``Accept-Language`` on each
page, however its viewer is resolved, and what a flow words in English (a refused answer)
is shown worded again in German, with its time in the person's timezone. SQLite and
PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds
from tests.integration.test_web import ask, make_run, respond_form, sign_in
from tests.integration.test_web_language import lang_of, prefer

ENGLISH = {"Accept-Language": "en"}

#: Each page, a German text it must show and its English counterpart it must not.
PAGES = [
    ("/", "Posteingang", "Needs you"),
    ("/runs/loc-1", "Über diesen Lauf", "About this run"),
    ("/settings", "Einstellungen", "Your notification settings"),
    ("/schedules", "Zeitpläne", ">Schedules<"),
    ("/people", "Personen", ">People<"),
    ("/runs", "Läufe", ">Runs<"),
]


@pytest.fixture
def german(client: TestClient, core: Core, creds: TenantCreds, clock: Clock) -> str:
    now = clock.freeze(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    sign_in(client, core, creds.tenant_id, creds.owner_id)
    prefer(client, creds.owner_token, locale="de", timezone="Europe/Berlin")
    make_run(client, creds, "loc-1")
    expires = (now + timedelta(minutes=30)).isoformat()
    opened = ask(client, creds, "loc-1", "req-loc", expires_at=expires)
    [note] = [n for n in opened["notifications"] if n["attention_type"] == "input_required"]
    return str(note["id"])


@pytest.mark.parametrize(("path", "de", "en"), PAGES, ids=[p for p, _de, _en in PAGES])
def test_each_page_is_in_the_persons_language_not_the_browsers(
    client: TestClient, german: str, path: str, de: str, en: str
) -> None:
    r = client.get(path, headers=ENGLISH)
    assert r.status_code == 200, r.text
    assert lang_of(r.text) == "de"
    assert de in r.text
    assert en not in r.text


def test_the_notification_deep_link_is_german(client: TestClient, german: str) -> None:
    r = client.get(f"/n/{german}", headers=ENGLISH)
    assert r.status_code == 200, r.text
    assert lang_of(r.text) == "de"
    assert "Genehmigen" in r.text and "Approve" not in r.text
    assert "1. Dez. 2026, 13:30 MEZ" in r.text  # the expiry, Berlin time, German words


def test_a_refused_answer_is_explained_in_german(
    client: TestClient, creds: TenantCreds, german: str
) -> None:
    page = client.get(f"/n/{german}", headers=ENGLISH).text
    form = {**respond_form(page), "decision": "approve"}
    form["expected_run_version"] = str(int(form["expected_run_version"]) - 1)
    r = client.post("/runs/loc-1/input-requests/req-loc/respond", data=form, headers=ENGLISH)
    assert r.status_code == 409, r.text
    assert lang_of(r.text) == "de"
    assert "Der Lauf hat sich geändert, seit diese Seite geladen wurde (Version" in r.text
    assert "The run changed since this page was loaded" not in r.text
    # The API keeps its problem details in English: they are for machines.
    api = client.post(
        "/v1/input-requests/req-loc/responses",
        json={
            "decision": "approve",
            "expected_run_version": int(form["expected_run_version"]),
            "expected_request_version": int(form["expected_request_version"]),
        },
        headers={
            "Authorization": f"Bearer {creds.owner_token}",
            "Idempotency-Key": "loc-api",
            **ENGLISH,
        },
    )
    assert api.status_code == 409, api.text
    assert api.json()["detail"].startswith("The run changed since this page was loaded")
