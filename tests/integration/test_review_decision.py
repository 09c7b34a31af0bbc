"""Honest pages and the review decision (issue 18 item 7): a completed run's badge comes
from its verified state and its ledger, what the runtime claims is labelled as its claim,
and a run in review puts its decision to the owner as a proper input request, bound to the
review's version. SQLite and PostgreSQL, through the HTTP API and the web app."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import bearer
from tests.integration.test_operations import (
    complete,
    declare,
    make_run,
    move,
    notes_of,
    op,
    snapshot,
    twelve,
)
from tests.integration.test_web import field, sign_in


def decide(
    client: TestClient,
    creds: TenantCreds,
    review: dict[str, Any],
    choice: str,
    key: str,
    token: str | None = None,
) -> Any:
    return client.post(
        f"/v1/input-requests/{review['id']}/responses",
        json={
            "decision": "answer",
            "value": choice,
            "expected_run_version": review["run_version"],
            "expected_request_version": review["version"],
        },
        headers={**bearer(token or creds.owner_token), "Idempotency-Key": key},
    )


def events(client: TestClient, creds: TenantCreds, kind: str) -> list[dict[str, Any]]:
    r = client.get("/v1/events", params={"after": 0}, headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["type"] == kind]


def test_nine_two_one_is_needs_review_with_a_decision_put_to_the_owner(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    twelve(client, creds, "launch-1")
    complete(client, creds, "launch-1", report={"summary": "All tasks moved to Friday"})
    shown = snapshot(client, creds, "launch-1")
    assert shown["badge"] == {
        "key": "needs-review",
        "label": "Needs review",
        "because": "9 confirmed, 2 conflicts, 1 uncertain",
    }
    review = shown["pending_review"]
    assert review is not None and review["kind"] == "choice"
    assert review["run_version"] == shown["version"] and review["blocks_work"] is False
    assert [o["id"] for o in review["options"]] == ["accept", "retry_conflicts", "wait", "revise"]
    assert review["summary"] == "Review the outcome: 9 confirmed, 2 conflicts, 1 uncertain"
    # The needs_review notification carries the decision: one notification, not two.
    [note] = notes_of(core, creds, "launch-1")
    assert note["attention_type"] == "needs_review"
    assert note["input_request_id"] == review["id"]
    inbox = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token))
    assert inbox.status_code == 200, inbox.text
    assert inbox.json()["actionable"] is True
    assert inbox.json()["actionable_reason"] == "awaiting your review decision"

    # The page: the badge is the ledger's, the runtime's words are labelled as its claim,
    # and the decision is offered — never "Nothing to decide".
    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/runs/launch-1").text
    assert 'data-badge="needs-review">Needs review</span>' in page
    assert "9 confirmed, 2 conflicts, 1 uncertain" in page
    assert "The agent reports:</span> All tasks moved to Friday" in page
    assert ">Completed</span>" not in page
    assert "Nothing to decide" not in page
    assert 'id="review-intro"' in page
    for choice in ("accept", "retry_conflicts", "wait", "revise"):
        assert f'value="{choice}"' in page

    # Decided from the page (another device), with the review's own versions.
    r = client.post(
        f"/runs/launch-1/input-requests/{review['id']}/respond",
        data={
            "csrf_token": field(page, "csrf_token"),
            "decision": "answer",
            "value": "retry_conflicts",
            "expected_run_version": field(page, "expected_run_version"),
            "expected_request_version": field(page, "expected_request_version"),
            "idempotency_key": field(page, "idempotency_key"),
        },
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    [decided] = events(client, creds, "run.review_decided")
    assert decided["data"]["choice"] == "retry_conflicts"
    assert decided["data"]["operations"] == {"conflict": ["op-10", "op-11"]}
    assert decided["data"]["decided_by"] == creds.owner_id
    [note] = notes_of(core, creds, "launch-1")
    assert note["state"] == "resolved"
    assert "decided: Ask the agent to retry" in note["closed_reason"]
    after = snapshot(client, creds, "launch-1")
    assert after["pending_review"] is None
    assert after["state"] == "completed" and after["version"] == shown["version"]  # unmoved
    page = client.get("/runs/launch-1").text
    assert 'id="review-decided"' in page and "you chose" in page
    assert "Nothing to decide" not in page
    # The same answer again (the API, as a second device would): refused, already decided.
    again = decide(client, creds, review, "accept", "another-device")
    assert again.status_code == 409, again.text
    assert "already decided" in again.json()["detail"]


def test_a_review_follows_the_ledger_and_a_stale_decision_is_refused(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    twelve(client, creds, "launch-2")
    complete(client, creds, "launch-2")
    first = snapshot(client, creds, "launch-2")["pending_review"]
    # The lost reply is looked up: the review the owner saw is replaced by a new one.
    move(client, creds, "launch-2", "op-12", "confirmed", evidence={"lookup": "landed"})
    shown = snapshot(client, creds, "launch-2")
    assert shown["badge"]["key"] == "completed-conflicts"
    assert shown["badge"]["label"] == "Completed with conflicts"
    second = shown["pending_review"]
    assert second["id"] != first["id"] and second["run_version"] == shown["version"]
    assert [o["id"] for o in second["options"]] == ["accept", "retry_conflicts", "revise"]
    stale = decide(client, creds, first, "accept", "k-stale")
    assert stale.status_code == 409, stale.text
    assert "a newer review" in stale.json()["detail"]
    assert stale.json()["current"]["input_request"]["id"] == second["id"]
    # An admin sees the run but is not named on it: they may not decide.
    _, admin_token = add_user(core, creds.tenant_id, "ada@example.com", role="admin")
    refused = decide(client, creds, second, "accept", "k-admin", token=admin_token)
    assert refused.status_code == 403, refused.text
    assert "decide on its review" in refused.json()["detail"]
    ok = decide(client, creds, second, "accept", "k-1")
    assert ok.status_code == 200, ok.text
    replay = decide(client, creds, second, "accept", "k-1")
    assert replay.status_code == 200 and replay.content == ok.content  # byte for byte
    bad = decide(client, creds, second, "nonsense", "k-2")
    assert bad.status_code in (409, 422), bad.text


def test_unknown_then_verified_closes_the_review_and_the_badge_says_completed(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    make_run(client, creds, "launch-3")
    declare(client, creds, "launch-3", {"operations": [op("a"), op("b")]})
    for name in ("a", "b"):
        move(client, creds, "launch-3", name, "sent")
    move(client, creds, "launch-3", "a", "confirmed")
    complete(client, creds, "launch-3")
    shown = snapshot(client, creds, "launch-3")
    badge = shown["badge"]
    assert (badge["key"], badge["label"]) == ("outcome-unknown", "Outcome unknown")
    review = shown["pending_review"]
    assert [o["id"] for o in review["options"]] == ["accept", "wait", "revise"]
    move(client, creds, "launch-3", "b", "confirmed", evidence={"receipt_id": "r-b"})
    shown = snapshot(client, creds, "launch-3")
    assert shown["badge"] == {"key": "state-completed", "label": "Completed", "because": None}
    assert shown["pending_review"] is None
    closed = decide(client, creds, review, "accept", "k-late")
    assert closed.status_code == 409 and "nothing is left to decide" in closed.json()["detail"]
    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/runs/launch-3").text
    assert 'data-badge="state-completed">Completed</span>' in page
    assert 'id="no-decision"' in page  # now, and only now, nothing is left to decide


def test_the_overview_shows_the_same_badges(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    twelve(client, creds, "launch-4")
    complete(client, creds, "launch-4")
    make_run(client, creds, "launch-5")
    complete(client, creds, "launch-5")
    r = client.get("/v1/runs", params={"group": "needs_review"}, headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    badges = {run["run_id"]: run["badge"]["label"] for run in r.json()["runs"]}
    assert badges == {"launch-4": "Needs review"}
    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/runs").text
    assert 'data-badge="needs-review">Needs review</span>' in page
    assert 'data-badge="state-completed">Completed</span>' in page
