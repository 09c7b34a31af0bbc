"""People on a run (issue 18 item 4): viewers see and do not answer, approvers answer
(the run's, or those a request names), amenders propose; a subject grant gives a member
every run of the subject, existing and future, until revoked; a member with no access
gets 404 everywhere; an amendment can exclude planned operations. Seed 004: Luis may
view the project but not amend Mara's proposal, a teammate who may amend proposes to
exclude the legal-review task, and it becomes an input request to Mara bound to the
version it was made on. Every test runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import SECRET_KEY, bearer
from tests.integration.test_web import other_browser, sign_in

PLANTED = "SECRET-PEOPLE-4417"
LAUNCH = {"type": "project", "id": "launch"}


# --- helpers -----------------------------------------------------------------------------


def put_run(
    client: TestClient, creds: TenantCreds, run_id: str, status: int = 201, **fields: Any
) -> dict[str, Any]:
    body = {
        "owner": creds.owner_email,
        "state": "working",
        "title": f"Title of {run_id}",
        "details": {"secret": PLANTED},
        **fields,
    }
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == status, r.text
    return dict(r.json())


def ask(
    client: TestClient, creds: TenantCreds, run_id: str, request_id: str, **extra: Any
) -> httpx.Response:
    return client.post(
        f"/v1/runs/{run_id}/input-requests",
        json={
            "input_request_id": request_id,
            "kind": "approval",
            "summary": "Move the launch tasks to Friday?",
            "details": {"secret": PLANTED},
            **extra,
        },
        headers=bearer(creds.runtime_key),
    )


def answer(
    client: TestClient, token: str, request_id: str, run_version: int, key: str = "k-1"
) -> httpx.Response:
    return client.post(
        f"/v1/input-requests/{request_id}/responses",
        json={
            "decision": "approve",
            "expected_run_version": run_version,
            "expected_request_version": 1,
        },
        headers={**bearer(token), "Idempotency-Key": key},
    )


def problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert PLANTED not in r.text
    return dict(r.json())


def grant(
    client: TestClient, token: str, user: str, role: str, subject: dict[str, str] = LAUNCH
) -> httpx.Response:
    return client.post(
        "/v1/subject-grants",
        json={"user": user, "subject": subject, "role": role},
        headers=bearer(token),
    )


def recipients(core: Core, tenant_id: str, run_id: str, attention: str) -> set[str]:
    n = t.notifications
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(n.c.recipient_user_id).where(
                n.c.tenant_id == tenant_id, n.c.run_id == run_id, n.c.attention_type == attention
            )
        ).all()
    return {r[0] for r in rows}


def needs_you(client: TestClient, token: str) -> list[str]:
    r = client.get("/v1/runs", params={"group": "needs_you"}, headers=bearer(token))
    assert r.status_code == 200, r.text
    return [run["run_id"] for run in r.json()["runs"]]


def sees(client: TestClient, token: str, run_id: str) -> bool:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(token))
    assert r.status_code in (200, 404), r.text
    return r.status_code == 200


# --- viewers, approvers, per-request approvers --------------------------------------------


def test_a_viewer_sees_the_request_but_may_not_answer_it_and_an_approver_may(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    viewer_id, viewer = add_user(core, creds.tenant_id, "viewer@acme.test")
    approver_id, approver = add_user(core, creds.tenant_id, "approver@acme.test")
    put_run(
        client,
        creds,
        "dates-1",
        authority={"viewers": ["viewer@acme.test"], "approvers": [approver_id]},
    )
    opened = ask(client, creds, "dates-1", "req-1")
    assert opened.status_code == 201, opened.text
    version = opened.json()["run"]["version"]

    # The viewer sees the run and the request, and is told they may not answer it.
    assert sees(client, viewer, "dates-1")
    got = client.get("/v1/input-requests/req-1", headers=bearer(viewer)).json()
    assert got["may_answer"] is False
    refused = problem(answer(client, viewer, "req-1", version), 403)
    assert refused["detail"].startswith("You may see this run but not answer its requests")
    assert (
        client.get("/v1/input-requests/req-1", headers=bearer(creds.owner_token)).json()[
            "input_request"
        ]["state"]
        == "pending"
    )

    # Paged: the owner and the approver; never the viewer, who cannot answer.
    assert recipients(core, creds.tenant_id, "dates-1", "input_required") == {
        creds.owner_id,
        approver_id,
    }
    assert viewer_id not in recipients(core, creds.tenant_id, "dates-1", "input_required")

    # "Needs you" lists it for those who may answer it, not for the viewer.
    assert needs_you(client, approver) == ["dates-1"]
    assert needs_you(client, creds.owner_token) == ["dates-1"]
    assert needs_you(client, viewer) == []

    # The approver answers.
    assert client.get("/v1/input-requests/req-1", headers=bearer(approver)).json()["may_answer"]
    r = answer(client, approver, "req-1", version)
    assert r.status_code == 200, r.text
    assert r.json()["response"]["answered_by"]["id"] == approver_id


def test_a_request_that_names_its_approvers_is_answered_and_paged_only_by_them(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    legal_id, legal = add_user(core, creds.tenant_id, "legal@acme.test")
    _, outsider = add_user(core, creds.tenant_id, "outsider@acme.test")
    add_user(core, creds.tenant_id, "nobody@acme.test")
    put_run(client, creds, "dates-2", authority={"viewers": [legal_id]})

    # Someone who may not see the run cannot be named (nor a non-member).
    for ref in ("nobody@acme.test", "ghost@acme.test"):
        r = ask(client, creds, "dates-2", "req-x", approvers=[ref])
        assert problem(r, 422)["field"] == "approvers"

    opened = ask(client, creds, "dates-2", "req-legal", approvers=["legal@acme.test"])
    assert opened.status_code == 201, opened.text
    assert opened.json()["input_request"]["approvers"] == [legal_id]
    version = opened.json()["run"]["version"]
    assert recipients(core, creds.tenant_id, "dates-2", "input_required") == {legal_id}
    assert needs_you(client, legal) == ["dates-2"]
    assert needs_you(client, creds.owner_token) == []

    # The owner may see it, but the request names who answers it.
    r = answer(client, creds.owner_token, "req-legal", version)
    assert problem(r, 403)["detail"].startswith("You may see this run but not answer this request")
    problem(answer(client, outsider, "req-legal", version), 404)  # cannot even see it
    r = answer(client, legal, "req-legal", version)
    assert r.status_code == 200, r.text

    # The next request names nobody: the run's approvers (the owner) answer again.
    nxt = ask(client, creds, "dates-2", "req-next")
    assert nxt.status_code == 201, nxt.text
    problem(answer(client, legal, "req-next", nxt.json()["run"]["version"]), 403)
    r = answer(client, creds.owner_token, "req-next", nxt.json()["run"]["version"], key="k-2")
    assert r.status_code == 200, r.text


def test_authority_users_keep_their_meaning(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """``authority.users`` (before roles existed): sees, answers, proposes amendments."""
    _, named = add_user(core, creds.tenant_id, "named@acme.test")
    put_run(client, creds, "compat-1", authority={"users": ["named@acme.test"]})
    opened = ask(client, creds, "compat-1", "req-c")
    r = client.post(
        "/v1/runs/compat-1/amendments",
        json={"text": "Call it Friday", "changes": {"title": "Friday moves"}},
        headers=bearer(named),
    )
    assert r.status_code == 201, r.text
    assert answer(client, named, "req-c", opened.json()["run"]["version"]).status_code == 200


# --- subject grants ------------------------------------------------------------------------


def test_a_subject_grant_covers_existing_and_future_runs_until_revoked(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    member_id, member = add_user(core, creds.tenant_id, "pat@acme.test")
    put_run(client, creds, "launch-1", subject={**LAUNCH, "version": "7"})
    put_run(client, creds, "other-1", subject={"type": "project", "id": "billing"})
    assert not sees(client, member, "launch-1")

    # Only admins grant.
    problem(grant(client, member, "pat@acme.test", "approver"), 403)
    problem(grant(client, creds.runtime_key, "pat@acme.test", "approver"), 403)
    problem(grant(client, creds.admin_key, "ghost@acme.test", "approver"), 422)

    r = grant(client, creds.admin_key, "pat@acme.test", "approver")
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["user"]["id"], made["role"], made["subject"], made["runs"]) == (
        member_id,
        "approver",
        LAUNCH,
        1,
    )
    again = grant(client, creds.owner_token, member_id, "approver")  # the same grant: 200
    assert (again.status_code, again.json()["id"]) == (200, made["id"])
    # Another tenant neither sees nor revokes it.
    other = make_tenant(core, "elsewhere")
    assert client.get("/v1/subject-grants", headers=bearer(other.admin_key)).json() == {
        "grants": []
    }
    problem(client.delete(f"/v1/subject-grants/{made['id']}", headers=bearer(other.admin_key)), 404)

    # Existing and future runs of the subject; not another subject's.
    put_run(client, creds, "launch-2", subject=LAUNCH)
    assert sees(client, member, "launch-1") and sees(client, member, "launch-2")
    assert not sees(client, member, "other-1")
    listed = client.get("/v1/runs", headers=bearer(member)).json()["runs"]
    assert sorted(run["run_id"] for run in listed) == ["launch-1", "launch-2"]
    opened = ask(client, creds, "launch-2", "req-g")
    assert client.get("/v1/input-requests/req-g", headers=bearer(member)).json()["may_answer"]
    events = client.get("/v1/events", params={"after": "0"}, headers=bearer(member)).json()
    assert {e["run_id"] for e in events["events"] if e.get("run_id")} == {"launch-1", "launch-2"}

    # A run moved to the subject is covered; one moved off it is not.
    put_run(client, creds, "other-1", status=200, subject=LAUNCH)
    assert sees(client, member, "other-1")
    put_run(client, creds, "other-1", status=200, subject={"type": "project", "id": "billing"})
    assert not sees(client, member, "other-1")

    shown = client.get("/v1/subject-grants", headers=bearer(creds.admin_key)).json()["grants"]
    assert [g["id"] for g in shown] == [made["id"]]
    assert (
        client.get(
            "/v1/subject-grants",
            params={"user": "pat@acme.test"},
            headers=bearer(creds.owner_token),
        ).json()["grants"]
        == shown
    )

    # Revoked: gone from every run of the subject at once, and answering is refused.
    r = client.delete(f"/v1/subject-grants/{made['id']}", headers=bearer(creds.admin_key))
    assert r.status_code == 200, r.text
    assert not sees(client, member, "launch-1") and not sees(client, member, "launch-2")
    assert client.get("/v1/runs", headers=bearer(member)).json()["runs"] == []
    problem(answer(client, member, "req-g", opened.json()["run"]["version"]), 404)
    problem(client.delete(f"/v1/subject-grants/{made['id']}", headers=bearer(creds.admin_key)), 404)

    # A viewer grant (retried under its Idempotency-Key): sees, does not answer.
    body = {"user": member_id, "subject": LAUNCH, "role": "viewer"}
    headers = {**bearer(creds.admin_key), "Idempotency-Key": "grant-viewer"}
    first = client.post("/v1/subject-grants", json=body, headers=headers)
    replay = client.post("/v1/subject-grants", json=body, headers=headers)
    assert (first.status_code, replay.status_code) == (201, 201), replay.text
    assert replay.content == first.content
    assert replay.headers.get("Idempotent-Replayed") == "true"
    assert sees(client, member, "launch-2")
    refused = problem(answer(client, member, "req-g", opened.json()["run"]["version"]), 403)
    assert "not answer" in refused["detail"]


def test_a_member_without_access_gets_404_on_everything_of_the_run(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    _, stranger = add_user(core, creds.tenant_id, "stranger@acme.test")
    put_run(client, creds, "hidden-1", subject=LAUNCH)
    client.post(
        "/v1/runs/hidden-1/operations",
        json={
            "operation_id": "h1",
            "target": {"type": "task", "id": "T-1"},
            "intent": "move to Friday",
        },
        headers=bearer(creds.runtime_key),
    ).raise_for_status()
    opened = ask(client, creds, "hidden-1", "req-h")
    assert opened.status_code == 201, opened.text
    owner_amends = client.post(
        "/v1/runs/hidden-1/amendments",
        json={"text": "Rename", "changes": {"title": "Renamed"}},
        headers=bearer(creds.owner_token),
    )
    assert owner_amends.status_code == 201, owner_amends.text
    amendment_id = owner_amends.json()["amendment"]["id"]
    h = bearer(stranger)
    for r in (
        client.get("/v1/runs/hidden-1", headers=h),
        client.get("/v1/runs/hidden-1/operations", headers=h),
        client.get("/v1/input-requests/req-h", headers=h),
        client.get(f"/v1/input-requests/{amendment_id}", headers=h),
        answer(client, stranger, "req-h", opened.json()["run"]["version"]),
        client.post(
            "/v1/runs/hidden-1/amendments",
            json={"text": "Let me in"},
            headers={**h, "Idempotency-Key": "a-1"},
        ),
        client.post("/v1/runs/hidden-1/cancel", json={"reason": "no"}, headers=h),
    ):
        problem(r, 404)
    events = client.get("/v1/events", params={"after": "0"}, headers=h).json()["events"]
    assert [e for e in events if e.get("run_id") == "hidden-1"] == []


# --- amendments: who may propose, excluding operations (seed 004) -------------------------


def test_luis_may_view_the_project_but_not_amend_and_an_amender_excludes_legal_review(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    _, luis = add_user(core, creds.tenant_id, "luis@acme.test")
    ana_id, ana = add_user(core, creds.tenant_id, "ana@acme.test")
    put_run(client, creds, "dates", subject=LAUNCH, objective="Move twelve launch tasks")
    tasks = [f"task-{i}" for i in range(1, 13)]
    tasks[6] = "legal-review"
    for i, task in enumerate(tasks, start=1):
        client.post(
            "/v1/runs/dates/operations",
            json={
                "operation_id": f"t{i}",
                "target": {"type": "task", "id": task, "version": 4},
                "intent": "move to Friday",
            },
            headers=bearer(creds.runtime_key),
        ).raise_for_status()
    assert grant(client, creds.admin_key, "luis@acme.test", "viewer").status_code == 201
    assert grant(client, creds.admin_key, "ana@acme.test", "amender").status_code == 201
    exclude = {
        "text": "Leave legal review out",
        "changes": {"exclude_operations": ["task:legal-review"]},
    }

    # Luis may see the project's job, but not amend Mara's proposal: refused, saying so.
    assert sees(client, luis, "dates")
    refused = client.post("/v1/runs/dates/amendments", json=exclude, headers=bearer(luis))
    assert problem(refused, 403)["detail"].startswith(
        "You may see this run but not propose amendments"
    )
    assert client.get("/v1/runs/dates", headers=bearer(luis)).json()["pending_amendments"] == []

    # An operation that is not in the ledger, or no longer planned, cannot be excluded.
    bad = {"text": "x", "changes": {"exclude_operations": ["task:nope"]}}
    problem(client.post("/v1/runs/dates/amendments", json=bad, headers=bearer(ana)), 422)

    # Ana may amend: her proposal becomes an input request to the owner, bound to the
    # run version it was made on; nothing changes yet.
    before = client.get("/v1/runs/dates", headers=bearer(creds.owner_token)).json()
    r = client.post("/v1/runs/dates/amendments", json=exclude, headers=bearer(ana))
    assert r.status_code == 201, r.text
    proposed = r.json()
    amendment = proposed["amendment"]
    assert amendment["changes"] == {"exclude_operations": ["t7"]}
    assert amendment["base"] == {"operations": {"t7": "planned"}}
    assert amendment["run_version"] == before["version"]
    req = proposed["input_request"]
    assert (req["id"], req["run_version"], req["kind"]) == (
        amendment["id"],
        before["version"],
        "approval",
    )
    assert recipients(core, creds.tenant_id, "dates", "amendment") == {creds.owner_id}
    problem(
        client.post(
            f"/v1/input-requests/{req['id']}/responses",
            json={
                "decision": "approve",
                "expected_run_version": req["run_version"],
                "expected_request_version": 1,
            },
            headers={**bearer(ana), "Idempotency-Key": "ana-1"},
        ),
        403,
    )

    # The runtime moving on (a new run version) does not make it stale; Mara approves it
    # against the version it was made on.
    moved = ask(client, creds, "dates", "req-dates")
    assert moved.json()["run"]["version"] > req["run_version"]
    r = client.post(
        f"/v1/input-requests/{req['id']}/responses",
        json={
            "decision": "approve",
            "expected_run_version": req["run_version"],
            "expected_request_version": 1,
        },
        headers={**bearer(creds.owner_token), "Idempotency-Key": "mara-1"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["amendment"]["state"] == "approved"
    ops = {
        o["operation_id"]: o
        for o in client.get("/v1/runs/dates/operations", headers=bearer(creds.owner_token)).json()[
            "operations"
        ]
    }
    assert ops["t7"]["state"] == "not_started"
    assert ops["t7"]["evidence"] == {
        "excluded_by_amendment": amendment["id"],
        "approved_by": creds.owner_id,
    }
    assert {o["state"] for k, o in ops.items() if k != "t7"} == {"planned"}
    assert ana_id != creds.owner_id
    history = client.get("/v1/runs/dates", headers=bearer(creds.owner_token)).json()
    assert history["operations"]["counts"] == {"planned": 11, "not_started": 1}

    # The job changed with Mara's approval: the left-out task neither blocks a verified
    # completion nor stays required by done_when; the outcome text still names it.
    r = client.put(
        "/v1/runs/dates",
        json={
            "owner": creds.owner_email,
            "done_when": {
                "text": "all twelve moved",
                "operations": [f"t{i}" for i in range(1, 13)],
            },
        },
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    for i in range(1, 13):
        if i == 7:
            continue
        for state in ("sent", "confirmed"):
            client.patch(
                f"/v1/runs/dates/operations/t{i}",
                json={"state": state},
                headers=bearer(creds.runtime_key),
            ).raise_for_status()
    done = client.post(
        "/v1/runs/dates/signals",
        json={"event_id": "dates-done", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    assert done.status_code == 200, done.text
    finished = client.get("/v1/runs/dates", headers=bearer(creds.owner_token)).json()
    assert finished["state"] == "completed", finished
    assert finished["outcome"] == "verified", finished
    assert finished["badge"]["label"] == "Completed"
    with core.db.read() as conn:
        [note] = conn.execute(
            sa.select(t.notifications).where(
                t.notifications.c.run_id == "dates",
                t.notifications.c.attention_type == "completed",
            )
        ).all()
    assert "left out by an approved amendment: t7" in note.reason


def test_an_exclusion_whose_operation_was_sent_meanwhile_is_refused(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    _, amender = add_user(core, creds.tenant_id, "amy@acme.test")
    put_run(client, creds, "ex-1", authority={"amenders": ["amy@acme.test"]})
    for op_id in ("a", "b"):
        client.post(
            "/v1/runs/ex-1/operations",
            json={"operation_id": op_id, "target": {"type": "task", "id": op_id}, "intent": "go"},
            headers=bearer(creds.runtime_key),
        ).raise_for_status()
    r = client.post(
        "/v1/runs/ex-1/amendments",
        json={"text": "skip b", "changes": {"exclude_operations": ["b"]}},
        headers=bearer(amender),
    )
    assert r.status_code == 201, r.text
    req = r.json()["input_request"]
    client.patch(
        "/v1/runs/ex-1/operations/b", json={"state": "sent"}, headers=bearer(creds.runtime_key)
    ).raise_for_status()
    body = {
        "decision": "approve",
        "expected_run_version": req["run_version"],
        "expected_request_version": 1,
    }
    r = client.post(
        f"/v1/input-requests/{req['id']}/responses",
        json=body,
        headers={**bearer(creds.owner_token), "Idempotency-Key": "o-1"},
    )
    assert "operation b" in problem(r, 409)["detail"]
    # A sent operation cannot be proposed for exclusion at all.
    r = client.post(
        "/v1/runs/ex-1/amendments",
        json={"text": "skip b", "changes": {"exclude_operations": ["b"]}},
        headers=bearer(amender),
    )
    assert "only planned operations" in problem(r, 422)["detail"]


# --- the web app -----------------------------------------------------------------------------


def test_the_run_page_shows_a_viewer_the_request_without_buttons_and_says_why(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    viewer_id, _ = add_user(core, creds.tenant_id, "viewer@acme.test")
    approver_id, _ = add_user(core, creds.tenant_id, "approver@acme.test")
    put_run(client, creds, "web-1", authority={"viewers": [viewer_id], "approvers": [approver_id]})
    opened = ask(client, creds, "web-1", "req-w").json()
    form = {
        "decision": "approve",
        "expected_run_version": str(opened["run"]["version"]),
        "expected_request_version": "1",
    }

    viewer = other_browser(client)
    csrf = sign_in(viewer, core, creds.tenant_id, viewer_id)
    page = viewer.get("/runs/web-1").text
    assert "Move the launch tasks to Friday?" in page
    assert 'id="respond-form"' not in page and 'id="approve"' not in page
    assert "You may see this run but not answer its requests" in page
    assert 'id="propose-form"' not in page
    assert "You may see this run but not propose amendments" in page
    r = viewer.post(
        "/runs/web-1/input-requests/req-w/respond",
        data={**form, "csrf_token": csrf, "idempotency_key": "v-1"},
    )
    assert r.status_code == 403
    assert "You may see this run but not answer its requests" in r.text

    approver = other_browser(client)
    csrf = sign_in(approver, core, creds.tenant_id, approver_id)
    page = approver.get("/runs/web-1").text
    assert 'id="respond-form"' in page and "not answer its requests" not in page
    r = approver.post(
        "/runs/web-1/input-requests/req-w/respond",
        data={**form, "csrf_token": csrf, "idempotency_key": "a-1"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    got = client.get("/v1/input-requests/req-w", headers=bearer(creds.owner_token)).json()
    assert got["input_request"]["answered_by"]["id"] == approver_id


# --- the command line ------------------------------------------------------------------------


def test_the_cli_grants_lists_and_revokes_a_subject(
    client: TestClient,
    core: Core,
    creds: TenantCreds,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from runbell.cli import main

    monkeypatch.setenv("RUNBELL_DATABASE_URL", settings.resolved_database_url())
    monkeypatch.setenv("RUNBELL_SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("RUNBELL_DATA_DIR", str(settings.data_dir))
    _, member = add_user(core, creds.tenant_id, "cli@acme.test")
    put_run(client, creds, "cli-1", subject=LAUNCH)
    assert not sees(client, member, "cli-1")

    base = ["--tenant", creds.tenant_id]
    code = main(["grant", "add", "cli@acme.test", *base, "--subject", "project:launch"])
    out, err = capsys.readouterr()
    assert code == 0, err
    made = json.loads(out)
    assert (made["role"], made["subject"], made["runs"]) == ("viewer", LAUNCH, 1)
    assert sees(client, member, "cli-1")

    assert main(["grant", "list", *base, "--user", "cli@acme.test"]) == 0
    assert [g["id"] for g in json.loads(capsys.readouterr().out)["grants"]] == [made["id"]]
    assert main(["grant", "add", "cli@acme.test", *base, "--subject", "launch"]) != 0
    assert "is not TYPE:ID" in capsys.readouterr().err
    assert main(["grant", "add", "cli@acme.test", *base, "--subject", "p:x", "--role", "boss"])
    assert "role must be one of" in capsys.readouterr().err

    assert main(["grant", "revoke", made["id"], *base]) == 0
    assert f"revoked {made['id']}" in capsys.readouterr().out
    assert not sees(client, member, "cli-1")
    assert main(["grant", "revoke", made["id"], *base]) != 0


def test_an_amender_proposes_an_exclusion_from_the_run_page(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    amender_id, _ = add_user(core, creds.tenant_id, "amy@acme.test")
    put_run(client, creds, "web-ex", authority={"amenders": [amender_id]})
    for op_id, task in (("t1", "design"), ("t7", "legal-review")):
        client.post(
            "/v1/runs/web-ex/operations",
            json={"operation_id": op_id, "target": {"type": "task", "id": task}, "intent": "move"},
            headers=bearer(creds.runtime_key),
        ).raise_for_status()
    browser = other_browser(client)
    csrf = sign_in(browser, core, creds.tenant_id, amender_id)
    page = browser.get("/runs/web-ex").text
    assert 'id="propose-form"' in page and 'id="amend-exclude"' in page
    r = browser.post(
        "/runs/web-ex/amendments",
        data={
            "csrf_token": csrf,
            "idempotency_key": "web-ex-1",
            "text": "Leave legal review out",
            "exclude_operations": "task:legal-review",
        },
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    pending = client.get("/v1/runs/web-ex", headers=bearer(creds.owner_token)).json()
    [amendment] = pending["pending_amendments"]
    assert amendment["changes"] == {"exclude_operations": ["t7"]}
    # Something that is not in the ledger is refused on the page, saying why.
    r = browser.post(
        "/runs/web-ex/amendments",
        data={
            "csrf_token": csrf,
            "idempotency_key": "web-ex-2",
            "text": "x",
            "exclude_operations": "task:nope",
        },
    )
    assert r.status_code == 422
    assert "is neither an operation id nor a target" in r.text


def test_the_owner_watching_does_not_hold_back_a_request_put_to_others(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A tenant rule sends requests to the inbox only while the owner watches. A request
    that names its own approvers, not the owner, is theirs: the owner's watching does not
    hold back its push; a request the owner is told of is held back as the rule says."""
    rule = {
        "id": "acme.watching",
        "when": {"attention": "input_required", "owner_present": True},
        "decision": "inbox",
        "urgency": "normal",
    }
    r = client.put("/v1/policy", json={"rules": [rule]}, headers=bearer(creds.admin_key))
    assert r.status_code == 200, r.text
    legal_id, _ = add_user(core, creds.tenant_id, "legal@acme.test")
    put_run(client, creds, "watched", authority={"viewers": [legal_id]})
    core.presence.enter(creds.tenant_id, creds.owner_id)
    try:
        theirs = ask(client, creds, "watched", "req-theirs", approvers=[legal_id]).json()
        mine = ask(client, creds, "watched", "req-mine").json()
    finally:
        core.presence.leave(creds.tenant_id, creds.owner_id)
    [to_legal] = theirs["notifications"]
    assert (to_legal["decision"], to_legal["rule_id"]) == ("push", "input_required.default")
    [to_owner] = mine["notifications"]
    assert (to_owner["decision"], to_owner["rule_id"]) == ("inbox", "acme.watching")
