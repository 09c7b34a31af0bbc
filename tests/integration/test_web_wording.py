"""What the web app says, read as a person reads it (issue 16 row 18), through HTTP on
SQLite and PostgreSQL: the run page names the question asked, the person who approved,
the function that ran and what it returned — never ``input request ask-…``,
``__main__.push``, ``NoneType`` or a user id; each webhook row of a notification says
which message it was; the inbox's Earlier items name their run; the trail's
``closed_reason`` names the person; a wrong address in a browser is a page, not JSON;
and opening a run page marks its notifications seen (the demo's review waits for that).
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.conftest import bearer
from tests.integration.test_web import ask, make_run, sign_in

pytestmark = pytest.mark.usefixtures("db_url")


def answer(client: TestClient, creds: TenantCreds, request_id: str, decision: str) -> None:
    r = client.get(f"/v1/input-requests/{request_id}", headers=bearer(creds.owner_token))
    req = r.json()["input_request"]
    r = client.post(
        f"/v1/input-requests/{request_id}/responses",
        headers={**bearer(creds.owner_token), "Idempotency-Key": f"k-{request_id}"},
        json={
            "decision": decision,
            "expected_run_version": req["run_version"],
            "expected_request_version": req["version"],
        },
    )
    assert r.status_code == 200, r.text


def test_the_run_page_says_what_a_person_understands(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """What the SDK's requires_approval records (a request ``ask-…``, an operation on
    ``function __main__.push``, evidence ``approved_by: usr_…`` and ``returned:
    NoneType``), shown in words."""
    run_id = "words-1"
    make_run(client, creds, run_id)
    ask(client, creds, run_id, "ask-b1203f9c", summary="Allow push()?")
    answer(client, creds, "ask-b1203f9c", "approve")
    rt = bearer(creds.runtime_key)
    op = {"operation_id": "push-1a2b", "target": {"type": "function", "id": "__main__.push"}}
    r = client.post(
        f"/v1/runs/{run_id}/operations", json={"operations": [{**op, "intent": "push"}]}, headers=rt
    )
    assert r.status_code == 201, r.text
    for state, evidence in (
        ("sent", {"approved_by": creds.owner_id}),
        ("confirmed", {"returned": "NoneType"}),
    ):
        r = client.patch(
            f"/v1/runs/{run_id}/operations/push-1a2b",
            json={"state": state, "evidence": evidence},
            headers=rt,
        )
        assert r.status_code == 200, r.text

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get(f"/runs/{run_id}").text
    assert "asked “Allow push()?”" in page
    assert "Call push()" in page
    assert "finished, returned nothing" in page
    assert "the request was approved" in page
    for raw in ("input request ask-b1203f9c", "__main__.push", "NoneType", creds.owner_id):
        assert raw not in page, raw


def test_each_webhook_row_of_a_notification_says_which_message_it_was(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Two "Webhook Delivered" rows were two messages to one endpoint: the notification
    made, then closed. Each row says which; with two endpoints each also says where."""
    admin = bearer(creds.admin_key)
    for n, description in ((1, "billing sink"), (2, "audit sink")):
        r = client.post(
            "/v1/webhook-endpoints",
            json={"url": f"https://127.0.0.1:9/hook-{n}", "description": description},
            headers=admin,
        )
        assert r.status_code == 201, r.text
    run_id = "hooks-1"
    make_run(client, creds, run_id)
    ask(client, creds, run_id, "approve-hooks-1")
    answer(client, creds, "approve-hooks-1", "approve")

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get(f"/runs/{run_id}").text
    rows = re.findall(r"<tr><td>Webhook <span class=\"meta\">([^<]+)</span>", page)
    assert sorted(rows) == [
        "new notification to audit sink",
        "new notification to billing sink",
        "notification closed to audit sink",
        "notification closed to billing sink",
    ], rows


def test_inbox_earlier_items_name_their_run(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    titles = ["Deploy the API", "Rotate the keys"]
    for n, title in enumerate(titles):
        make_run(client, creds, f"earlier-{n}", title=title)
        ask(client, creds, f"earlier-{n}", f"approve-earlier-{n}")
        answer(client, creds, f"approve-earlier-{n}", "approve")
    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/").text
    earlier = page[page.index('id="earlier"') :]
    for n, title in enumerate(titles):
        assert f'<p class="item-run"><a href="/runs/earlier-{n}">{title}</a></p>' in earlier
    # Neutral texts stay neutral: the summary is still the lock-screen text.
    assert earlier.count("A run needs your input") == 2


def test_the_trail_names_the_person_who_closed_it(client: TestClient, creds: TenantCreds) -> None:
    make_run(client, creds, "trail-1")
    opened = ask(client, creds, "trail-1", "approve-trail-1")
    [note] = opened["notifications"]
    answer(client, creds, "approve-trail-1", "approve")
    trail = client.get(f"/v1/notifications/{note['id']}/trail", headers=bearer(creds.admin_key))
    assert trail.status_code == 200, trail.text
    assert trail.json()["closed_reason"] == f"answered by {creds.owner_email}"


def test_a_wrong_address_in_a_browser_is_a_page_and_json_for_programs(
    client: TestClient,
) -> None:
    page = client.get("/no-such-page", headers={"Accept": "text/html,*/*;q=0.8"})
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "<h1>There is no page here</h1>" in page.text and '<html lang="en">' in page.text
    for path, accept in (("/no-such-page", "*/*"), ("/v1/nothing", "text/html")):
        r = client.get(path, headers={"Accept": accept})
        assert r.status_code == 404
        assert r.headers["content-type"] == "application/problem+json", (path, r.text)


def test_opening_the_run_page_marks_its_notifications_seen(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    make_run(client, creds, "seen-1")
    opened = ask(client, creds, "seen-1", "approve-seen-1")
    [note] = opened["notifications"]

    def seen() -> str | None:
        r = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token))
        return r.json()["first_seen_at"]

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    # app.js fetching the page again for a live update is not a person opening it.
    client.get("/runs/seen-1", headers={"Sec-Fetch-Dest": "empty"})
    assert seen() is None
    client.get("/runs/seen-1", headers={"Sec-Fetch-Dest": "document"})
    assert seen() is not None
    # Opening is not deciding (invariant 10): the request still waits.
    r = client.get("/v1/input-requests/approve-seen-1", headers=bearer(creds.owner_token))
    assert r.json()["input_request"]["state"] == "pending"
