"""Seed 004's whole story, on SQLite and PostgreSQL, through the HTTP API and the web app
(issue 18's acceptance test).

One conversation holds two jobs. Mara asks an agent to move twelve launch tasks to Friday
(the date job, a proposal against those tasks); before approving she asks for a launch
announcement (a second job in the same conversation, whose copywriting agent has no
authority to change dates, and which depends on the not-yet-approved proposal). Luis may
view the project but not amend Mara's proposal. Mara approves from another device. The
worker is replaced while one update is in flight; a helper with a delegated token reports
what it found without deciding; one reply is lost; the announcement is cancelled midway.
The date job ends "9 confirmed, 2 conflicts, 1 uncertain" — and every screen and
notification says exactly that, never "done".
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import bearer
from tests.integration.test_web import sign_in

PROJECT = {"type": "project", "id": "launch"}
TASKS = [f"t{i}" for i in range(1, 13)]


def ok(r: Any, status: int = 200) -> dict[str, Any]:
    assert r.status_code == status, r.text
    return dict(r.json()) if r.content else {}


def key(client: TestClient, creds: TenantCreds, name: str, caps: list[str], runs: str) -> str:
    body = {"name": name, "capabilities": caps, "run_patterns": [runs]}
    return str(ok(client.post("/v1/keys", json=body, headers=bearer(creds.admin_key)), 201)["key"])


def test_seed_004_two_jobs_one_conversation_honest_to_the_end(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    luis_id, luis = add_user(core, creds.tenant_id, "luis@example.com")
    mara = creds.owner_token

    # Least authority for each agent: the orchestrating worker may act on launch jobs
    # only; the copywriter gets a token for its announcement that cannot settle anything.
    worker = key(
        client,
        creds,
        "launch-worker",
        [
            "runs.report",
            "operations.declare",
            "operations.settle",
            "input_requests.create",
            "runs.read",
            "runs.cancel",
        ],
        "launch-*",
    )
    r = client.put(
        "/v1/runs/other-team-job", json={"owner": creds.owner_email}, headers=bearer(worker)
    )
    assert r.status_code == 404, r.text  # outside its scope, as if it did not exist
    # Luis may view the project's jobs, nothing more.
    grant = {"user": "luis@example.com", "subject": PROJECT, "role": "viewer"}
    ok(
        client.post(
            "/v1/subject-grants",
            json=grant,
            headers={**bearer(creds.admin_key), "Idempotency-Key": "g-1"},
        ),
        201,
    )

    # --- the date job: twelve tasks, a proposal against them ------------------------------
    ok(
        client.put(
            "/v1/runs/launch-dates",
            json={
                "owner": creds.owner_email,
                "title": "Move launch tasks to Friday",
                "objective": "Move the twelve launch tasks to Friday",
                "subject": PROJECT,
                "state": "working",
                "worker_id": "worker-a",
                "links": [{"kind": "conversation", "id": "conv-1"}],
                "done_when": {"text": "all twelve tasks are on Friday", "operations": TASKS},
            },
            headers=bearer(worker),
        ),
        201,
    )
    ops = [
        {
            "operation_id": t,
            "target": {"type": "task", "id": f"T-{i}", "version": "3"},
            "intent": "move to Friday",
        }
        for i, t in enumerate(TASKS, 1)
    ]
    ok(
        client.post(
            "/v1/runs/launch-dates/operations", json={"operations": ops}, headers=bearer(worker)
        ),
        201,
    )
    ok(
        client.post(
            "/v1/runs/launch-dates/input-requests",
            json={
                "input_request_id": "dates-v1",
                "kind": "approval",
                "summary": "Move 12 launch tasks to Friday?",
            },
            headers=bearer(worker),
        ),
        201,
    )

    # --- the announcement: same conversation, no authority over dates -------------------
    ok(
        client.put(
            "/v1/runs/launch-announce",
            json={
                "owner": creds.owner_email,
                "title": "Draft the launch announcement",
                "subject": PROJECT,
                "state": "working",
                "links": [{"kind": "conversation", "id": "conv-1"}],
                "depends_on": {"run": "launch-dates", "request_id": "dates-v1"},
            },
            headers=bearer(worker),
        ),
        201,
    )
    copywriter = ok(
        client.post(
            "/v1/runs/launch-announce/delegations",
            json={
                "capabilities": ["runs.report", "operations.declare", "runs.read"],
                "expires_in": 3600,
                "name": "copywriter",
            },
            headers=bearer(worker),
        ),
        201,
    )["token"]
    announce = ok(client.get("/v1/runs/launch-announce", headers=bearer(mara)))
    assert announce["dependency"]["state"] == "pending"
    assert announce["dependency"]["text"] == "Depends on a proposal that is not approved yet"
    # The copywriter cannot touch the date job (not even learn it exists) nor settle.
    r = client.post(
        "/v1/runs/launch-dates/operations",
        json={"operation_id": "x", "target": {"type": "task", "id": "T-1"}, "intent": "move"},
        headers=bearer(copywriter),
    )
    assert r.status_code == 404, r.text
    r = client.get("/v1/runs/launch-dates", headers=bearer(copywriter))
    assert r.status_code == 404, r.text
    r = client.post(
        "/v1/runs/launch-announce/operations",
        json={
            "operation_id": "post-1",
            "target": {"type": "post", "id": "blog"},
            "intent": "publish the announcement",
        },
        headers=bearer(copywriter),
    )
    ok(r, 201)
    r = client.patch(
        "/v1/runs/launch-announce/operations/post-1",
        json={"state": "sent"},
        headers=bearer(copywriter),
    )
    assert r.status_code == 403 and r.json()["missing_capability"] == "operations.settle"
    # Every job of the conversation, found by its link.
    jobs = ok(client.get("/v1/runs", params={"link": "conversation:conv-1"}, headers=bearer(mara)))
    assert sorted(run["run_id"] for run in jobs["runs"]) == ["launch-announce", "launch-dates"]

    # --- Luis: may view, may not answer, may not amend Mara's proposal --------------------
    seen = ok(client.get("/v1/runs/launch-dates", headers=bearer(luis)))
    assert seen["pending_input_request"]["id"] == "dates-v1"
    version = seen["version"]
    answer = {"decision": "approve", "expected_run_version": version, "expected_request_version": 1}
    r = client.post(
        "/v1/input-requests/dates-v1/responses",
        json=answer,
        headers={**bearer(luis), "Idempotency-Key": "luis-1"},
    )
    assert r.status_code == 403 and "may see this run but not answer" in r.json()["detail"]
    r = client.post(
        "/v1/runs/launch-dates/amendments",
        json={"text": "Exclude the legal-review task", "changes": {"exclude_operations": ["t7"]}},
        headers={**bearer(luis), "Idempotency-Key": "luis-2"},
    )
    assert r.status_code == 403 and "not propose amendments" in r.json()["detail"], r.text

    # --- Mara approves the original proposal from another device ------------------------
    ok(
        client.post(
            "/v1/input-requests/dates-v1/responses",
            json=answer,
            headers={**bearer(mara), "Idempotency-Key": "phone-1"},
        )
    )
    announce = ok(client.get("/v1/runs/launch-announce", headers=bearer(mara)))
    assert announce["dependency"]["state"] == "approved"
    notes = ok(client.get("/v1/notifications", headers=bearer(mara)))["notifications"]
    told = [
        n for n in notes if n["run_id"] == "launch-announce" and n["attention_type"] == "dependency"
    ]
    assert len(told) == 1  # once, however the answer was retried

    # --- the work: worker-a sends all twelve, then is replaced with one in flight --------
    first = ok(
        client.post(
            "/v1/runs/launch-dates/claim", json={"worker_id": "worker-a"}, headers=bearer(worker)
        )
    )["epoch"]
    for t in TASKS:
        ok(
            client.patch(
                f"/v1/runs/launch-dates/operations/{t}",
                json={"state": "sent", "epoch": first},
                headers=bearer(worker),
            )
        )
    for t in TASKS[:8]:
        ok(
            client.patch(
                f"/v1/runs/launch-dates/operations/{t}",
                json={"state": "confirmed", "epoch": first, "evidence": {"receipt": f"r-{t}"}},
                headers=bearer(worker),
            )
        )
    taken = ok(
        client.post(
            "/v1/runs/launch-dates/claim",
            json={"worker_id": "worker-b", "reason": "worker-a stopped answering"},
            headers=bearer(worker),
        )
    )
    assert taken["takeover"] is True and taken["previous_worker_may_still_act"] is True
    epoch = taken["epoch"]
    # In flight means blocked, also after the takeover: no retry under a new id.
    r = client.post(
        "/v1/runs/launch-dates/operations",
        json={
            "operation_id": "t12-retry",
            "epoch": epoch,
            "target": {"type": "task", "id": "T-12", "version": "3"},
            "intent": "move to Friday",
        },
        headers=bearer(worker),
    )
    assert r.status_code == 409 and "'t12'" in r.json()["detail"], r.text
    # A late update from the replaced worker is refused.
    r = client.patch(
        "/v1/runs/launch-dates/operations/t9",
        json={"state": "confirmed", "epoch": epoch - 1},
        headers=bearer(worker),
    )
    assert r.status_code == 409 and "superseded worker" in r.json()["detail"]

    # A dependency checker with a delegated token: reads and reports, never decides.
    checker = ok(
        client.post(
            "/v1/runs/launch-dates/delegations",
            json={
                "capabilities": ["runs.read", "runs.report"],
                "expires_in": 3600,
                "name": "dependency checker",
            },
            headers=bearer(worker),
        ),
        201,
    )["token"]
    r = client.post(
        "/v1/runs/launch-dates/delegations",
        json={"capabilities": ["runs.read", "runs.report"], "expires_in": 3600, "name": "nested"},
        headers=bearer(checker),
    )
    assert r.status_code in (403, 404), r.text  # a token mints nothing
    ok(
        client.post(
            "/v1/runs/launch-dates/operations/t10/findings",
            json={"finding": "conflict", "evidence": {"holiday": "Friday is a holiday in DE"}},
            headers=bearer(checker),
        ),
        201,
    )
    r = client.patch(
        "/v1/runs/launch-dates/operations/t10", json={"state": "conflict"}, headers=bearer(checker)
    )
    assert r.status_code == 403, r.text  # a finding is not a decision
    r = client.get("/v1/runs/launch-announce", headers=bearer(checker))
    assert r.status_code == 404  # bound to its run

    # The new owner settles: one more confirmed, two conflicts, one reply lost.
    def settle(t: str, state: str, **evidence: str) -> None:
        ok(
            client.patch(
                f"/v1/runs/launch-dates/operations/{t}",
                json={"state": state, "epoch": epoch, "evidence": evidence or None},
                headers=bearer(worker),
            )
        )

    settle("t9", "confirmed", receipt="r-t9")
    settle("t10", "conflict", status="409 locked by legal")
    settle("t11", "conflict", status="409 version changed")
    settle("t12", "uncertain", error="timeout after 30 s")

    # --- the announcement is cancelled midway; the date job does not move --------------
    before = ok(client.get("/v1/runs/launch-dates", headers=bearer(mara)))
    ok(
        client.post(
            "/v1/runs/launch-announce/cancel",
            json={"reason": "wait for the dates"},
            headers={**bearer(mara), "Idempotency-Key": "cancel-1"},
        ),
        202,
    )
    ok(
        client.post(
            "/v1/runs/launch-announce/signals",
            json={"event_id": "announce-stop", "state": "cancelled"},
            headers=bearer(copywriter),
        )
    )
    after = ok(client.get("/v1/runs/launch-dates", headers=bearer(mara)))
    assert (after["state"], after["version"]) == (before["state"], before["version"])

    # --- the date job "completes": the ledger says what that is worth ------------------
    r = client.post(
        "/v1/runs/launch-dates/signals",
        json={"event_id": "dates-done-by-helper", "state": "completed"},
        headers=bearer(checker),
    )
    assert r.status_code == 403  # only the completion owner completes
    done = ok(
        client.post(
            "/v1/runs/launch-dates/signals",
            json={
                "event_id": "dates-done",
                "state": "completed",
                "worker_id": "worker-b",
                "report": {"summary": "All tasks moved to Friday"},
            },
            headers=bearer(worker),
        )
    )
    assert done["run"]["outcome"] == "needs_review"
    [note] = done["notifications"]
    assert note["attention_type"] == "needs_review"
    assert note["reason"].startswith("9 confirmed, 2 conflicts, 1 uncertain")
    shown = ok(client.get("/v1/runs/launch-dates", headers=bearer(mara)))
    assert shown["operations"]["text"] == "9 confirmed, 2 conflicts, 1 uncertain"
    assert shown["badge"]["label"] == "Needs review"
    assert shown["pending_review"]["summary"] == (
        "Review the outcome: 9 confirmed, 2 conflicts, 1 uncertain"
    )
    assert shown["completion_owner"]["worker_id"] == "worker-b"
    mine = ok(client.get("/v1/notifications", headers=bearer(mara)))["notifications"]
    about = [n["attention_type"] for n in mine if n["run_id"] == "launch-dates"]
    assert "completed" not in about  # no success alert exists
    # The announcement job is cancelled, and said so; nothing about it claims success.
    announce = ok(client.get("/v1/runs/launch-announce", headers=bearer(mara)))
    assert announce["state"] == "cancelled" and announce["badge"]["label"] == "Cancelled"

    # --- the trace: who or what caused each step, no secret anywhere -------------------
    trace = client.get("/v1/runs/launch-dates/history", headers=bearer(mara))
    steps = ok(trace)["steps"]
    assert worker not in trace.text and checker not in trace.text and mara not in trace.text
    kinds = {s["kind"] for s in steps}
    assert {"owner_change", "transition"} <= kinds, kinds
    actors = [s.get("actor") or {} for s in steps]
    assert any(a.get("kind") == "delegated" for a in actors)  # the checker's finding
    assert any(a.get("worker_id") == "worker-b" for a in actors)
    assert any(a.get("user_id") == creds.owner_id for a in actors)  # Mara's approval

    # --- every screen says the same --------------------------------------------------
    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/runs/launch-dates").text
    assert 'data-badge="needs-review">Needs review</span>' in page
    assert "9 confirmed, 2 conflicts, 1 uncertain" in page
    assert "The agent reports:</span> All tasks moved to Friday" in page
    assert ">Completed</span>" not in page and "Nothing to decide" not in page
    assert "Ask the agent to retry the 2 that went wrong" in page
    assert "worker-b" in page  # who owns the run now
    overview = client.get("/runs").text
    assert 'data-badge="needs-review">Needs review</span>' in overview
    inbox = client.get("/").text
    needs_you = inbox[inbox.index('id="needs-you-heading"') : inbox.index('id="fyi-heading"')]
    assert "Move launch tasks to Friday" in needs_you  # the review waits for Mara's decision
    announce_page = client.get("/runs/launch-announce").text
    assert "Depends on a proposal that was approved" in announce_page  # as it stands now

    # Luis, signed in, sees the job but no button to answer anything.
    luis_browser = TestClient(client.app)
    sign_in(luis_browser, core, creds.tenant_id, luis_id)
    luis_page = luis_browser.get("/runs/launch-dates").text
    assert 'data-badge="needs-review">Needs review</span>' in luis_page
    assert 'name="decision"' not in luis_page
