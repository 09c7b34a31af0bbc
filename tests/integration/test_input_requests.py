"""Input requests and answers (DESIGN §2 inv. 8, 9, 10; §6 input requests, responses,
receipts, Idempotency-Key). Every test runs on SQLite and on PostgreSQL; the races use
real threads against a real server."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.dispatch.scheduler import Scheduler
from runbell.domain.errors import NotFound
from runbell.flows import accounts as accounts_flow
from runbell.flows import answers, members
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import LiveServer, bearer
from tests.timeouts import WAIT, scaled

# These tests follow email rows through the outbox: this server has an SMTP relay.
pytestmark = pytest.mark.usefixtures("mailing")

T = TypeVar("T")
PLANTED = "SECRET-ARGS-4711"


# --- helpers -----------------------------------------------------------------------------


def make_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> dict[str, Any]:
    body = {"owner": creds.owner_email, "state": "working", **fields}
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    return dict(r.json())


def open_body(request_id: str, *, expires_at: datetime | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "input_request_id": request_id,
        "kind": "approval",
        "summary": "Push the fix to main?",
        "details": {"command": "git push origin main", "token": PLANTED, "risk": "high"},
    }
    if expires_at is not None:
        body["expires_at"] = expires_at.isoformat()
    body.update(extra)
    return body


def open_request(
    client: TestClient,
    creds: TenantCreds,
    clock: Clock,
    run_id: str,
    request_id: str,
    *,
    expires_in: float | None = 600,
    status: int = 201,
    **extra: Any,
) -> dict[str, Any]:
    expires_at = None if expires_in is None else clock() + timedelta(seconds=expires_in)
    r = client.post(
        f"/v1/runs/{run_id}/input-requests",
        json=open_body(request_id, expires_at=expires_at, **extra),
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == status, r.text
    return dict(r.json())


def answer(
    client: TestClient,
    token: str,
    request_id: str,
    *,
    run_version: int,
    decision: str = "approve",
    value: str | None = None,
    request_version: int = 1,
    key: str | None = "default",
) -> httpx.Response:
    body: dict[str, Any] = {
        "decision": decision,
        "expected_run_version": run_version,
        "expected_request_version": request_version,
    }
    if value is not None:
        body["value"] = value
    headers = bearer(token)
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post(f"/v1/input-requests/{request_id}/responses", json=body, headers=headers)


def problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return dict(r.json())


def rows(core: Core, table: sa.Table, tenant_id: str, **where: Any) -> list[dict[str, Any]]:
    q = sa.select(table).where(table.c.tenant_id == tenant_id)
    for name, value in where.items():
        q = q.where(table.c[name] == value)
    with core.db.read() as conn:
        return [dict(r._mapping) for r in conn.execute(q).all()]


def get_run(client: TestClient, creds: TenantCreds, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    return dict(r.json())


def get_note(client: TestClient, token: str, note_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/notifications/{note_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def get_request(client: TestClient, token: str, request_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/input-requests/{request_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def deliveries(core: Core, creds: TenantCreds, note_id: str) -> dict[str, str]:
    return {
        d["channel"]: d["status"]
        for d in rows(core, t.deliveries, creds.tenant_id, notification_id=note_id)
    }


def feed(client: TestClient, token: str) -> list[dict[str, Any]]:
    r = client.get("/v1/events?after=earliest&limit=500", headers=bearer(token))
    assert r.status_code == 200, r.text
    return list(r.json()["events"])


def answered_transitions(core: Core, creds: TenantCreds, run_id: str) -> list[dict[str, Any]]:
    return [
        tr
        for tr in rows(core, t.transitions, creds.tenant_id, run_id=run_id)
        if (tr["reason"] or "").startswith("answered")
    ]


def race(n: int, job: Callable[[int], T]) -> list[T]:
    """Run ``job(i)`` on ``n`` real threads released together by a barrier."""
    barrier = threading.Barrier(n)

    def gated(i: int) -> T:
        barrier.wait(timeout=WAIT)
        return job(i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return [f.result(timeout=scaled(120)) for f in [pool.submit(gated, i) for i in range(n)]]


@pytest.fixture
def waiting(client: TestClient, creds: TenantCreds, clock: Clock) -> dict[str, Any]:
    """A working run that opened approval ``req-1``, expiring in 10 minutes (frozen clock)."""
    clock.freeze()
    make_run(client, creds, "run-1", notify_on_complete=True)
    return open_request(client, creds, clock, "run-1", "req-1")


# --- opening -----------------------------------------------------------------------------


def test_opening_blocks_the_run_and_raises_one_time_sensitive_alert(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    """The run moves to input_required at a new version; its alert is time-sensitive,
    points at the request and expires with it; the run view shows the pending request."""
    req, run = waiting["input_request"], waiting["run"]
    assert waiting["created"] is True
    assert (req["id"], req["state"], req["version"], req["kind"]) == (
        "req-1",
        "pending",
        1,
        "approval",
    )
    assert (run["state"], run["version"]) == ("input_required", 2)
    assert req["run_version"] == 2
    [note] = waiting["notifications"]
    assert note["attention_type"] == "input_required"
    assert note["urgency"] == "time_sensitive"
    assert note["rule_id"] == "input_required.blocking_expiring"
    assert note["input_request_id"] == "req-1"
    assert note["expires_at"] == req["expires_at"]
    assert note["transition_version"] == 2
    assert PLANTED not in str(note)  # the alert carries a neutral summary only
    assert deliveries(core, creds, note["id"]) == {"inbox": "accepted", "email": "queued"}

    shown = get_run(client, creds, "run-1")
    pending = shown["pending_input_request"]
    assert (pending["id"], pending["kind"], pending["version"]) == ("req-1", "approval", 1)
    assert pending["expires_at"] == req["expires_at"]
    assert pending["details"]["token"] == PLANTED  # the run's viewers see the details


def test_a_request_without_expiry_is_a_normal_alert(
    client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    make_run(client, creds, "run-1")
    opened = open_request(client, creds, clock, "run-1", "req-1", expires_in=None)
    [note] = opened["notifications"]
    assert (note["urgency"], note["expires_at"]) == ("normal", None)


def test_opening_twice_with_the_same_body_is_idempotent(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock, waiting: dict[str, Any]
) -> None:
    """A retried open answers 200 with the same request: one notification, one version."""
    body = open_body(
        "req-1", expires_at=datetime.fromisoformat(waiting["input_request"]["expires_at"])
    )
    r = client.post("/v1/runs/run-1/input-requests", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    again = r.json()
    assert again["created"] is False
    assert again["input_request"]["id"] == "req-1"
    assert again["run"]["version"] == 2
    assert len(rows(core, t.notifications, creds.tenant_id)) == 1
    assert len(rows(core, t.input_requests, creds.tenant_id)) == 1


def test_the_same_id_with_another_body_is_a_conflict(
    client: TestClient, creds: TenantCreds, clock: Clock, waiting: dict[str, Any]
) -> None:
    r = client.post(
        "/v1/runs/run-1/input-requests",
        json=open_body("req-1", expires_at=clock() + timedelta(hours=1), summary="Delete it?"),
        headers=bearer(creds.runtime_key),
    )
    body = problem(r, 409)
    assert body["field"] == "input_request_id"
    assert body["current"]["input_request"]["summary"] == "Push the fix to main?"
    assert get_run(client, creds, "run-1")["version"] == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
        ({"expires_at": "2030-01-01T00:00:00"}, "expires_at"),
        ({"kind": "choice", "options": [{"id": "a", "label": "A"}]}, "options"),
        (
            {"kind": "choice", "options": [{"id": "a", "label": "A"}, {"id": "a", "label": "B"}]},
            "options",
        ),
        (
            {"kind": "approval", "options": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]},
            "options",
        ),
        ({"kind": "vote"}, "kind"),
        ({"summary": ""}, "summary"),
        ({"input_request_id": "has/slash"}, "input_request_id"),
    ],
    ids=[
        "past",
        "naive",
        "one-option",
        "duplicate-options",
        "options-on-approval",
        "kind",
        "summary",
        "id",
    ],
)
def test_bad_requests_are_422_naming_the_field_and_change_nothing(
    client: TestClient, core: Core, creds: TenantCreds, change: dict[str, Any], field: str
) -> None:
    make_run(client, creds, "run-1")
    body = {**open_body("req-1", expires_at=None), "expires_at": "2099-01-01T00:00:00Z", **change}
    r = client.post("/v1/runs/run-1/input-requests", json=body, headers=bearer(creds.runtime_key))
    assert problem(r, 422)["field"] == field
    assert rows(core, t.input_requests, creds.tenant_id) == []
    assert get_run(client, creds, "run-1")["state"] == "working"


def test_only_a_waiting_or_working_run_can_ask(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """A finished run answers 409 with the run as current; an unknown run 404; a person 403."""
    make_run(client, creds, "done-1")
    r = client.post(
        "/v1/runs/done-1/signals",
        json={"event_id": "e1", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200
    body = problem(
        client.post(
            "/v1/runs/done-1/input-requests",
            json=open_body("req-x", expires_at=None),
            headers=bearer(creds.runtime_key),
        ),
        409,
    )
    assert body["current"]["run"]["state"] == "completed"
    problem(
        client.post(
            "/v1/runs/ghost/input-requests",
            json=open_body("req-y", expires_at=None),
            headers=bearer(creds.runtime_key),
        ),
        404,
    )
    problem(
        client.post(
            "/v1/runs/done-1/input-requests",
            json=open_body("req-z", expires_at=None),
            headers=bearer(creds.owner_token),
        ),
        403,
    )
    assert rows(core, t.input_requests, creds.tenant_id) == []


# --- answering ---------------------------------------------------------------------------


def test_an_approval_resolves_everywhere_and_resumes_the_run(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    """One answer: the response is committed, the request answered, the run working at a
    new version, the alert resolved with its queued email cancelled, and the runtime's
    feed carries the decision."""
    [note] = waiting["notifications"]
    r = answer(client, creds.owner_token, "req-1", run_version=2, key="k-1")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["response"]["decision"] == "approve"
    assert body["response"]["answered_by"] == {"id": creds.owner_id, "email": creds.owner_email}
    assert body["input_request"]["state"] == "answered"
    assert (body["run"]["state"], body["run"]["version"]) == ("working", 3)

    closed = get_note(client, creds.owner_token, note["id"])
    assert closed["state"] == "resolved"
    assert deliveries(core, creds, note["id"]) == {"inbox": "accepted", "email": "cancelled"}
    assert len(rows(core, t.responses, creds.tenant_id)) == 1
    assert len(answered_transitions(core, creds, "run-1")) == 1

    events = feed(client, creds.runtime_key)
    [ev] = [e for e in events if e["type"] == "input_request.answered"]
    assert ev["run_id"] == "run-1"
    assert ev["data"]["decision"] == "approve"
    assert ev["data"]["answered_by"] == creds.owner_id
    assert ev["data"]["input_request_id"] == "req-1"
    assert PLANTED not in str(events)  # details never reach the feed


def test_a_choice_answer_reaches_the_runtime_with_its_value(
    client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    make_run(client, creds, "run-1")
    options = [{"id": "small", "label": "Small fix"}, {"id": "big", "label": "Refactor"}]
    open_request(client, creds, clock, "run-1", "pick-1", kind="choice", options=options)
    bad = answer(
        client, creds.owner_token, "pick-1", run_version=2, decision="answer", value="huge"
    )
    assert problem(bad, 422)["field"] == "value"
    wrong = answer(client, creds.owner_token, "pick-1", run_version=2, decision="approve")
    assert problem(wrong, 422)["field"] == "decision"
    ok = answer(client, creds.owner_token, "pick-1", run_version=2, decision="answer", value="big")
    assert ok.status_code == 200, ok.text
    [ev] = [e for e in feed(client, creds.runtime_key) if e["type"] == "input_request.answered"]
    assert (ev["data"]["decision"], ev["data"]["value"]) == ("answer", "big")


def test_a_text_answer_must_say_something(
    client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    make_run(client, creds, "run-1")
    open_request(client, creds, clock, "run-1", "ask-1", kind="text")
    empty = answer(client, creds.owner_token, "ask-1", run_version=2, decision="answer", value="  ")
    assert problem(empty, 422)["field"] == "value"
    long = answer(
        client, creds.owner_token, "ask-1", run_version=2, decision="answer", value="x" * 10_001
    )
    assert problem(long, 422)["field"] == "value"
    ok = answer(
        client, creds.owner_token, "ask-1", run_version=2, decision="answer", value="Use v2"
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["response"]["value"] == "Use v2"


def test_a_stale_approval_is_refused_with_the_current_state(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    """The run changed (a PUT bumped its version) after the page was loaded: 409, the
    current run and request, and nothing committed. Reloading and answering works."""
    r = client.put(
        "/v1/runs/run-1", json={"title": "Now with tests"}, headers=bearer(creds.runtime_key)
    )
    assert r.json()["version"] == 3
    body = problem(answer(client, creds.owner_token, "req-1", run_version=2), 409)
    assert body["detail"] == "The run changed since this page was loaded (version 2 → 3)."
    assert body["current"]["run"]["version"] == 3
    assert body["current"]["run"]["title"] == "Now with tests"
    assert body["current"]["input_request"]["state"] == "pending"
    assert "details" not in body["current"]["run"]
    assert rows(core, t.responses, creds.tenant_id) == []
    assert get_run(client, creds, "run-1")["state"] == "input_required"

    fresh = answer(client, creds.owner_token, "req-1", run_version=3, key="after-reload")
    assert fresh.status_code == 200, fresh.text


def test_a_wrong_request_version_is_refused(
    client: TestClient, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    body = problem(
        answer(client, creds.owner_token, "req-1", run_version=2, request_version=2), 409
    )
    assert body["detail"] == "The request changed since this page was loaded (version 2 → 1)."


def test_an_expired_request_is_refused_and_marked_expired(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock, waiting: dict[str, Any]
) -> None:
    """Past expires_at, an answer is 409 saying when it expired; the request is marked
    expired at once (before any sweep) and its alert is no longer actionable."""
    [note] = waiting["notifications"]
    clock.advance(601)
    body = problem(answer(client, creds.owner_token, "req-1", run_version=2), 409)
    expires_at = datetime.fromisoformat(waiting["input_request"]["expires_at"])
    assert body["detail"] == f"This request expired at {expires_at:%Y-%m-%d %H:%M} UTC."
    assert body["current"]["input_request"]["state"] == "expired"
    assert body["current"]["input_request"]["expired_at"] == waiting["input_request"]["expires_at"]
    assert get_request(client, creds.owner_token, "req-1")["input_request"]["state"] == "expired"
    got = get_note(client, creds.owner_token, note["id"])
    assert (got["state"], got["actionable"], got["actionable_reason"]) == (
        "expired",
        False,
        "expired",
    )
    assert rows(core, t.responses, creds.tenant_id) == []
    assert get_run(client, creds, "run-1")["state"] == "input_required"


def test_the_scheduler_expires_requests_and_tells_the_runtime(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock, waiting: dict[str, Any]
) -> None:
    [note] = waiting["notifications"]
    scheduler = Scheduler(core)
    assert scheduler.tick(clock())["input_requests"] == 0
    now = clock.advance(600)
    assert scheduler.tick(now)["input_requests"] == 1
    assert scheduler.tick(now)["input_requests"] == 0
    req = get_request(client, creds.runtime_key, "req-1")
    assert req["input_request"]["state"] == "expired"
    assert (req["actionable"], req["actionable_reason"]) == (False, "expired")
    got = get_note(client, creds.owner_token, note["id"])
    assert (got["state"], got["closed_reason"]) == ("expired", "input request expired")
    assert deliveries(core, creds, note["id"])["email"] == "cancelled"
    [ev] = [e for e in feed(client, creds.runtime_key) if e["type"] == "input_request.expired"]
    assert ev["data"]["input_request_id"] == "req-1"
    assert get_run(client, creds, "run-1")["state"] == "input_required"  # the runtime decides


def test_a_newer_request_supersedes_the_pending_one(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock, waiting: dict[str, Any]
) -> None:
    """Request B replaces A: A is superseded by B, A's alert is superseded with its queued
    email cancelled, the run is at a new version, and answering A is 409 naming B."""
    [note_a] = waiting["notifications"]
    opened_b = open_request(client, creds, clock, "run-1", "req-B")
    assert opened_b["run"]["version"] == 3  # a new version, though still input_required
    assert opened_b["run"]["state"] == "input_required"
    [note_b] = opened_b["notifications"]
    assert note_b["input_request_id"] == "req-B"

    a = get_request(client, creds.runtime_key, "req-1")["input_request"]
    assert (a["state"], a["superseded_by"]) == ("superseded", "req-B")
    old = get_note(client, creds.owner_token, note_a["id"])
    assert old["state"] == "superseded"
    assert (old["actionable"], old["actionable_reason"]) == (False, "superseded by a newer request")
    assert deliveries(core, creds, note_a["id"]) == {"inbox": "accepted", "email": "cancelled"}
    assert get_note(client, creds.owner_token, note_b["id"])["actionable"] is True
    kinds = [tr["kind"] for tr in rows(core, t.transitions, creds.tenant_id, run_id="run-1")]
    assert sorted(kinds) == ["create", "request", "state"]

    body = problem(answer(client, creds.owner_token, "req-1", run_version=2), 409)
    assert body["detail"] == "A newer request replaced this one (req-B)."
    assert body["current"]["input_request"]["superseded_by"] == "req-B"
    assert get_run(client, creds, "run-1")["pending_input_request"]["id"] == "req-B"
    types = [e["type"] for e in feed(client, creds.runtime_key)]
    assert "input_request.superseded" in types


def test_a_run_that_moves_on_cancels_its_request(
    client: TestClient, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    """The runtime finished without waiting: the pending request is cancelled, and a late
    answer is told so."""
    r = client.post(
        "/v1/runs/run-1/signals",
        json={"event_id": "e-done", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )
    assert r.json()["outcome"] == "applied"
    assert get_request(client, creds.runtime_key, "req-1")["input_request"]["state"] == "cancelled"
    body = problem(answer(client, creds.owner_token, "req-1", run_version=2), 409)
    assert body["detail"].startswith("This request was cancelled at ")
    assert body["detail"].endswith("(it is now completed).")
    assert get_run(client, creds, "run-1")["pending_input_request"] is None


def test_the_answered_alert_says_who_answered(
    client: TestClient, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    [note] = waiting["notifications"]
    assert answer(client, creds.owner_token, "req-1", run_version=2).status_code == 200
    got = get_note(client, creds.owner_token, note["id"])
    assert got["actionable"] is False
    assert got["actionable_reason"] == f"answered by {creds.owner_email}"
    assert got["input_request"]["answered_by"]["email"] == creds.owner_email

    again = problem(answer(client, creds.owner_token, "req-1", run_version=2, key="other"), 409)
    assert again["detail"].startswith(
        f"This request was already answered by {creds.owner_email} at "
    )
    assert again["current"]["input_request"]["answered_by"]["id"] == creds.owner_id
    assert again["current"]["run"]["state"] == "working"


# --- idempotency -------------------------------------------------------------------------


def test_the_same_key_and_body_replays_the_original_answer(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    """A retry (lost reply, second tap) gets the identical 200; still one response and one
    run transition. The same key with another body is a 422."""
    first = answer(client, creds.owner_token, "req-1", run_version=2, key="tap-1")
    second = answer(client, creds.owner_token, "req-1", run_version=2, key="tap-1")
    assert first.status_code == second.status_code == 200
    assert second.json() == first.json()
    assert len(rows(core, t.responses, creds.tenant_id)) == 1
    assert len(answered_transitions(core, creds, "run-1")) == 1
    assert get_run(client, creds, "run-1")["version"] == 3

    other = answer(
        client, creds.owner_token, "req-1", run_version=2, decision="reject", key="tap-1"
    )
    assert problem(other, 422)["field"] == "Idempotency-Key"
    assert len(rows(core, t.responses, creds.tenant_id)) == 1


def test_an_answer_needs_an_idempotency_key(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    r = answer(client, creds.owner_token, "req-1", run_version=2, key=None)
    assert problem(r, 422)["field"] == "Idempotency-Key"
    r = answer(client, creds.owner_token, "req-1", run_version=2, key="k" * 201)
    assert problem(r, 422)["field"] == "Idempotency-Key"
    assert rows(core, t.responses, creds.tenant_id) == []


def test_the_same_approval_from_two_devices(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    """Phone and laptop both approve: one 200, one 409 saying who answered first."""
    phone = answer(client, creds.owner_token, "req-1", run_version=2, key="phone")
    laptop = answer(client, creds.owner_token, "req-1", run_version=2, key="laptop")
    assert phone.status_code == 200
    assert "already answered" in problem(laptop, 409)["detail"]
    assert len(rows(core, t.responses, creds.tenant_id)) == 1


def _race_answers(
    core: Core, creds: TenantCreds, clock: Clock, keys: list[str]
) -> list[httpx.Response]:
    with LiveServer(core, bridge=False) as server:
        with httpx.Client(base_url=server.url, timeout=scaled(60)) as c:
            c.put(
                "/v1/runs/race-1",
                json={"owner": creds.owner_email, "state": "working"},
                headers=bearer(creds.runtime_key),
            ).raise_for_status()
            c.post(
                "/v1/runs/race-1/input-requests",
                json=open_body("race-req", expires_at=clock() + timedelta(hours=1)),
                headers=bearer(creds.runtime_key),
            ).raise_for_status()

        def post(i: int) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=scaled(60)) as c:
                return c.post(
                    "/v1/input-requests/race-req/responses",
                    json={
                        "decision": "approve",
                        "expected_run_version": 2,
                        "expected_request_version": 1,
                    },
                    headers={**bearer(creds.owner_token), "Idempotency-Key": keys[i]},
                )

        return race(len(keys), post)


def test_eight_devices_answering_at_once_commit_exactly_one_answer(
    core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """Eight real concurrent answers under different keys: one 200, seven 409, one
    response row, and the run version bumped exactly once."""
    responses = _race_answers(core, creds, clock, [f"dev-{i}" for i in range(8)])
    assert Counter(r.status_code for r in responses) == Counter({200: 1, 409: 7}), [
        r.text for r in responses
    ]
    assert all("already answered" in r.json()["detail"] for r in responses if r.status_code == 409)
    assert len(rows(core, t.responses, creds.tenant_id)) == 1
    [run] = rows(core, t.runs, creds.tenant_id, run_id="race-1")
    assert (run["state"], run["version"]) == ("working", 3)
    assert len(answered_transitions(core, creds, "race-1")) == 1


def test_eight_retries_of_one_answer_all_get_the_same_200(
    core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """The same key eight times at once: every reply is the original 200, one response."""
    responses = _race_answers(core, creds, clock, ["same-key"] * 8)
    assert [r.status_code for r in responses] == [200] * 8, [r.text for r in responses]
    assert len({r.text for r in responses}) == 1
    assert len(rows(core, t.responses, creds.tenant_id)) == 1
    assert len(answered_transitions(core, creds, "race-1")) == 1


# --- who may answer ----------------------------------------------------------------------


def test_a_person_named_in_the_runs_authority_can_answer(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    reviewer_id, reviewer = add_user(core, creds.tenant_id, "rev@acme.test")
    make_run(client, creds, "run-1", authority={"users": ["rev@acme.test"]})
    open_request(client, creds, clock, "run-1", "req-1")
    assert get_request(client, reviewer, "req-1")["may_answer"] is True
    r = answer(client, reviewer, "req-1", run_version=2)
    assert r.status_code == 200, r.text
    assert r.json()["response"]["answered_by"]["id"] == reviewer_id


def test_a_role_named_in_the_runs_authority_can_read_and_answer(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """authority.roles = ["member"]: any plain member may read the request and answer."""
    _, member = add_user(core, creds.tenant_id, "oncall@acme.test")
    make_run(client, creds, "run-1", authority={"roles": ["member"]})
    open_request(client, creds, clock, "run-1", "req-1")
    got = get_request(client, member, "req-1")
    assert got["may_answer"] is True
    assert got["input_request"]["details"]["token"] == PLANTED
    assert answer(client, member, "req-1", run_version=2).status_code == 200


def test_others_are_refused_without_learning_the_details(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """An admin not named: 403 with a clear reason (they see the run, they do not answer
    it); a plain member who may not see the run and another tenant's user: 404 (issue 18:
    access is checked on the run itself); an API key: 403. Nothing is committed and no
    details leak."""
    _, member = add_user(core, creds.tenant_id, "bob@acme.test")
    _, admin = add_user(core, creds.tenant_id, "adm@acme.test", role="admin")
    other = make_tenant(core, "other")
    make_run(client, creds, "run-1")
    open_request(client, creds, clock, "run-1", "req-1")

    r = answer(client, admin, "req-1", run_version=2)
    assert problem(r, 403)["detail"].startswith("You may see this run but not answer")
    assert PLANTED not in r.text
    r = answer(client, member, "req-1", run_version=2)
    problem(r, 404)
    assert PLANTED not in r.text
    assert get_request(client, admin, "req-1")["may_answer"] is False  # admins see, not answer
    problem(client.get("/v1/input-requests/req-1", headers=bearer(member)), 404)
    problem(answer(client, other.owner_token, "req-1", run_version=2), 404)
    problem(client.get("/v1/input-requests/req-1", headers=bearer(other.runtime_key)), 404)
    problem(answer(client, creds.runtime_key, "req-1", run_version=2), 403)
    assert rows(core, t.responses, creds.tenant_id) == []
    assert get_run(client, creds, "run-1")["state"] == "input_required"


def test_revoking_a_member_denies_the_api_and_withdraws_their_alerts(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """Invariant 8: after revocation the token is refused (401), the open alert closes as
    revoked with its preview redacted, and its queued email is cancelled."""
    bob_id, bob = add_user(core, creds.tenant_id, "bob@acme.test")
    make_run(client, creds, "run-1", owner="bob@acme.test")
    [note] = open_request(client, creds, clock, "run-1", "req-1")["notifications"]
    assert deliveries(core, creds, note["id"])["email"] == "queued"

    assert members.revoke_member(core, creds.tenant_id, bob_id) == 1

    problem(answer(client, bob, "req-1", run_version=2), 401)
    problem(client.get(f"/v1/notifications/{note['id']}", headers=bearer(bob)), 401)
    [stored] = rows(core, t.notifications, creds.tenant_id, id=note["id"])
    assert (stored["state"], stored["summary"], stored["reason"]) == (
        "revoked",
        "Notification withdrawn",
        None,
    )
    assert deliveries(core, creds, note["id"]) == {"inbox": "accepted", "email": "cancelled"}
    assert rows(core, t.responses, creds.tenant_id) == []


# --- receipts and the notification as a pointer -----------------------------------------


def test_opening_and_dismissing_never_decide(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    """Invariant 10: receipts are stored apart; the request stays pending, the alert open
    and actionable. Opening sets first_seen_at; the trail lists the receipts."""
    [note] = waiting["notifications"]
    for kind, channel in (("displayed", "webpush"), ("opened", "webpush"), ("dismissed", "email")):
        r = client.post(
            f"/v1/notifications/{note['id']}/receipts",
            json={"kind": kind, "channel": channel},
            headers=bearer(creds.owner_token),
        )
        assert r.status_code == 201, r.text
        assert (r.json()["kind"], r.json()["channel"]) == (kind, channel)

    got = get_note(client, creds.owner_token, note["id"])
    assert (got["state"], got["actionable"]) == ("open", True)
    assert got["first_seen_at"] is not None
    assert get_request(client, creds.owner_token, "req-1")["input_request"]["state"] == "pending"
    assert rows(core, t.responses, creds.tenant_id) == []
    assert get_run(client, creds, "run-1")["state"] == "input_required"
    assert deliveries(core, creds, note["id"])["email"] == "queued"
    trail = client.get(
        f"/v1/notifications/{note['id']}/trail", headers=bearer(creds.admin_key)
    ).json()
    assert [r["kind"] for r in trail["receipts"]] == ["displayed", "opened", "dismissed"]


def test_receipts_are_the_recipients_own(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    [note] = waiting["notifications"]
    _, bob = add_user(core, creds.tenant_id, "bob@acme.test")
    url = f"/v1/notifications/{note['id']}/receipts"
    problem(client.post(url, json={"kind": "opened"}, headers=bearer(bob)), 404)
    problem(client.post(url, json={"kind": "approved"}, headers=bearer(creds.owner_token)), 422)
    problem(client.post(url, json={"kind": "opened"}, headers=bearer(creds.runtime_key)), 403)
    assert rows(core, t.receipts, creds.tenant_id) == []


def test_the_input_request_is_readable_with_details_by_those_who_see_the_run(
    client: TestClient, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    got = get_request(client, creds.runtime_key, "req-1")
    assert got["input_request"]["details"]["token"] == PLANTED
    assert (got["actionable"], got["may_answer"]) == (True, False)  # a key never answers
    mine = get_request(client, creds.owner_token, "req-1")
    assert (mine["actionable"], mine["may_answer"]) == (True, True)
    assert mine["run"]["version"] == 2


def test_a_tenant_webhook_learns_the_answer(
    client: TestClient, core: Core, creds: TenantCreds, waiting: dict[str, Any]
) -> None:
    """An endpoint subscribed to input_request.answered gets one queued, signed-later
    message carrying the decision (and never the request's details)."""
    r = client.post(
        "/v1/webhook-endpoints",
        json={"url": "http://127.0.0.1:9/hooks", "event_types": ["input_request.answered"]},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 201, r.text
    endpoint_id = r.json()["id"]
    assert answer(client, creds.owner_token, "req-1", run_version=2).status_code == 200
    messages = rows(core, t.deliveries, creds.tenant_id, channel="webhook")
    [msg] = messages
    assert (msg["destination"], msg["status"], msg["event_type"]) == (
        endpoint_id,
        "queued",
        "input_request.answered",
    )
    assert msg["payload"]["data"]["decision"] == "approve"
    assert msg["payload"]["data"]["input_request_id"] == "req-1"
    assert PLANTED not in str(msg["payload"])


def test_ids_are_per_tenant(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """Another tenant may use the same input_request_id; neither sees the other's."""
    other = make_tenant(core, "other")
    make_run(client, creds, "run-1")
    open_request(client, creds, clock, "run-1", "shared-id")
    make_run(client, other, "run-1")
    open_request(client, other, clock, "run-1", "shared-id", summary="Other tenant's question")
    mine = get_request(client, creds.runtime_key, "shared-id")["input_request"]
    theirs = get_request(client, other.runtime_key, "shared-id")["input_request"]
    assert mine["summary"] != theirs["summary"]


def test_an_answer_on_one_run_never_answers_another_runs_request(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock, waiting: dict[str, Any]
) -> None:
    """The run page's form names the run and the request; the answer flow checks the pair
    in its own transaction, so another run's request answers 404 and nothing is written."""
    make_run(client, creds, "run-2")
    owner = accounts_flow.authenticate(core, creds.owner_token)
    assert owner is not None
    body = {"decision": "approve", "expected_run_version": 2, "expected_request_version": 1}
    with pytest.raises(NotFound):
        answers.answer(core, owner, "req-1", body, "k-other", run_id="run-2")
    assert rows(core, t.responses, creds.tenant_id) == []
    assert get_request(client, creds.owner_token, "req-1")["input_request"]["state"] == "pending"
    # The same answer on the request's own run is the one that counts.
    done = json.loads(answers.answer(core, owner, "req-1", body, "k-own", run_id="run-1").body)
    assert done["input_request"]["state"] == "answered"


# --- no second alarm for a settled wait (issue 20 row 2) ----------------------------------


def test_a_wait_reported_after_its_request_was_answered_raises_nothing(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock, waiting: dict[str, Any]
) -> None:
    """Claude Code's `Notification` `permission_prompt` comes ~6 s after its dialog, often
    after the person answered in Runbell: reported as `input_required`, it is stale news of
    the settled wait, not a second "needs your input"."""
    r = answer(client, creds.owner_token, "req-1", run_version=waiting["run"]["version"])
    assert r.status_code == 200, r.text
    assert get_run(client, creds, "run-1")["state"] == "working"
    before = rows(core, t.notifications, creds.tenant_id, run_id="run-1")

    r = client.post(
        "/v1/runs/run-1/signals",
        json={"event_id": "late-wait", "state": "input_required", "reason": "asks again"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["outcome"] == "stale", out
    assert "no input request is open" in out["reason"]
    assert out["notifications"] == []
    assert get_run(client, creds, "run-1")["state"] == "working"
    assert rows(core, t.notifications, creds.tenant_id, run_id="run-1") == before
    (event,) = rows(core, t.inbound_events, creds.tenant_id, event_id="late-wait")
    assert event["outcome"] == "stale"  # recorded, not applied

    # A new question is a new request, and that one alerts.
    opened = open_request(client, creds, clock, "run-1", "req-2")
    assert opened["run"]["state"] == "input_required"
    assert [n["input_request_id"] for n in opened["notifications"]] == ["req-2"]
