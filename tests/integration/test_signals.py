"""Signals through the HTTP API: dedupe, staleness, absorbing terminal states, the
attention policy's decisions, supersession and run updates (DESIGN §2 inv. 1, 2, 5, 12;
§3; §6; §7). Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows import policy
from runbell.flows.context import Core
from runbell.store import accounts
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import bearer

# --- helpers -------------------------------------------------------------------------


def put_run(client: TestClient, creds: TenantCreds, run_id: str, **body: Any) -> dict[str, Any]:
    body.setdefault("owner", creds.owner_email)
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code in (200, 201), r.text
    return dict(r.json())


def signal(
    client: TestClient, creds: TenantCreds, run_id: str, event_id: str, state: str, **extra: Any
) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": event_id, "state": state, **extra},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def get_run(client: TestClient, creds: TenantCreds, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    return dict(r.json())


def inbox(client: TestClient, token: str) -> list[dict[str, Any]]:
    r = client.get("/v1/notifications", headers=bearer(token))
    assert r.status_code == 200, r.text
    return list(r.json()["notifications"])


def rows(core: Core, table: sa.Table, tenant_id: str, **where: Any) -> list[dict[str, Any]]:
    q = sa.select(table).where(table.c.tenant_id == tenant_id)
    for name, value in where.items():
        q = q.where(table.c[name] == value)
    with core.db.read() as conn:
        return [dict(r._mapping) for r in conn.execute(q).all()]


def notifications(core: Core, creds: TenantCreds, run_id: str) -> list[dict[str, Any]]:
    return rows(core, t.notifications, creds.tenant_id, run_id=run_id)


def deliveries(core: Core, creds: TenantCreds, notification_id: str) -> list[dict[str, Any]]:
    return rows(core, t.deliveries, creds.tenant_id, notification_id=notification_id)


def run_deliveries(core: Core, creds: TenantCreds, run_id: str) -> list[dict[str, Any]]:
    q = (
        sa.select(t.deliveries)
        .join(t.notifications, t.notifications.c.id == t.deliveries.c.notification_id)
        .where(t.deliveries.c.tenant_id == creds.tenant_id, t.notifications.c.run_id == run_id)
    )
    with core.db.read() as conn:
        return [dict(r._mapping) for r in conn.execute(q).all()]


def transitions(core: Core, creds: TenantCreds, run_id: str) -> list[dict[str, Any]]:
    found = rows(core, t.transitions, creds.tenant_id, run_id=run_id)
    return sorted(found, key=lambda r: r["version"])


def inbound(core: Core, creds: TenantCreds, event_id: str) -> dict[str, Any]:
    found = rows(core, t.inbound_events, creds.tenant_id, event_id=event_id)
    assert len(found) == 1, found
    return found[0]


def feed(core: Core, creds: TenantCreds, run_id: str) -> list[dict[str, Any]]:
    found = rows(core, t.feed_events, creds.tenant_id, run_id=run_id)
    return sorted(found, key=lambda r: r["seq"])


# --- dedupe and staleness ------------------------------------------------------------


def test_same_event_twice_is_a_duplicate_with_the_same_notification(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Invariant 1: a redelivered signal answers duplicate and creates no second alert."""
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    first = signal(client, creds, "r1", "e1", "completed")
    assert first["outcome"] == "applied"
    assert len(first["notifications"]) == 1
    second = signal(client, creds, "r1", "e1", "completed")
    assert second["outcome"] == "duplicate"
    assert second["original_outcome"] == "applied"
    assert [n["id"] for n in second["notifications"]] == [first["notifications"][0]["id"]]
    assert second["run"]["version"] == first["run"]["version"] == 2
    assert len(notifications(core, creds, "r1")) == 1
    assert [n["id"] for n in inbox(client, creds.owner_token)] == [first["notifications"][0]["id"]]


def test_same_transition_under_a_new_event_id_is_stale(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Invariant 1/2: the same transition reported twice applies once; one notification."""
    put_run(client, creds, "r1", state="working")
    assert signal(client, creds, "r1", "e1", "completed")["outcome"] == "applied"
    again = signal(client, creds, "r1", "e2", "completed")
    assert again["outcome"] == "stale"
    assert again["notifications"] == []
    assert again["run"]["version"] == 2
    assert len(notifications(core, creds, "r1")) == 1
    assert inbound(core, creds, "e2")["outcome"] == "stale"


def test_late_completed_after_failed_is_recorded_not_applied(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Invariant 2: terminal states absorb; a late success neither moves nor alerts."""
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    failed = signal(client, creds, "r1", "e-fail", "failed", reason="boom")
    assert failed["outcome"] == "applied"
    late = signal(client, creds, "r1", "e-late", "completed")
    assert late["outcome"] == "stale"
    run = get_run(client, creds, "r1")
    assert (run["state"], run["version"]) == ("failed", failed["run"]["version"])
    assert all(n["attention_type"] != "completed" for n in notifications(core, creds, "r1"))
    recorded = inbound(core, creds, "e-late")
    assert recorded["outcome"] == "stale"
    assert recorded["claimed_state"] == "completed"
    assert [tr["to_state"] for tr in transitions(core, creds, "r1")] == ["working", "failed"]


def test_older_sequence_is_stale_and_keeps_the_newer_sequence(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Invariant 2: out-of-order authoritative signals never move the run backwards."""
    put_run(client, creds, "r1")
    assert signal(client, creds, "r1", "e5", "working", sequence=5)["outcome"] == "applied"
    old = signal(client, creds, "r1", "e3", "completed", sequence=3)
    assert old["outcome"] == "stale"
    run = get_run(client, creds, "r1")
    assert (run["state"], run["sequence"], run["version"]) == ("working", 5, 2)
    assert notifications(core, creds, "r1") == []
    assert inbound(core, creds, "e3")["outcome"] == "stale"


def test_disallowed_transition_is_rejected_and_recorded(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§3 state machine: queued -> input_required is refused, recorded, not applied."""
    put_run(client, creds, "r1")
    out = signal(client, creds, "r1", "e1", "input_required")
    assert out["outcome"] == "rejected"
    run = get_run(client, creds, "r1")
    assert (run["state"], run["version"]) == ("queued", 1)
    recorded = inbound(core, creds, "e1")
    assert (recorded["outcome"], recorded["claimed_state"]) == ("rejected", "input_required")
    assert notifications(core, creds, "r1") == []
    assert len(transitions(core, creds, "r1")) == 1


# --- progress ------------------------------------------------------------------------


def test_ten_progress_events_never_notify(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Invariant 5: progress goes to the live feed only; no notification, no delivery."""
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    for i in range(10):
        r = client.post(
            "/v1/runs/r1/progress",
            json={"message": f"step {i}", "counts": {"done": i, "total": 10, "unit": "files"}},
            headers=bearer(creds.runtime_key),
        )
        assert r.status_code == 202, r.text
        assert r.json()["accepted"] is True
    assert notifications(core, creds, "r1") == []
    assert run_deliveries(core, creds, "r1") == []
    progress = [e for e in feed(core, creds, "r1") if e["type"] == "run.progress"]
    assert [e["data"]["message"] for e in progress] == [f"step {i}" for i in range(10)]
    run = get_run(client, creds, "r1")
    assert run["version"] == 1
    assert run["progress"]["message"] == "step 9"
    assert run["last_progress_at"] is not None


def test_progress_on_a_terminal_run_is_not_accepted(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Invariant 2: a finished run takes no heartbeat; nothing reaches the feed."""
    put_run(client, creds, "r1", state="working")
    signal(client, creds, "r1", "e1", "completed")
    before = feed(core, creds, "r1")
    r = client.post(
        "/v1/runs/r1/progress", json={"message": "late"}, headers=bearer(creds.runtime_key)
    )
    assert r.json()["accepted"] is False
    assert "completed" in r.json()["reason"]
    assert feed(core, creds, "r1") == before
    run = get_run(client, creds, "r1")
    assert run["progress"] is None
    assert run["last_progress_at"] is None


# --- policy decisions ----------------------------------------------------------------


def test_requested_completion_is_a_normal_push(client: TestClient, creds: TenantCreds) -> None:
    """§7 completed.requested: a run that asked to be told pushes at normal urgency."""
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    (note,) = signal(client, creds, "r1", "e1", "completed")["notifications"]
    assert (note["attention_type"], note["decision"], note["urgency"], note["rule_id"]) == (
        "completed",
        "push",
        "normal",
        "completed.requested",
    )


@pytest.mark.usefixtures("mailing")
def test_push_queues_email_under_default_consent_and_an_inbox_row(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Inv. 12: a push commits with its outbox: an accepted inbox row and a queued email."""
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    (note,) = signal(client, creds, "r1", "e1", "completed")["notifications"]
    by_channel = {d["channel"]: d for d in deliveries(core, creds, note["id"])}
    assert set(by_channel) == {"inbox", "email"}
    assert by_channel["email"]["status"] == "queued"
    assert by_channel["email"]["destination"] == creds.owner_email
    assert by_channel["email"]["next_attempt_at"] is not None
    assert by_channel["inbox"]["status"] == "accepted"


def test_a_server_without_email_queues_no_email(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """No SMTP relay configured: a push queues no email row the worker could only skip
    (the issue measured two extra write transactions per signal for them)."""
    assert core.settings.smtp_host is None
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    (note,) = signal(client, creds, "r1", "e1", "completed")["notifications"]
    assert note["decision"] == "push"
    assert {d["channel"] for d in deliveries(core, creds, note["id"])} == {"inbox"}


def test_new_notification_is_announced_on_the_feed(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§6 feed: every created notification appears as notification.created after its cause."""
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    (note,) = signal(client, creds, "r1", "e1", "completed")["notifications"]
    events = feed(core, creds, "r1")
    assert [e["type"] for e in events] == [
        "run.created",
        "run.transitioned",
        "notification.created",
    ]
    assert events[-1]["notification_id"] == note["id"]
    assert events[1]["data"]["notification_ids"] == [note["id"]]


def test_plain_completion_goes_to_the_inbox(client: TestClient, creds: TenantCreds) -> None:
    """§7 completed.default: a plain completion is an inbox decision at low urgency."""
    put_run(client, creds, "r1", state="working")
    (note,) = signal(client, creds, "r1", "e1", "completed")["notifications"]
    assert (note["decision"], note["urgency"], note["rule_id"]) == (
        "inbox",
        "low",
        "completed.default",
    )
    assert [n["id"] for n in inbox(client, creds.owner_token)] == [note["id"]]


def test_inbox_decision_queues_no_email(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """§7 / inv. 5: an inbox-only decision creates the inbox row and nothing outbound."""
    put_run(client, creds, "r1", state="working")
    (note,) = signal(client, creds, "r1", "e1", "completed")["notifications"]
    assert [(d["channel"], d["status"]) for d in deliveries(core, creds, note["id"])] == [
        ("inbox", "accepted")
    ]


def test_self_retrying_failure_is_suppressed_but_explained(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§7 failed.self_retrying: no notification; the decision stays on the transition."""
    put_run(client, creds, "r1", state="working")
    out = signal(
        client, creds, "r1", "e1", "failed", error={"code": "rate_limited", "retryable": True}
    )
    assert out["outcome"] == "applied"
    assert out["run"]["state"] == "failed"
    assert out["notifications"] == []
    assert notifications(core, creds, "r1") == []
    assert run_deliveries(core, creds, "r1") == []
    last = transitions(core, creds, "r1")[-1]
    assert (last["version"], last["to_state"]) == (2, "failed")
    assert last["decision"]["rule_id"] == "failed.self_retrying"
    assert last["decision"]["kind"] == "suppress"


def test_failure_needing_repair_is_urgent(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§7 failed.needs_repair: a failure the user must fix is an urgent push."""
    put_run(client, creds, "r1", state="working")
    out = signal(client, creds, "r1", "e1", "failed", error={"user_action_required": True})
    (note,) = out["notifications"]
    assert (note["attention_type"], note["decision"], note["urgency"], note["rule_id"]) == (
        "failed",
        "push",
        "urgent",
        "failed.needs_repair",
    )
    assert transitions(core, creds, "r1")[-1]["decision"]["rule_id"] == "failed.needs_repair"


def test_unverified_effects_need_review(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """§7 / inv. 3: a completion with unverified effects is needs_review, not success."""
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    out = signal(client, creds, "r1", "e1", "completed", effects_verified=False)
    (note,) = out["notifications"]
    assert note["attention_type"] == "needs_review"
    assert note["rule_id"] == "needs_review.default"
    assert [n["attention_type"] for n in notifications(core, creds, "r1")] == ["needs_review"]


def test_tenant_policy_override_changes_the_decision(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§7 rules as data: a tenant rule wins over the defaults and is named on the alert."""
    put_run(client, creds, "r0", state="working")
    (before,) = signal(client, creds, "r0", "e0", "completed")["notifications"]
    assert before["rule_id"] == "completed.default"
    policy.set_policy(
        core,
        creds.tenant_id,
        {
            "rule": [
                {
                    "id": "acme.completed_urgent",
                    "when": {"attention": "completed"},
                    "decision": "push",
                    "urgency": "urgent",
                }
            ]
        },
    )
    put_run(client, creds, "r1", state="working")
    (note,) = signal(client, creds, "r1", "e1", "completed")["notifications"]
    assert (note["decision"], note["urgency"], note["rule_id"]) == (
        "push",
        "urgent",
        "acme.completed_urgent",
    )
    assert transitions(core, creds, "r1")[-1]["decision"]["rule_id"] == "acme.completed_urgent"
    # Other attention types keep the defaults.
    put_run(client, creds, "r2", state="working")
    (other,) = signal(client, creds, "r2", "e2", "failed")["notifications"]
    assert other["rule_id"] == "failed.default"


# --- supersession --------------------------------------------------------------------


def test_newer_transition_supersedes_open_input_request_alert(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§7: a newer transition closes the run's open actionable alert as superseded."""
    put_run(client, creds, "r1", state="working")
    (n1,) = signal(client, creds, "r1", "e1", "input_required")["notifications"]
    assert (n1["attention_type"], n1["state"]) == ("input_required", "open")
    assert [n["id"] for n in get_run(client, creds, "r1")["open_notifications"]] == [n1["id"]]

    out = signal(client, creds, "r1", "e2", "working")
    assert out["outcome"] == "applied"
    (row,) = notifications(core, creds, "r1")
    assert row["state"] == "superseded"
    assert row["closed_at"] is not None
    assert get_run(client, creds, "r1")["open_notifications"] == []
    closed = [e for e in feed(core, creds, "r1") if e["type"] == "notification.closed"]
    assert [e["notification_id"] for e in closed] == [n1["id"]]


@pytest.mark.usefixtures("mailing")
def test_superseded_alert_cancels_its_pending_deliveries(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Inv. 6 / §7: superseding stops pending sends; the delivered inbox row stays."""
    put_run(client, creds, "r1", state="working")
    (n1,) = signal(client, creds, "r1", "e1", "input_required")["notifications"]
    pending = deliveries(core, creds, n1["id"])
    assert {d["channel"]: d["status"] for d in pending} == {"inbox": "accepted", "email": "queued"}
    signal(client, creds, "r1", "e2", "working")
    after = {d["channel"]: d for d in deliveries(core, creds, n1["id"])}
    assert after["email"]["status"] == "cancelled"
    assert after["email"]["next_attempt_at"] is None
    assert after["inbox"]["status"] == "accepted"


# --- PUT updates ---------------------------------------------------------------------


def test_put_title_bumps_version_once_and_is_idempotent(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§3: every accepted change increments the version; a no-op PUT changes nothing."""
    body = {
        "title": "first",
        "subject": {"type": "pr", "id": "42"},
        "metadata": {"repo": "acme/app"},
        "notify_on_complete": True,
    }
    created = put_run(client, creds, "r1", **body)
    assert created["version"] == 1
    updated = put_run(client, creds, "r1", **{**body, "title": "second"})
    assert (updated["version"], updated["title"]) == (2, "second")
    trs = transitions(core, creds, "r1")
    assert [(tr["version"], tr["kind"]) for tr in trs] == [(1, "create"), (2, "update")]
    assert "title" in trs[-1]["reason"]
    again = put_run(client, creds, "r1", **{**body, "title": "second"})
    assert again["version"] == 2
    assert len(transitions(core, creds, "r1")) == 2
    assert [e["type"] for e in feed(core, creds, "r1")] == ["run.created", "run.updated"]


def test_put_cannot_change_state(client: TestClient, creds: TenantCreds) -> None:
    """§6: state changes go through signals; PUT answers 422 naming `state`."""
    put_run(client, creds, "r1")
    r = client.put(
        "/v1/runs/r1",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == "state"
    r = client.put("/v1/runs/r1", json={"state": "completed"}, headers=bearer(creds.runtime_key))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "state"
    run = get_run(client, creds, "r1")
    assert (run["state"], run["version"]) == ("queued", 1)


def test_put_with_non_member_owner_is_422_naming_owner(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§6: an owner who is not a member is a field error (422 naming `owner`)."""
    r = client.put(
        "/v1/runs/r1", json={"owner": "stranger@else.test"}, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "owner"


def test_put_with_non_member_owner_creates_nothing(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§6: a refused PUT (owner not a member, or revoked) leaves no run behind."""
    user_id, _ = add_user(core, creds.tenant_id, "gone@acme.test")
    with core.db.transaction() as tx:
        accounts.revoke_member(tx.conn, creds.tenant_id, user_id, tx.now)
    for owner in ("stranger@else.test", "gone@acme.test", user_id):
        r = client.put("/v1/runs/r1", json={"owner": owner}, headers=bearer(creds.runtime_key))
        assert r.status_code in (404, 422), r.text
        assert r.headers["content-type"].startswith("application/problem+json")
    assert rows(core, t.runs, creds.tenant_id) == []
    assert client.get("/v1/runs/r1", headers=bearer(creds.runtime_key)).status_code == 404


def test_finished_run_is_not_edited(client: TestClient, creds: TenantCreds) -> None:
    """Inv. 2: a finished run's record is final; an edit answers 409 with the run as it is."""
    put_run(client, creds, "r1", state="working", title="t")
    signal(client, creds, "r1", "e1", "completed")
    r = client.put(
        "/v1/runs/r1",
        json={"owner": creds.owner_email, "title": "renamed"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 409, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert (r.json()["current"]["state"], r.json()["current"]["version"]) == ("completed", 2)
    # Repeating the descriptive fields unchanged stays harmless.
    same = put_run(client, creds, "r1", title="t")
    assert (same["state"], same["version"], same["title"]) == ("completed", 2, "t")


# --- ids and scope -------------------------------------------------------------------


def test_event_id_reused_by_another_run_is_refused(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Inv. 1 dedupe is per source: a reused event id is a 409 naming it, never a silent
    duplicate that drops the second run's signal."""
    put_run(client, creds, "r1", state="working")
    put_run(client, creds, "r2", state="working")
    assert signal(client, creds, "r1", "e1", "completed")["outcome"] == "applied"
    r = client.post(
        "/v1/runs/r2/signals",
        json={"event_id": "e1", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 409, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == "event_id"
    run = get_run(client, creds, "r2")
    assert (run["state"], run["version"]) == ("working", 1)
    assert notifications(core, creds, "r2") == []


def test_signal_for_unknown_run_is_404_and_leaves_no_dedupe_record(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§6: unknown run -> 404; the event id stays usable once the run exists."""
    r = client.post(
        "/v1/runs/later/signals",
        json={"event_id": "e1", "state": "working"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 404, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert rows(core, t.inbound_events, creds.tenant_id) == []
    put_run(client, creds, "later")
    assert signal(client, creds, "later", "e1", "working")["outcome"] == "applied"


def test_another_tenants_run_is_not_found(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§3: nothing crosses tenants; another tenant's run id answers 404, never 403."""
    put_run(client, creds, "r1", state="working")
    other = make_tenant(core, name="globex")
    r = client.post(
        "/v1/runs/r1/signals",
        json={"event_id": "e1", "state": "completed"},
        headers=bearer(other.runtime_key),
    )
    assert r.status_code == 404, r.text
    assert get_run(client, creds, "r1")["state"] == "working"
    assert client.get("/v1/runs/r1", headers=bearer(other.runtime_key)).status_code == 404


# --- time and presence in the policy ------------------------------------------------


def test_long_running_completion_pushes(
    client: TestClient, clock: Clock, creds: TenantCreds
) -> None:
    """§7: a run that took longer than the threshold pushes even without asking."""
    clock.freeze()
    put_run(client, creds, "quick", state="working")
    put_run(client, creds, "slow", state="working")
    clock.advance(60)
    (quick,) = signal(client, creds, "quick", "e1", "completed")["notifications"]
    assert quick["rule_id"] == "completed.default"
    clock.advance(16 * 60)
    (slow,) = signal(client, creds, "slow", "e2", "completed")["notifications"]
    assert (slow["decision"], slow["rule_id"]) == ("push", "completed.long_running")


def test_present_owner_gets_inbox_not_push(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """§7 completed.owner_present: someone watching the live UI is not pushed."""
    put_run(client, creds, "r1", state="working", notify_on_complete=True)
    core.presence.enter(creds.tenant_id, creds.owner_id)
    try:
        (note,) = signal(client, creds, "r1", "e1", "completed")["notifications"]
    finally:
        core.presence.leave(creds.tenant_id, creds.owner_id)
    assert (note["decision"], note["rule_id"]) == ("inbox", "completed.owner_present")
    assert [d["channel"] for d in deliveries(core, creds, note["id"])] == ["inbox"]


# --- reason is public, error is private ----------------------------------------------

LONG_REASON = "deploy failed:\r\n\x1b[31mquota\x1b[0m \u202eexceeded\u202c " + "x" * 300
CLEAN_START = "deploy failed: [31mquota [0m exceeded "
PRIVATE = "PRIVATE-STACKTRACE-at-db.internal:5432"


def webhook_payloads(core: Core, creds: TenantCreds) -> dict[str, dict[str, Any]]:
    """The tenant-webhook messages written so far, by event type (bodies are fixed now)."""
    return {
        d["event_type"]: d["payload"]["data"]
        for d in rows(core, t.deliveries, creds.tenant_id, channel="webhook")
    }


def test_reason_is_public_and_stored_as_one_short_safe_line(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A reason goes to the inbox, the feed and every webhook endpoint: wherever it goes,
    it is the same cleaned line of at most 200 characters. error stays private."""
    r = client.post(
        "/v1/webhook-endpoints",
        json={"url": "http://127.0.0.1:9/hook"},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 201, r.text
    put_run(client, creds, "pub-1", state="working")
    res = signal(
        client,
        creds,
        "pub-1",
        "e1",
        "failed",
        reason=LONG_REASON,
        error={"message": PRIVATE, "user_action_required": True},
    )
    assert res["outcome"] == "applied"
    [note] = res["notifications"]
    reason = note["reason"]
    assert reason.startswith(CLEAN_START) and reason.endswith("…") and len(reason) == 200
    assert get_run(client, creds, "pub-1")["stop_reason"] == reason
    assert inbox(client, creds.owner_token)[0]["reason"] == reason
    events = client.get("/v1/events?after=earliest", headers=bearer(creds.runtime_key)).json()
    [moved] = [e for e in events["events"] if e["type"] == "run.transitioned"]
    assert moved["data"]["reason"] == reason
    hooks = webhook_payloads(core, creds)
    assert hooks["run.transitioned"]["reason"] == reason
    assert hooks["run.finished"]["stop_reason"] == reason
    # error is private: the run view has it, nothing that leaves does.
    assert get_run(client, creds, "pub-1")["error"]["message"] == PRIVATE
    assert PRIVATE not in str(hooks) and PRIVATE not in str(events)
    assert PRIVATE not in str(inbox(client, creds.owner_token))


def test_reason_over_500_characters_is_still_refused(
    client: TestClient, creds: TenantCreds
) -> None:
    """The input limit is unchanged: over 500 characters is a 422 naming reason."""
    put_run(client, creds, "pub-2", state="working")
    r = client.post(
        "/v1/runs/pub-2/signals",
        json={"event_id": "e1", "state": "failed", "reason": "y" * 501},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "reason"
    assert get_run(client, creds, "pub-2")["state"] == "working"


def test_report_and_progress_text_are_cleaned_too(client: TestClient, creds: TenantCreds) -> None:
    """The report's summary, trace id and link labels, and a progress message, are
    public as well (feed, webhooks): control characters do not survive there either."""
    put_run(client, creds, "pub-3", state="working")
    r = client.post(
        "/v1/runs/pub-3/progress",
        json={"message": "step 2\n\x07of 5"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 202, r.text
    assert r.json()["run"]["progress"]["message"] == "step 2 of 5"
    signal(
        client,
        creds,
        "pub-3",
        "e1",
        "completed",
        report={
            "summary": "fixed\r\nit",
            "trace_id": "tr\t1",
            "links": [{"label": "P\u202eR", "url": "https://git.example/pr/1"}],
        },
    )
    report = get_run(client, creds, "pub-3")["report"]
    assert report["summary"] == "fixed it"
    assert report["trace_id"] == "tr 1"
    assert report["links"] == [{"label": "PR", "url": "https://git.example/pr/1"}]
