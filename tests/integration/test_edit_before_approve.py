"""Edit before approving (issue 19 item 3): a request offers an editable value with a
schema; the person approves an edited version; the answer says ``edited`` and carries the
value, bound to the versions like any answer, and the trail records it. SQLite and
PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, make_tenant
from tests.conftest import bearer

COMMAND_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string", "minLength": 1, "maxLength": 10000}},
    "required": ["command"],
}
EDITABLE = {"schema": COMMAND_SCHEMA, "value": {"command": "rm -rf ./build"}}


@pytest.fixture
def creds(core: Core) -> TenantCreds:
    return make_tenant(core)


def _run(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    r = client.put(
        f"/v1/runs/{run_id}",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text


def _open(
    client: TestClient,
    creds: TenantCreds,
    clock: Clock,
    run_id: str,
    request_id: str,
    status: int = 201,
    **extra: Any,
) -> dict[str, Any]:
    body = {
        "input_request_id": request_id,
        "kind": "approval",
        "summary": "Claude Code wants to use Bash",
        "expires_at": (clock() + timedelta(minutes=10)).isoformat(),
        **extra,
    }
    r = client.post(
        f"/v1/runs/{run_id}/input-requests", json=body, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == status, r.text
    return dict(r.json())


def _answer(
    client: TestClient, token: str, request_id: str, run_version: int, key: str, **body: Any
) -> httpx.Response:
    return client.post(
        f"/v1/input-requests/{request_id}/responses",
        json={"expected_run_version": run_version, "expected_request_version": 1, **body},
        headers={**bearer(token), "Idempotency-Key": key},
    )


def test_approve_an_edited_value(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "edit-1")
    opened = _open(client, creds, clock, "edit-1", "bash-1", editable=EDITABLE)
    assert opened["input_request"]["editable"] == EDITABLE
    version = opened["run"]["version"]

    # An edit the schema refuses: 422 naming the path; nothing recorded.
    r = _answer(
        client, creds.owner_token, "bash-1", version, "k1", decision="approve", value={"cmd": 1}
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "value"
    assert "command" in r.json()["detail"]
    r = _answer(
        client,
        creds.owner_token,
        "bash-1",
        version,
        "k2",
        decision="approve",
        value={"command": 42},
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "value.command"
    # A rejection carries no value.
    r = _answer(
        client,
        creds.owner_token,
        "bash-1",
        version,
        "k3",
        decision="reject",
        value={"command": "ls"},
    )
    assert r.status_code == 422, r.text

    # A stale version is refused like any answer.
    r = _answer(
        client,
        creds.owner_token,
        "bash-1",
        version - 1,
        "k4",
        decision="approve",
        value={"command": "rm -rf ./build/tmp"},
    )
    assert r.status_code == 409, r.text

    edited = {"command": "rm -rf ./build/tmp"}
    r = _answer(
        client, creds.owner_token, "bash-1", version, "k5", decision="approve", value=edited
    )
    assert r.status_code == 200, r.text
    response = r.json()["response"]
    assert response["edited"] is True and response["value"] == edited
    assert response["answered_by"]["id"] == creds.owner_id
    assert response["answered_by_machine"] is None
    # A retry under the same key replays it byte for byte.
    again = _answer(
        client, creds.owner_token, "bash-1", version, "k5", decision="approve", value=edited
    )
    assert again.status_code == 200 and again.content == r.content

    # The runtime reads it back: the request says edited and carries the value.
    got = client.get("/v1/input-requests/bash-1", headers=bearer(creds.runtime_key)).json()
    assert got["input_request"]["edited"] is True
    assert got["input_request"]["value"] == edited
    assert got["input_request"]["decision"] == "approve"

    # The feed's answered event carries it too.
    events = client.get("/v1/events", headers=bearer(creds.runtime_key)).json()
    answered = [e for e in events["events"] if e["type"] == "input_request.answered"]
    assert answered and answered[-1]["data"]["edited"] is True
    assert answered[-1]["data"]["value"] == edited

    # The trace's answer step says the person approved an edited value.
    steps = client.get("/v1/runs/edit-1/history", headers=bearer(creds.runtime_key)).json()
    step = [s for s in steps["steps"] if s["kind"] == "answer"][-1]
    assert step["edited"] is True and step["user_id"] == creds.owner_id


def test_approving_the_value_unchanged_is_not_an_edit(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "edit-2")
    opened = _open(client, creds, clock, "edit-2", "bash-2", editable=EDITABLE)
    version = opened["run"]["version"]
    r = _answer(
        client,
        creds.owner_token,
        "bash-2",
        version,
        "k1",
        decision="approve",
        value={"command": "rm -rf ./build"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["response"]["edited"] is False


def test_a_plain_approval_still_takes_no_value(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "edit-3")
    opened = _open(client, creds, clock, "edit-3", "plain-3")
    r = _answer(
        client,
        creds.owner_token,
        "plain-3",
        opened["run"]["version"],
        "k1",
        decision="approve",
        value={"command": "ls"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "value"


@pytest.mark.parametrize(
    ("editable", "field"),
    [
        ({"schema": {"type": "object", "pattern": "x"}, "value": {}}, "editable.schema.pattern"),
        ({"schema": {"type": "null"}, "value": None}, "editable.schema.type"),
        (
            {"schema": {"type": "object", "properties": {"a": {"$ref": "#"}}}, "value": {}},
            "editable.schema.properties.a.$ref",
        ),
        ({"schema": COMMAND_SCHEMA, "value": {"command": ""}}, "editable.value.command"),
        ({"schema": COMMAND_SCHEMA}, "editable.value"),
        ({"value": 1}, "editable"),
    ],
)
def test_editable_outside_the_subset_is_refused(
    core: Core,
    client: TestClient,
    creds: TenantCreds,
    clock: Clock,
    editable: dict[str, Any],
    field: str,
) -> None:
    _run(client, creds, "edit-4")
    r = client.post(
        "/v1/runs/edit-4/input-requests",
        json={
            "input_request_id": "bad-4",
            "kind": "approval",
            "summary": "x",
            "editable": editable,
        },
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field, r.json()


def test_editable_is_for_approvals(
    core: Core, client: TestClient, creds: TenantCreds, clock: Clock
) -> None:
    _run(client, creds, "edit-5")
    r = client.post(
        "/v1/runs/edit-5/input-requests",
        json={"input_request_id": "t-5", "kind": "text", "summary": "x", "editable": EDITABLE},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "editable"
