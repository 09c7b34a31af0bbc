"""The inbox (DESIGN §6): listing, paging, actionability, acknowledgement, trail, privacy."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from runbell.flows import members
from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import bearer

# These tests follow email rows through the outbox: this server has an SMTP relay.
pytestmark = pytest.mark.usefixtures("mailing")

PLANTED = "SECRET-PLANTED-123"


def make_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> None:
    body = {"owner": creds.owner_email, "state": "working", **fields}
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text


def signal(
    client: TestClient, creds: TenantCreds, run_id: str, event_id: str, state: str, **extra: Any
) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": event_id, "state": state, **extra},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outcome"] == "applied", body
    return dict(body)


def completed_note(client: TestClient, creds: TenantCreds, run_id: str) -> str:
    """A run that asked to be told when it completes, completed: its notification id."""
    make_run(client, creds, run_id, notify_on_complete=True)
    res = signal(client, creds, run_id, f"{run_id}-done", "completed")
    [note] = res["notifications"]
    assert note["attention_type"] == "completed"
    return str(note["id"])


def several_notes(client: TestClient, creds: TenantCreds, n: int) -> list[str]:
    """``n`` notifications in creation order (ids are millisecond-ordered, so space them)."""
    ids = []
    for i in range(n):
        ids.append(completed_note(client, creds, f"run-{i}"))
        time.sleep(0.002)
    return ids


def inbox(client: TestClient, token: str, query: str = "") -> dict[str, Any]:
    r = client.get(f"/v1/notifications{query}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def feed(client: TestClient, token: str) -> list[dict[str, Any]]:
    r = client.get("/v1/events?after=earliest&limit=500", headers=bearer(token))
    assert r.status_code == 200, r.text
    return list(r.json()["events"])


def trail(client: TestClient, creds: TenantCreds, note_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/notifications/{note_id}/trail", headers=bearer(creds.admin_key))
    assert r.status_code == 200, r.text
    return dict(r.json())


def ack(client: TestClient, token: str, note_id: str) -> dict[str, Any]:
    r = client.post(f"/v1/notifications/{note_id}/ack", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


# --- listing ---------------------------------------------------------------------------


def test_inbox_lists_newest_first(client: TestClient, creds: TenantCreds) -> None:
    """GET /v1/notifications lists the caller's notifications, newest first."""
    ids = several_notes(client, creds, 4)
    listed = inbox(client, creds.owner_token)["notifications"]
    assert [n["id"] for n in listed] == list(reversed(ids))
    assert [n["run_id"] for n in listed] == ["run-3", "run-2", "run-1", "run-0"]
    assert all(n["recipient"] == creds.owner_id for n in listed)


def test_cursor_paging_walks_every_notification_once(
    client: TestClient, creds: TenantCreds
) -> None:
    """Paging with limit=2 and next_cursor visits each notification exactly once, in order."""
    ids = several_notes(client, creds, 5)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = inbox(client, creds.owner_token, query)
        assert len(page["notifications"]) <= 2
        seen += [n["id"] for n in page["notifications"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert pages < 10, "paging does not terminate"
    assert seen == list(reversed(ids))
    assert pages == 3


def test_state_filter(client: TestClient, creds: TenantCreds) -> None:
    """state=open and state=acknowledged return exactly the notifications in that state."""
    ids = several_notes(client, creds, 4)
    ack(client, creds.owner_token, ids[0])
    ack(client, creds.owner_token, ids[2])
    open_ = inbox(client, creds.owner_token, "?state=open")["notifications"]
    acked = inbox(client, creds.owner_token, "?state=acknowledged")["notifications"]
    assert [n["id"] for n in open_] == [ids[3], ids[1]]
    assert {n["state"] for n in open_} == {"open"}
    assert [n["id"] for n in acked] == [ids[2], ids[0]]
    assert {n["state"] for n in acked} == {"acknowledged"}
    both = inbox(client, creds.owner_token, "?state=open&state=acknowledged")["notifications"]
    assert [n["id"] for n in both] == list(reversed(ids))
    r = client.get("/v1/notifications?state=bogus", headers=bearer(creds.owner_token))
    assert r.status_code == 422
    assert r.json()["field"].startswith("state")


def test_inbox_is_per_person(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """Another member of the same tenant does not see my notifications in their inbox."""
    completed_note(client, creds, "mine")
    _, other = add_user(core, creds.tenant_id, "colleague@acme.test", role="admin")
    assert inbox(client, other)["notifications"] == []


# --- one notification: run snapshot and actionability ----------------------------------


def test_input_required_is_actionable_until_the_run_moves_on(
    client: TestClient, creds: TenantCreds
) -> None:
    """An input_required notification is actionable while the run waits at that version."""
    make_run(client, creds, "ask-1")
    res = signal(client, creds, "ask-1", "e1", "input_required")
    [note] = res["notifications"]
    assert note["attention_type"] == "input_required"
    r = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["actionable"] is True
    assert isinstance(body["actionable_reason"], str) and body["actionable_reason"]
    assert body["run"]["run_id"] == "ask-1"
    assert body["run"]["state"] == "input_required"
    assert body["run"]["version"] == note["transition_version"]

    signal(client, creds, "ask-1", "e2", "working")
    body = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token)).json()
    assert body["actionable"] is False
    assert "superseded" in body["actionable_reason"] or "working" in body["actionable_reason"]
    assert body["run"]["state"] == "working"  # the snapshot is current, not a copy
    assert body["run"]["version"] > note["transition_version"]


def test_input_required_is_not_actionable_after_a_put_changed_the_run(
    client: TestClient, creds: TenantCreds
) -> None:
    """Amending the run (PUT) while it waits makes the old request's alert non-actionable."""
    make_run(client, creds, "ask-2", subject={"type": "pr", "id": "7", "version": 1})
    [note] = signal(client, creds, "ask-2", "e1", "input_required")["notifications"]
    r = client.put(
        "/v1/runs/ask-2",
        json={"subject": {"type": "pr", "id": "7", "version": 2}},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    body = client.get(f"/v1/notifications/{note['id']}", headers=bearer(creds.owner_token)).json()
    assert body["actionable"] is False
    assert body["run"]["subject"]["version"] == 2


def test_completed_notification_is_informational(client: TestClient, creds: TenantCreds) -> None:
    """A completed notification carries the run and is informational, never actionable."""
    note_id = completed_note(client, creds, "done-1")
    r = client.get(f"/v1/notifications/{note_id}", headers=bearer(creds.owner_token))
    body = r.json()
    assert body["actionable"] is False
    assert body["actionable_reason"] == "informational"
    assert body["run"]["state"] == "completed"
    assert body["run"]["terminal"] is True


def test_previous_owner_loses_access_to_the_run_details(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """After a run changes owner, the old owner's alert is not actionable and hides details."""
    _, first_token = add_user(core, creds.tenant_id, "first@acme.test")
    new_owner, _ = add_user(core, creds.tenant_id, "next@acme.test")
    make_run(
        client,
        creds,
        "ask-3",
        owner="first@acme.test",
        details={"k": PLANTED},
        title="Refund order 991",
        objective="refund",
        metadata={"customer": "c-17"},
    )
    [note] = signal(client, creds, "ask-3", "e1", "input_required")["notifications"]
    r = client.get(f"/v1/notifications/{note['id']}", headers=bearer(first_token))
    assert r.json()["actionable"] is True
    assert r.json()["run"]["details"] == {"k": PLANTED}  # while it is theirs
    r = client.put(
        "/v1/runs/ask-3", json={"owner": "next@acme.test"}, headers=bearer(creds.runtime_key)
    )
    assert r.json()["owner"] == new_owner
    r = client.get(f"/v1/notifications/{note['id']}", headers=bearer(first_token))
    assert r.status_code == 200, r.text
    assert r.json()["actionable"] is False
    assert r.json()["actionable_reason"] == "access lost"
    assert PLANTED not in r.text
    # Only the pointer stays: no title, objective, metadata or reason of a run they lost.
    assert set(r.json()["run"]) == {"run_id", "state", "version"}
    assert "Refund order 991" not in r.text and "c-17" not in r.text
    assert client.get("/v1/runs/ask-3", headers=bearer(first_token)).status_code == 404


# --- acknowledgement -------------------------------------------------------------------


def test_ack_closes_and_emits_one_event_idempotently(
    client: TestClient, creds: TenantCreds
) -> None:
    """Ack closes it as acknowledged and emits one notification.closed; a second ack is a no-op."""
    note_id = completed_note(client, creds, "push-1")
    first = ack(client, creds.owner_token, note_id)
    assert first["state"] == "acknowledged"
    assert first["closed_at"] is not None

    def closed_events() -> list[dict[str, Any]]:
        return [
            e
            for e in feed(client, creds.owner_token)
            if e["type"] == "notification.closed" and e["notification_id"] == note_id
        ]

    [event] = closed_events()
    assert event["data"]["state"] == "acknowledged"

    second = ack(client, creds.owner_token, note_id)
    assert second["state"] == "acknowledged"
    assert second["closed_at"] == first["closed_at"]
    assert second["closed_reason"] == first["closed_reason"]
    assert len(closed_events()) == 1
    got = client.get(f"/v1/notifications/{note_id}", headers=bearer(creds.owner_token)).json()
    assert got["state"] == "acknowledged"
    assert got["actionable"] is False
    assert [n["state"] for n in inbox(client, creds.owner_token)["notifications"]] == [
        "acknowledged"
    ]


def test_ack_cancels_every_pending_delivery(
    request: pytest.FixtureRequest, client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Ack cancels the queued email of that notification and nothing of another one."""
    note_id = completed_note(client, creds, "push-1")
    other_id = completed_note(client, creds, "push-2")
    before = {d["channel"]: d["status"] for d in trail(client, creds, note_id)["deliveries"]}
    assert before == {"inbox": "accepted", "email": "queued"}
    ack(client, creds.owner_token, note_id)
    after = {d["channel"]: d["status"] for d in trail(client, creds, note_id)["deliveries"]}
    assert after == {"inbox": "accepted", "email": "cancelled"}
    untouched = {d["channel"]: d["status"] for d in trail(client, creds, other_id)["deliveries"]}
    assert untouched == {"inbox": "accepted", "email": "queued"}
    ack(client, creds.owner_token, note_id)  # idempotent: nothing flips back
    again = {d["channel"]: d["status"] for d in trail(client, creds, note_id)["deliveries"]}
    assert again == after


def test_a_notification_commits_with_its_outbox_and_created_event(
    request: pytest.FixtureRequest, client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A pushed notification has its inbox and email delivery rows and a created feed event."""
    note_id = completed_note(client, creds, "outbox-1")
    channels = sorted(d["channel"] for d in trail(client, creds, note_id)["deliveries"])
    assert channels == ["email", "inbox"]
    created = [
        e
        for e in feed(client, creds.owner_token)
        if e["type"] == "notification.created" and e["notification_id"] == note_id
    ]
    assert len(created) == 1


@pytest.mark.parametrize("role", ["member", "admin"])
def test_another_member_cannot_ack(
    client: TestClient, core: Core, creds: TenantCreds, role: str
) -> None:
    """Someone else's notification answers 404 to ack (and to read); it stays open."""
    note_id = completed_note(client, creds, "push-2")
    _, other = add_user(core, creds.tenant_id, f"someone-{role}@acme.test", role=role)
    r = client.post(f"/v1/notifications/{note_id}/ack", headers=bearer(other))
    assert r.status_code == 404, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    r = client.get(f"/v1/notifications/{note_id}", headers=bearer(other))
    assert r.status_code == 404, r.text
    got = client.get(f"/v1/notifications/{note_id}", headers=bearer(creds.owner_token)).json()
    assert got["state"] == "open"
    assert not [e for e in feed(client, creds.admin_key) if e["type"] == "notification.closed"]


# --- trail -----------------------------------------------------------------------------


def test_trail_explains_why_and_which_transition(client: TestClient, creds: TenantCreds) -> None:
    """The trail carries the deciding rule with its inputs and the transition that caused it."""
    make_run(client, creds, "t-1", notify_on_complete=True)
    res = signal(client, creds, "t-1", "evt-done", "completed", reason="all good")
    [note] = res["notifications"]
    tr = trail(client, creds, note["id"])
    assert tr["id"] == note["id"]
    assert tr["why"]["rule_id"] == "completed.requested"
    assert tr["why"]["decision"] == "push"
    assert tr["why"]["inputs"]["attention"] == "completed"
    assert tr["why"]["inputs"]["notify_on_complete"] is True
    assert tr["transition"]["from"] == "working"
    assert tr["transition"]["to"] == "completed"
    assert tr["transition"]["version"] == note["transition_version"] == res["run"]["version"]
    assert tr["transition"]["event_id"] == "evt-done"
    assert tr["transition"]["reason"] == "all good"


def test_trail_shows_deliveries_and_lifecycle(
    request: pytest.FixtureRequest, client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """The trail lists deliveries by channel and status, and created then closed lifecycle."""
    note_id = completed_note(client, creds, "t-1")
    tr = trail(client, creds, note_id)
    assert {(d["channel"], d["status"]) for d in tr["deliveries"]} == {
        ("inbox", "accepted"),
        ("email", "queued"),
    }
    assert all(d["attempts"] == [] and d["attempt_count"] == 0 for d in tr["deliveries"])
    assert [e["type"] for e in tr["lifecycle"]] == ["notification.created"]
    ack(client, creds.owner_token, note_id)
    tr = trail(client, creds, note_id)
    assert [e["type"] for e in tr["lifecycle"]] == ["notification.created", "notification.closed"]
    assert tr["state"] == "acknowledged"
    assert {(d["channel"], d["status"]) for d in tr["deliveries"]} == {
        ("inbox", "accepted"),
        ("email", "cancelled"),
    }


def test_trail_of_a_superseded_input_request(
    request: pytest.FixtureRequest, client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A superseded input_required alert's lifecycle records its closing as superseded."""
    make_run(client, creds, "t-2")
    [note] = signal(client, creds, "t-2", "e1", "input_required")["notifications"]
    signal(client, creds, "t-2", "e2", "working")
    tr = trail(client, creds, note["id"])
    assert tr["why"]["rule_id"].startswith("input_required.")
    assert tr["state"] == "superseded"
    assert [e["type"] for e in tr["lifecycle"]] == ["notification.created", "notification.closed"]
    assert tr["lifecycle"][-1]["data"]["state"] == "superseded"


def recipient_view(client: TestClient, token: str, note_id: str) -> tuple[bool, str]:
    r = client.get(f"/v1/notifications/{note_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return r.json()["actionable"], r.json()["actionable_reason"]


def trail_view(client: TestClient, creds: TenantCreds, note_id: str) -> tuple[bool, str]:
    tr = trail(client, creds, note_id)
    return tr["actionable"], tr["actionable_reason"]


def test_trail_says_whether_the_recipient_could_still_act(
    client: TestClient, creds: TenantCreds
) -> None:
    """Support answers "could the user still act?" from the trail alone: it carries the
    recipient's own actionable and reason at every step, not the admin's."""
    make_run(client, creds, "t-act")
    [note] = signal(client, creds, "t-act", "e1", "input_required")["notifications"]
    assert trail_view(client, creds, note["id"]) == (True, "awaiting your input")
    assert trail_view(client, creds, note["id"]) == recipient_view(
        client, creds.owner_token, note["id"]
    )
    signal(client, creds, "t-act", "e2", "working")
    assert trail_view(client, creds, note["id"]) == (False, "superseded")
    assert trail_view(client, creds, note["id"]) == recipient_view(
        client, creds.owner_token, note["id"]
    )
    done = completed_note(client, creds, "t-info")
    assert trail_view(client, creds, done) == (False, "informational")


def test_trail_answers_for_the_recipient_not_the_admin_asking(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """The admin reading the trail may see the run; the recipient who lost it may not.
    The trail says "access lost", as the recipient's own view does."""
    _, first_token = add_user(core, creds.tenant_id, "first@acme.test")
    add_user(core, creds.tenant_id, "next@acme.test")
    make_run(client, creds, "t-lost", owner="first@acme.test")
    [note] = signal(client, creds, "t-lost", "e1", "input_required")["notifications"]
    assert trail_view(client, creds, note["id"]) == (True, "awaiting your input")
    r = client.put(
        "/v1/runs/t-lost", json={"owner": "next@acme.test"}, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 200, r.text
    assert recipient_view(client, first_token, note["id"]) == (False, "access lost")
    assert trail_view(client, creds, note["id"]) == (False, "access lost")


def test_trail_of_a_revoked_recipient_says_access_lost(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A recipient whose membership was revoked can no longer act, whatever the run does."""
    bob_id, _ = add_user(core, creds.tenant_id, "bob@acme.test", role="admin")
    make_run(client, creds, "t-rev", owner="bob@acme.test")
    [note] = signal(client, creds, "t-rev", "e1", "input_required")["notifications"]
    assert trail_view(client, creds, note["id"]) == (True, "awaiting your input")
    members.revoke_member(core, creds.tenant_id, bob_id)
    assert trail_view(client, creds, note["id"]) == (False, "access lost")


# --- sensitive details -----------------------------------------------------------------


def test_sensitive_details_only_appear_in_the_authorized_run_view(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Run details never reach the feed, notifications, inbox or trail; the run view has them."""
    _, outsider = add_user(core, creds.tenant_id, "outsider@acme.test")
    make_run(
        client,
        creds,
        "s-1",
        notify_on_complete=True,
        details={"arguments": {"token": PLANTED}},
    )
    r = client.put(
        "/v1/runs/s-1",
        json={"details": {"arguments": {"token": PLANTED}, "risk": f"high {PLANTED}"}},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    [ask] = signal(client, creds, "s-1", "e1", "input_required")["notifications"]
    signal(client, creds, "s-1", "e2", "working")
    done = signal(client, creds, "s-1", "e3", "completed")
    assert PLANTED not in json.dumps(done)  # the runtime's signal answer
    [note] = done["notifications"]

    leaks: dict[str, str] = {}
    for token in (creds.admin_key, creds.runtime_key, creds.owner_token):
        leaks[f"feed:{token[:4]}"] = json.dumps(feed(client, token))
    leaks["inbox"] = json.dumps(inbox(client, creds.owner_token))
    for note_id in (ask["id"], note["id"]):
        leaks[f"trail:{note_id}"] = json.dumps(trail(client, creds, note_id))
        got = client.get(f"/v1/notifications/{note_id}", headers=bearer(creds.owner_token)).json()
        got.pop("run")  # the authenticated run snapshot; its details are the owner's to see
        leaks[f"notification:{note_id}"] = json.dumps(got)
    leaks["ack"] = json.dumps(ack(client, creds.owner_token, note["id"]))
    leaks["runs-list"] = json.dumps(
        client.get("/v1/runs", headers=bearer(creds.runtime_key)).json()
    )
    for where, text in leaks.items():
        assert PLANTED not in text, f"details leaked into {where}"

    for token in (creds.runtime_key, creds.owner_token):
        r = client.get("/v1/runs/s-1", headers=bearer(token))
        assert r.status_code == 200
        assert r.json()["details"]["arguments"]["token"] == PLANTED
    r = client.get("/v1/runs/s-1", headers=bearer(outsider))
    assert r.status_code == 404
    assert PLANTED not in r.text
