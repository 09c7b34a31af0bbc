"""Jobs (issue 18 item 5, seed 004): what counts as done, links to conversations, and one
job depending on another job's not-yet-approved proposal. Mara's date job owns a
proposal; the announcement job (Anna's) depends on it. Every test runs on SQLite and on
PostgreSQL, through the API (and the run page where the page is what is promised).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows import input_requests
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import bearer
from tests.integration.test_web import sign_in

# --- helpers -----------------------------------------------------------------------------


def put(client: TestClient, key: str, run_id: str, **fields: Any) -> httpx.Response:
    return client.put(f"/v1/runs/{run_id}", json=fields, headers=bearer(key))


def make_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> dict[str, Any]:
    body = {"owner": creds.owner_email, "state": "working", **fields}
    r = put(client, creds.runtime_key, run_id, **body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def get_run(client: TestClient, token: str, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return dict(r.json())


def ask(client: TestClient, creds: TenantCreds, run_id: str, request_id: str) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/input-requests",
        json={
            "input_request_id": request_id,
            "kind": "approval",
            "summary": "Move twelve launch tasks to Friday?",
        },
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def answer(
    client: TestClient, token: str, request_id: str, decision: str, run_version: int, key: str
) -> httpx.Response:
    return client.post(
        f"/v1/input-requests/{request_id}/responses",
        json={
            "decision": decision,
            "expected_run_version": run_version,
            "expected_request_version": 1,
        },
        headers={**bearer(token), "Idempotency-Key": key},
    )


def signal(client: TestClient, creds: TenantCreds, run_id: str, event_id: str, state: str) -> None:
    r = client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": event_id, "state": state},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "applied", r.text


def dependency_notes(core: Core, run_id: str) -> list[dict[str, Any]]:
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(t.notifications)
            .where(t.notifications.c.run_id == run_id)
            .where(t.notifications.c.attention_type == "dependency")
            .order_by(t.notifications.c.created_at)
        ).all()
    return [dict(r._mapping) for r in rows]


@pytest.fixture
def anna(core: Core, creds: TenantCreds) -> tuple[str, str]:
    """The announcement job's owner: (user id, token)."""
    return add_user(core, creds.tenant_id, "anna@acme.test")


def two_jobs(client: TestClient, creds: TenantCreds) -> dict[str, Any]:
    """Seed 004: the date job asks for approval of its proposal; the announcement job,
    in the same conversation, depends on that proposal (owned by Anna)."""
    make_run(client, creds, "dates", title="Move launch tasks to Friday")
    opened = ask(client, creds, "dates", "dates-proposal")
    made = make_run(
        client,
        creds,
        "announce",
        owner="anna@acme.test",
        title="Draft the launch announcement",
        depends_on={"run": "dates", "request_id": "dates-proposal"},
    )
    return {"dates_version": opened["run"]["version"], "announce": made}


# --- done_when ---------------------------------------------------------------------------


def test_done_when_is_stored_returned_updated_and_cleared(
    client: TestClient, creds: TenantCreds
) -> None:
    done = {"text": "All twelve tasks moved and confirmed", "operations": ["t1", "t2"]}
    made = make_run(client, creds, "dw-1", done_when=done)
    assert made["done_when"] == done
    assert get_run(client, creds.owner_token, "dw-1")["done_when"] == done
    r = put(client, creds.runtime_key, "dw-1", done_when={"text": "Only the words"})
    assert r.status_code == 200, r.text
    assert r.json()["done_when"] == {"text": "Only the words", "operations": []}
    assert r.json()["version"] == made["version"] + 1  # what counts as done is versioned
    r = put(client, creds.runtime_key, "dw-1", done_when=None)
    assert r.json()["done_when"] is None
    bad = put(client, creds.runtime_key, "dw-1", done_when={"text": "x", "operations": ["a", "a"]})
    assert problem(bad, 422)
    assert problem(put(client, creds.runtime_key, "dw-1", done_when={"text": " "}), 422)


def _ops(client: TestClient, creds: TenantCreds, run_id: str, moves: dict[str, str]) -> None:
    ops = [
        {"operation_id": op, "target": {"type": "task", "id": f"{run_id}-{op}"}, "intent": "move"}
        for op in moves
    ]
    r = client.post(
        f"/v1/runs/{run_id}/operations", json={"operations": ops}, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 201, r.text
    for op, final in moves.items():
        for state in ("sent", final):
            r = client.patch(
                f"/v1/runs/{run_id}/operations/{op}",
                json={"state": state},
                headers=bearer(creds.runtime_key),
            )
            assert r.status_code == 200, r.text


def test_a_completion_is_verified_only_when_done_when_operations_are_confirmed(
    client: TestClient, creds: TenantCreds, core: Core
) -> None:
    """Every declared operation confirmed, but done_when names one never declared: not
    verified, and the reason names it. The same ledger without it: verified."""
    make_run(client, creds, "dw-ok", done_when={"text": "t1 moved", "operations": ["t1"]})
    make_run(client, creds, "dw-missing", done_when={"text": "both", "operations": ["t1", "t9"]})
    for run_id in ("dw-ok", "dw-missing"):
        _ops(client, creds, run_id, {"t1": "confirmed", "t2": "confirmed"})
        signal(client, creds, run_id, f"{run_id}-done", "completed")
    assert get_run(client, creds.owner_token, "dw-ok")["outcome"] == "verified"
    missing = get_run(client, creds.owner_token, "dw-missing")
    assert missing["outcome"] == "needs_review"
    with core.db.read() as conn:
        [note] = conn.execute(
            sa.select(t.notifications).where(t.notifications.c.run_id == "dw-missing")
        ).all()
    assert note.attention_type == "needs_review"
    assert "t9 never declared" in note.reason


def test_done_when_does_not_count_an_absent_or_undeclared_operation_as_done(
    client: TestClient, creds: TenantCreds
) -> None:
    # Confirmed absent verifies a plain ledger, but not a job whose done_when needs it.
    make_run(client, creds, "dw-absent", done_when={"text": "t1 landed", "operations": ["t1"]})
    _ops(client, creds, "dw-absent", {"t1": "uncertain"})
    r = client.patch(
        "/v1/runs/dw-absent/operations/t1",
        json={"state": "absent"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    signal(client, creds, "dw-absent", "dw-absent-done", "completed")
    assert get_run(client, creds.owner_token, "dw-absent")["outcome"] == "needs_review"
    # A run that declared nothing at all: its done_when still decides.
    make_run(client, creds, "dw-none", done_when={"text": "x", "operations": ["x"]})
    signal(client, creds, "dw-none", "dw-none-done", "completed")
    assert get_run(client, creds.owner_token, "dw-none")["outcome"] == "needs_review"
    # Text alone changes nothing about the judgement.
    make_run(client, creds, "dw-text", done_when={"text": "the draft is ready"})
    signal(client, creds, "dw-text", "dw-text-done", "completed")
    assert get_run(client, creds.owner_token, "dw-text")["outcome"] is None


def test_done_when_can_be_amended_through_the_owner(
    client: TestClient, creds: TenantCreds, core: Core
) -> None:
    """Luis proposes what counts as done without the legal-review task; Mara approves."""
    _, luis = add_user(core, creds.tenant_id, "luis@acme.test")
    before = {"text": "All twelve tasks moved", "operations": ["t1", "legal"]}
    made = make_run(
        client, creds, "dw-amend", done_when=before, authority={"users": ["luis@acme.test"]}
    )
    after = {"text": "All tasks but legal review moved", "operations": ["t1"]}
    r = client.post(
        "/v1/runs/dw-amend/amendments",
        json={"text": "Exclude the legal-review task", "changes": {"done_when": after}},
        headers={**bearer(luis), "Idempotency-Key": "p-1"},
    )
    assert r.status_code == 201, r.text
    amendment = r.json()["amendment"]
    assert amendment["changes"] == {"done_when": after}
    assert amendment["base"] == {"done_when": before}
    assert get_run(client, creds.owner_token, "dw-amend")["done_when"] == before  # not yet
    decided = answer(client, creds.owner_token, amendment["id"], "approve", made["version"], "d-1")
    assert decided.status_code == 200, decided.text
    now = get_run(client, creds.owner_token, "dw-amend")
    assert now["done_when"] == after
    assert now["version"] == made["version"] + 1
    bad = client.post(
        "/v1/runs/dw-amend/amendments",
        json={"text": "x", "changes": {"done_when": {"text": "y", "operations": "t1"}}},
        headers={**bearer(luis), "Idempotency-Key": "p-2"},
    )
    assert problem(bad, 422)


# --- links -------------------------------------------------------------------------------


def test_link_lookup_finds_exactly_the_jobs_of_a_conversation(
    client: TestClient, creds: TenantCreds, core: Core
) -> None:
    conversation = {"kind": "conversation", "id": "chat-7", "url": "https://chat.example/c/7"}
    message = {"kind": "message", "id": "m-41"}
    make_run(client, creds, "dates", links=[conversation, message])
    make_run(client, creds, "announce", links=[{"kind": "conversation", "id": "chat-7"}])
    make_run(client, creds, "other", links=[{"kind": "conversation", "id": "chat-8"}])
    make_run(client, creds, "plain")
    # Another tenant's job in a conversation of the same id is not this tenant's.
    other = make_tenant(core, "globex")
    make_run(client, other, "theirs", links=[{"kind": "conversation", "id": "chat-7"}])

    def linked(token: str, link: str) -> list[str]:
        r = client.get("/v1/runs", params={"link": link}, headers=bearer(token))
        assert r.status_code == 200, r.text
        return [run["run_id"] for run in r.json()["runs"]]

    assert linked(creds.runtime_key, "conversation:chat-7") == ["announce", "dates"]
    assert linked(creds.owner_token, "conversation:chat-7") == ["announce", "dates"]
    assert linked(creds.runtime_key, "message:m-41") == ["dates"]
    assert linked(creds.runtime_key, "conversation:nope") == []
    assert linked(other.runtime_key, "conversation:chat-7") == ["theirs"]
    # A member sees only the linked jobs they may see.
    _, member = add_user(core, creds.tenant_id, "member@acme.test")
    assert linked(member, "conversation:chat-7") == []
    shown = get_run(client, creds.owner_token, "dates")
    assert shown["links"] == [conversation, {**message, "url": None}]
    assert problem(client.get("/v1/runs?link=nocolon", headers=bearer(creds.runtime_key)), 422)
    r = client.get(
        "/v1/runs",
        params={"link": "conversation:chat-7", "group": "working"},
        headers=bearer(creds.runtime_key),
    )
    assert problem(r, 422)["detail"].startswith("link lists runs by id")


def test_links_are_checked_replaced_whole_and_never_make_a_new_version(
    client: TestClient, creds: TenantCreds
) -> None:
    made = make_run(client, creds, "ln-1", links=[{"kind": "conversation", "id": "c1"}])
    r = put(
        client,
        creds.runtime_key,
        "ln-1",
        links=[{"kind": "conversation", "id": "c1"}, {"kind": "conversation", "id": "c2"}],
    )
    assert r.status_code == 200, r.text
    assert [link["id"] for link in r.json()["links"]] == ["c1", "c2"]
    assert r.json()["version"] == made["version"]  # a pending approval stays valid
    for bad in (
        [{"kind": "conversation", "id": "c1", "url": "javascript:alert(1)"}],
        [{"kind": "ticket", "id": "T-1", "url": "https://user:pw@tickets.example/T-1"}],
        [{"kind": "conversation", "id": "c1"}, {"kind": "conversation", "id": "c1"}],
        [{"kind": "Conversation!", "id": "c1"}],
        [{"kind": "message", "id": ""}],
    ):
        assert problem(put(client, creds.runtime_key, "ln-1", links=bad), 422)
    assert [link["id"] for link in get_run(client, creds.owner_token, "ln-1")["links"]] == [
        "c1",
        "c2",
    ]
    r = put(client, creds.runtime_key, "ln-1", links=[])
    assert r.json()["links"] == []


# --- dependencies ------------------------------------------------------------------------


def test_a_dependency_must_name_a_proposal_of_another_run_in_this_tenant(
    client: TestClient, creds: TenantCreds, core: Core
) -> None:
    make_run(client, creds, "dates")
    ask(client, creds, "dates", "dates-proposal")
    other = make_tenant(core, "globex")
    make_run(client, other, "their-dates")
    ask(client, other, "their-dates", "their-proposal")

    def refused(depends_on: dict[str, Any]) -> dict[str, Any]:
        r = put(
            client,
            creds.runtime_key,
            "announce",
            owner=creds.owner_email,
            depends_on=depends_on,
        )
        return problem(r, 422)

    unknown = refused({"run": "no-such-run", "request_id": "x"})
    theirs = refused({"run": "their-dates", "request_id": "their-proposal"})
    assert theirs["detail"] == unknown["detail"].replace("no-such-run", "their-dates")
    assert "request" in refused({"run": "dates", "request_id": "their-proposal"})["detail"]
    assert refused({"run": "dates", "request_id": "dates-proposal", "version": 2})
    make_run(client, creds, "self")
    ask(client, creds, "self", "self-proposal")
    r = put(
        client, creds.runtime_key, "self", depends_on={"run": "self", "request_id": "self-proposal"}
    )
    assert problem(r, 422)
    assert get_run(client, creds.owner_token, "dates")["state"] == "input_required"


def test_the_dependent_run_says_the_proposal_is_not_approved_yet_then_approved_once(
    client: TestClient, creds: TenantCreds, core: Core, anna: tuple[str, str], clock: Clock
) -> None:
    clock.freeze()
    jobs = two_jobs(client, creds)
    anna_id, anna_token = anna
    shown = get_run(client, anna_token, "announce")
    assert shown["depends_on"] == {"run": "dates", "request_id": "dates-proposal", "version": 1}
    assert shown["dependency"]["state"] == "pending"
    assert shown["dependency"]["text"] == "Depends on a proposal that is not approved yet"
    assert dependency_notes(core, "announce") == []

    # Mara approves from another device; a retry of the same answer changes nothing.
    for _ in range(2):
        r = answer(
            client, creds.owner_token, "dates-proposal", "approve", jobs["dates_version"], "a-1"
        )
        assert r.status_code == 200, r.text
    now = get_run(client, anna_token, "announce")
    assert now["dependency"]["state"] == "approved"
    assert now["dependency"]["text"] == "Depends on a proposal that was approved"
    assert (now["state"], now["version"]) == ("working", jobs["announce"]["version"])
    [note] = dependency_notes(core, "announce")
    assert note["recipient_user_id"] == anna_id  # the dependent run's owner
    assert note["summary"] == "A proposal your run depends on changed"
    assert "was approved" in note["reason"] and "dates-proposal" in note["reason"]
    assert (note["decision"], note["rule_id"]) == ("push", "dependency.default")
    with core.db.read() as conn:  # through the ordinary outbox, committed with the answer
        channels = conn.execute(
            sa.select(t.deliveries.c.channel).where(t.deliveries.c.notification_id == note["id"])
        ).scalars()
        assert "inbox" in set(channels)
    inbox = client.get("/v1/notifications", headers=bearer(anna_token)).json()
    assert [n["attention_type"] for n in inbox["notifications"]] == ["dependency"]
    feed = client.get("/v1/events?after=earliest&limit=500", headers=bearer(creds.runtime_key))
    told = [e for e in feed.json()["events"] if e["type"] == "run.dependency"]
    assert [(e["run_id"], e["data"]["state"]) for e in told] == [("announce", "approved")]


def test_a_rejected_proposal_is_said_and_told_once(
    client: TestClient, creds: TenantCreds, core: Core, anna: tuple[str, str]
) -> None:
    jobs = two_jobs(client, creds)
    r = answer(client, creds.owner_token, "dates-proposal", "reject", jobs["dates_version"], "r-1")
    assert r.status_code == 200, r.text
    shown = get_run(client, anna[1], "announce")
    assert shown["dependency"]["text"] == "Depends on a proposal that was rejected"
    [note] = dependency_notes(core, "announce")
    assert "was rejected" in note["reason"]


def test_a_replaced_proposal_is_said_and_told_once(
    client: TestClient, creds: TenantCreds, core: Core, anna: tuple[str, str]
) -> None:
    two_jobs(client, creds)
    ask(client, creds, "dates", "dates-proposal-2")  # a newer version of the proposal
    shown = get_run(client, anna[1], "announce")
    assert shown["dependency"]["state"] == "replaced"
    assert shown["dependency"]["superseded_by"] == "dates-proposal-2"
    assert shown["dependency"]["text"] == (
        "Depends on a proposal that was replaced by a newer version (dates-proposal-2)"
    )
    [note] = dependency_notes(core, "announce")
    assert "replaced by a newer version" in note["reason"]
    # Re-pointing the dependency at the new version: pending again, and told once more
    # when that one is decided.
    r = put(
        client,
        creds.runtime_key,
        "announce",
        depends_on={"run": "dates", "request_id": "dates-proposal-2"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["dependency"]["state"] == "pending"
    version = get_run(client, creds.owner_token, "dates")["version"]
    ok = answer(client, creds.owner_token, "dates-proposal-2", "approve", version, "a-2")
    assert ok.status_code == 200, ok.text
    assert [n["reason"].split(":")[0] for n in dependency_notes(core, "announce")] == [
        "Depends on a proposal that was replaced by a newer version (dates-proposal-2)",
        "Depends on a proposal that was approved",
    ]


def test_cancelling_one_job_never_changes_the_other(
    client: TestClient, creds: TenantCreds, core: Core, anna: tuple[str, str]
) -> None:
    jobs = two_jobs(client, creds)
    before = get_run(client, creds.owner_token, "announce")
    # Cancelling the announcement leaves the date job and its proposal as they were.
    r = client.post(
        "/v1/runs/announce/cancel",
        json={"reason": "not needed"},
        headers={**bearer(anna[1]), "Idempotency-Key": "c-1"},
    )
    assert r.status_code == 202, r.text
    signal(client, creds, "announce", "announce-cancelled", "cancelled")
    dates = get_run(client, creds.owner_token, "dates")
    assert (dates["state"], dates["version"]) == ("input_required", jobs["dates_version"])
    assert dates["pending_input_request"]["id"] == "dates-proposal"

    # A second announcement depends on the same proposal; cancelling the date job cancels
    # its own request, which that job is told about — its state and version stay.
    second = make_run(
        client,
        creds,
        "announce-2",
        owner="anna@acme.test",
        depends_on={"run": "dates", "request_id": "dates-proposal"},
    )
    r = client.post(
        "/v1/runs/dates/cancel",
        json={"reason": "wrong week"},
        headers={**bearer(creds.owner_token), "Idempotency-Key": "c-2"},
    )
    assert r.status_code == 202, r.text
    after = get_run(client, anna[1], "announce-2")
    assert (after["state"], after["version"]) == ("working", second["version"])
    assert after["dependency"]["text"] == "Depends on a proposal that was cancelled"
    [note] = dependency_notes(core, "announce-2")
    assert "was cancelled" in note["reason"]
    # The cancelled announcement is not told, and did not move.
    assert dependency_notes(core, "announce") == []
    cancelled = get_run(client, creds.owner_token, "announce")
    assert cancelled["state"] == "cancelled"
    assert cancelled["version"] == before["version"] + 2  # stopping, then cancelled


def test_the_run_page_shows_the_job(
    client: TestClient, creds: TenantCreds, core: Core, anna: tuple[str, str]
) -> None:
    jobs = two_jobs(client, creds)
    r = put(
        client,
        creds.runtime_key,
        "announce",
        done_when={"text": "The announcement names only confirmed dates", "operations": ["post"]},
        links=[
            {"kind": "conversation", "id": "chat-7", "url": "https://chat.example/c/7"},
            {"kind": "message", "id": "m-42"},
        ],
    )
    assert r.status_code == 200, r.text
    sign_in(client, core, creds.tenant_id, anna[0])

    def page() -> str:
        r = client.get("/runs/announce")
        assert r.status_code == 200, r.text
        return r.text

    html = page()
    assert "Depends on a proposal that is not approved yet" in html
    assert 'data-state="pending"' in html
    assert "The announcement names only confirmed dates" in html
    assert "Needs confirmed: post" in html
    assert 'href="https://chat.example/c/7"' in html
    assert "conversation chat-7" in html
    assert "message m-42" in html
    r = answer(client, creds.owner_token, "dates-proposal", "reject", jobs["dates_version"], "r-9")
    assert r.status_code == 200, r.text
    assert "Depends on a proposal that was rejected" in page()


def test_an_expired_proposal_is_said_and_told_once(
    client: TestClient, creds: TenantCreds, core: Core, anna: tuple[str, str], clock: Clock
) -> None:
    clock.freeze()
    make_run(client, creds, "dates")
    r = client.post(
        "/v1/runs/dates/input-requests",
        json={
            "input_request_id": "dates-proposal",
            "kind": "approval",
            "summary": "Move to Friday?",
            "expires_at": (clock.advance(0) + timedelta(minutes=30)).isoformat(),
        },
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text
    make_run(
        client,
        creds,
        "announce",
        owner="anna@acme.test",
        depends_on={"run": "dates", "request_id": "dates-proposal"},
    )
    now = clock.advance(31 * 60)
    assert input_requests.expire_requests(core, now) == 1
    assert input_requests.expire_requests(core, now) == 0  # swept once
    shown = get_run(client, anna[1], "announce")
    assert shown["dependency"]["text"] == "Depends on a proposal that expired without a decision"
    [note] = dependency_notes(core, "announce")
    assert "expired without a decision" in note["reason"]


def test_a_dependency_on_an_amendment_follows_its_decision_and_its_runs_finish(
    client: TestClient, creds: TenantCreds, core: Core, anna: tuple[str, str]
) -> None:
    """Luis's proposed amendment is a proposal too: a job may depend on it. Approved, it
    is said so; another one cancelled because its run finished is said so as well."""
    _, luis = add_user(core, creds.tenant_id, "luis@acme.test")
    made = make_run(client, creds, "dates", authority={"users": ["luis@acme.test"]})

    def proposal(key: str) -> str:
        r = client.post(
            "/v1/runs/dates/amendments",
            json={"text": "Exclude the legal-review task", "changes": {"objective": key}},
            headers={**bearer(luis), "Idempotency-Key": key},
        )
        assert r.status_code == 201, r.text
        return str(r.json()["amendment"]["id"])

    first = proposal("p-1")
    make_run(
        client,
        creds,
        "announce",
        owner="anna@acme.test",
        depends_on={"run": "dates", "request_id": first},
    )
    ok = answer(client, creds.owner_token, first, "approve", made["version"], "a-1")
    assert ok.status_code == 200, ok.text
    assert get_run(client, anna[1], "announce")["dependency"]["state"] == "approved"
    second = proposal("p-2")  # on the amended run: its own alert to the owner
    make_run(
        client,
        creds,
        "announce-2",
        owner="anna@acme.test",
        depends_on={"run": "dates", "request_id": second},
    )
    signal(client, creds, "dates", "dates-done", "completed")  # it can no longer apply
    assert get_run(client, anna[1], "announce-2")["dependency"]["state"] == "cancelled"
    assert len(dependency_notes(core, "announce")) == 1
    assert len(dependency_notes(core, "announce-2")) == 1


def test_done_when_can_be_proposed_from_the_run_page(
    client: TestClient, creds: TenantCreds, core: Core
) -> None:
    """The page's proposal form: new words for what counts as done, keeping the
    operations it needs; the owner sees the change in words."""
    luis_id, _ = add_user(core, creds.tenant_id, "luis@acme.test")
    make_run(
        client,
        creds,
        "dw-web",
        done_when={"text": "All twelve tasks moved", "operations": ["t1", "t2"]},
        authority={"users": ["luis@acme.test"]},
    )
    csrf = sign_in(client, core, creds.tenant_id, luis_id)
    page = client.get("/runs/dw-web").text
    assert page.count('name="done_when_operation"') == 2
    r = client.post(
        "/runs/dw-web/amendments",
        data={
            "csrf_token": csrf,
            "idempotency_key": "web-1",
            "text": "Legal review is not ours to move",
            "done_when": "All tasks but legal review moved",
            "done_when_operation": ["t1", "t2"],
        },
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    [pending] = get_run(client, creds.owner_token, "dw-web")["pending_amendments"]
    assert pending["changes"] == {
        "done_when": {"text": "All tasks but legal review moved", "operations": ["t1", "t2"]}
    }
    assert "All tasks but legal review moved (needs confirmed: t1, t2)" in (
        client.get("/runs/dw-web").text
    )
