"""The policy dry-run (issue 10 item 9): recorded transitions replayed through a candidate
policy match what that policy decides when applied for real. SQLite and PostgreSQL,
injectable clock; nothing is sent or written by the dry-run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user
from tests.conftest import bearer

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

# Policy B: quieter plain failures, louder requested completions. Neither changes which
# completions create a notification, so recent_completions replays identically.
CANDIDATE = {
    "rules": [
        {
            "id": "failed.quiet",
            "when": {"attention": "failed", "error_user_action": False},
            "decision": "inbox",
            "urgency": "low",
        },
        {
            "id": "completed.requested_loud",
            "when": {"attention": "completed", "notify_on_complete": True},
            "decision": "push",
            "urgency": "time_sensitive",
        },
    ]
}

# (run suffix, run fields, seconds of work, signal)
SCRIPT: list[tuple[str, dict[str, Any], int, dict[str, Any]]] = [
    ("asked", {"notify_on_complete": True}, 0, {"state": "completed"}),
    ("plain-1", {}, 0, {"state": "completed"}),
    ("plain-2", {}, 0, {"state": "completed"}),
    ("plain-3", {}, 0, {"state": "completed"}),
    ("plain-4", {}, 0, {"state": "completed"}),
    ("long", {}, 1000, {"state": "completed"}),
    ("repair", {}, 0, {"state": "failed", "error": {"user_action_required": True}}),
    ("retrying", {}, 0, {"state": "failed", "error": {"retryable": True}}),
    ("broke", {}, 0, {"state": "failed"}),
    ("review", {}, 0, {"state": "completed", "effects_verified": False}),
    ("stopped", {}, 0, {"state": "cancelled"}),
]


def run_script(client: TestClient, creds: TenantCreds, clock: Clock, suffix: str) -> None:
    runtime = bearer(creds.runtime_key)
    for name, fields, work_s, signal in SCRIPT:
        run_id = f"{name}-{suffix}"
        body = {"owner": creds.owner_email, "state": "working", **fields}
        r = client.put(f"/v1/runs/{run_id}", json=body, headers=runtime)
        assert r.status_code == 201, r.text
        clock.advance(work_s)
        r = client.post(
            f"/v1/runs/{run_id}/signals",
            json={"event_id": f"{run_id}-end", **signal},
            headers=runtime,
        )
        assert r.json()["outcome"] == "applied", r.text
        clock.advance(1)


def recorded(core: Core, tenant_id: str, suffix: str) -> dict[str, dict[str, Any]]:
    """Each script step's terminal decision as recorded, by step name."""
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(t.transitions.c.run_id, t.transitions.c.decision).where(
                t.transitions.c.tenant_id == tenant_id, t.transitions.c.run_id.like(f"%-{suffix}")
            )
        ).all()
    out = {}
    for run_id, decision in rows:
        if decision and decision.get("inputs"):
            out[run_id.removesuffix(f"-{suffix}")] = {
                "rule_id": decision["rule_id"],
                "decision": decision["kind"],
                "urgency": decision["urgency"],
            }
    return out


def counts(table: sa.Table, core: Core) -> int:
    with core.db.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def test_dry_run_matches_what_the_candidate_decides_when_applied(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    admin = bearer(creds.admin_key)
    clock.freeze(T0)
    run_script(client, creds, clock, "a")  # under the default policy (A)
    before_a = recorded(core, creds.tenant_id, "a")
    assert len(before_a) == len(SCRIPT)

    written = (counts(t.notifications, core), counts(t.deliveries, core))
    clock.freeze(T0 + timedelta(hours=1))
    r = client.post(
        "/v1/policy/dry-run",
        params={"since": (T0 - timedelta(seconds=1)).isoformat()},
        json=CANDIDATE,
        headers=admin,
    )
    assert r.status_code == 200, r.text
    dry = r.json()
    assert (counts(t.notifications, core), counts(t.deliveries, core)) == written  # no writes
    assert dry["capped"] is False
    assert dry["replayed"] == len(SCRIPT)
    changed = {c["run_id"].removesuffix("-a"): c for c in dry["changes"]}
    # "retrying": B's rule comes first and catches self-retrying failures too.
    assert set(changed) == {"asked", "broke", "retrying"}
    assert changed["broke"]["before"] == {
        "rule_id": "failed.default",
        "decision": "push",
        "urgency": "normal",
    }
    assert dry["changed"] == 3

    # Switch to B for real, and replay the same signals on fresh runs, two hours on.
    assert client.put("/v1/policy", json=CANDIDATE, headers=admin).status_code == 200
    clock.freeze(T0 + timedelta(hours=3))
    run_script(client, creds, clock, "b")
    real_b = recorded(core, creds.tenant_id, "b")
    predicted = {
        step: (changed[step]["after"] if step in changed else before_a[step]) for step in before_a
    }
    assert predicted == real_b
    # The candidate's counts are what B recorded, per decision and urgency.
    by_decision: dict[str, int] = {}
    for side in real_b.values():
        by_decision[side["decision"]] = by_decision.get(side["decision"], 0) + 1
    assert {k: v["candidate"] for k, v in dry["by_decision"].items() if v["candidate"]} == (
        by_decision
    )
    assert sum(row["current"] for row in dry["counts"]) == len(SCRIPT)


def test_dry_run_caps_validates_and_is_for_admins(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    admin = bearer(creds.admin_key)
    clock.freeze(T0)
    run_script(client, creds, clock, "a")
    clock.freeze(T0 + timedelta(days=1))
    r = client.post("/v1/policy/dry-run", params={"limit": 3}, json=CANDIDATE, headers=admin)
    body = r.json()
    assert r.status_code == 200, r.text
    assert (body["capped"], body["read"], body["cap"]) == (True, 3, 3)
    assert "oldest 3" in body["capped_note"]
    assert body["replayed"] + body["skipped_without_attention"] == 3

    # The default window is the last 7 days: eight days on, nothing is left in it.
    clock.freeze(T0 + timedelta(days=8))
    empty = client.post("/v1/policy/dry-run", json=CANDIDATE, headers=admin).json()
    assert (empty["replayed"], empty["changes"]) == (0, [])

    bad = client.post(
        "/v1/policy/dry-run", json={"rules": [{"id": "x", "decision": "shout"}]}, headers=admin
    )
    assert bad.status_code == 422
    assert "decision" in bad.text
    naive = client.post(
        "/v1/policy/dry-run", params={"since": "2026-11-20T09:00:00"}, json={}, headers=admin
    )
    assert naive.status_code == 422
    backwards = client.post(
        "/v1/policy/dry-run",
        params={"since": T0.isoformat(), "until": (T0 - timedelta(hours=1)).isoformat()},
        json={},
        headers=admin,
    )
    assert backwards.status_code == 422
    runtime = client.post("/v1/policy/dry-run", json={}, headers=bearer(creds.runtime_key))
    assert runtime.status_code == 403
    _, member_token = add_user(core, creds.tenant_id, "member@example.com")
    member = client.post("/v1/policy/dry-run", json={}, headers=bearer(member_token))
    assert member.status_code == 403
