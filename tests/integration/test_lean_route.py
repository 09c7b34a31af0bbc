"""The signal route's lean path (``api.lean``, ``api.routers.signals``) answers every
request exactly as FastAPI's own handler does: a table of malformed, unauthorised and
unusual requests is sent with the lean path on and off, and the answers compared byte
for byte; well-formed signals get the same outcome either way, and are served lean."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from runbell.api.lean import LeanRoute
from runbell.api.routers import signals
from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import bearer

LIMIT = 256 * 1024


def _routes() -> list[LeanRoute]:
    found = [r for r in signals.router.routes if isinstance(r, LeanRoute)]
    assert len(found) == 1
    return found


@pytest.fixture
def lean_switch() -> Iterator[list[LeanRoute]]:
    routes = _routes()
    yield routes
    for r in routes:
        r.enabled = True


def _send(client: TestClient, case: dict[str, Any]) -> tuple[int, str, bytes]:
    r = client.request(
        "POST",
        case["path"],
        content=case.get("content"),
        headers=case.get("headers", {}),
    )
    return r.status_code, r.headers.get("content-type", ""), r.content


def _cases(creds: TenantCreds, user_token: str) -> list[tuple[str, dict[str, Any]]]:
    key = {**bearer(creds.runtime_key), "content-type": "application/json"}
    anon = {"content-type": "application/json"}
    person = {**bearer(user_token), "content-type": "application/json"}
    good = b'{"event_id":"e-x","state":"completed"}'
    nested = b"[" * 100_000 + b"]" * 100_000
    path = "/v1/runs/lean-1/signals"

    def case(content: bytes, headers: dict[str, str], at: str = path) -> dict[str, Any]:
        return {"path": at, "content": content, "headers": headers}

    def body(extra: bytes) -> bytes:
        return b'{"event_id":"e","state":"completed"' + extra + b"}"

    return [
        ("no credentials", case(good, anon)),
        ("a person, not a key", case(good, person)),
        ("invalid JSON", case(b'{"event_id": ', key)),
        ("invalid JSON, no credentials", case(b"{nope", anon)),
        ("a JSON array", case(b"[1, 2]", key)),
        ("a JSON string", case(b'"completed"', key)),
        ("an empty body", case(b"", key)),
        ("no content type", case(good, bearer(creds.runtime_key))),
        ("text/plain", case(good, {**key, "content-type": "text/plain"})),
        ("unknown field", case(body(b',"x":1'), key)),
        ("unknown state", case(b'{"event_id":"e","state":"done"}', key)),
        ("missing event id", case(b'{"state":"completed"}', key)),
        ("a string sequence", case(body(b',"sequence":"7"'), key)),
        ("a naive at", case(body(b',"at":"2026-01-01T00:00:00"'), key)),
        ("NUL in a value", case(b'{"event_id":"e\\u0000","state":"completed"}', key)),
        ("NUL, no credentials", case(b'{"event_id":"e\\u0000","state":"completed"}', anon)),
        ("NaN", case(body(b',"sequence":NaN'), key)),
        ("an invalid escape", case(b'{"event_id":"\\x41","state":"completed"}', key)),
        ("deeply nested", case(body(b',"report":' + nested), key)),
        ("not UTF-8", case(b'{"event_id":"\xff","state":"completed"}', key)),
        ("a query parameter", case(good, key, path + "?force=1")),
        ("a bad run id", case(good, key, "/v1/runs/-lean/signals")),
        ("a run id with a newline", case(good, key, "/v1/runs/lean%0A/signals")),
        ("an unknown run", case(good, key, "/v1/runs/lean-none/signals")),
        ("over the body limit", case(body(b',"reason":"' + b"r" * LIMIT + b'"'), key)),
    ]


def test_every_odd_request_answers_as_fastapi_would(
    core: Core, creds: TenantCreds, client: TestClient, lean_switch: list[LeanRoute]
) -> None:
    _, user_token = add_user(core, creds.tenant_id, "lean@example.com")
    r = client.put(
        "/v1/runs/lean-1",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text
    for name, case in _cases(creds, user_token):
        answers = []
        for on in (True, False):
            for route in lean_switch:
                route.enabled = on
            answers.append(_send(client, case))
        assert answers[0] == answers[1], name
        assert answers[0][0] >= 400, (name, answers[0])
    # none of them moved the run
    r = client.get("/v1/runs/lean-1", headers=bearer(creds.runtime_key))
    assert r.json()["state"] == "working"


def test_well_formed_signals_get_the_same_outcome_either_way(
    core: Core, creds: TenantCreds, client: TestClient, lean_switch: list[LeanRoute]
) -> None:
    outcomes: list[dict[str, Any]] = []
    for on, run_id in ((True, "lean-a"), (False, "lean-b")):
        for route in lean_switch:
            route.enabled = on
        r = client.put(
            f"/v1/runs/{run_id}",
            json={"owner": creds.owner_email, "state": "working"},
            headers=bearer(creds.runtime_key),
        )
        assert r.status_code == 201, r.text
        steps = (("e1", "input_required"), ("e1", "input_required"), ("e2", "completed"))
        for event, state in steps:
            r = client.post(
                f"/v1/runs/{run_id}/signals",
                json={"event_id": f"{run_id}-{event}", "state": state, "reason": "  two\nlines "},
                headers=bearer(creds.runtime_key),
            )
            assert r.status_code == 200, r.text
            doc = r.json()
            outcomes.append(
                {
                    "outcome": doc["outcome"],
                    "state": doc["run"]["state"],
                    "version": doc["run"]["version"],
                    "keys": sorted(doc),
                    "attention": sorted(n["attention_type"] for n in doc["notifications"]),
                }
            )
    assert outcomes[:3] == outcomes[3:]
    assert [o["outcome"] for o in outcomes[:3]] == ["applied", "duplicate", "applied"]


def _request(client: TestClient, token: str, run_id: str, body: bytes) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:  # pragma: no cover - the body is read once
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    path = f"/v1/runs/{run_id}/signals"
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
        ],
        "path_params": {"run_id": run_id},
        "app": client.app,
        "client": ("127.0.0.1", 1),
    }
    return Request(scope, receive)


def test_a_well_formed_signal_is_served_lean(
    core: Core, creds: TenantCreds, client: TestClient
) -> None:
    """The lean path still takes the common request (a FastAPI upgrade that changed what
    it relies on — the app's dependencies — would quietly make every signal slow)."""
    client.put(
        "/v1/runs/lean-c",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(creds.runtime_key),
    )
    body = json.dumps({"event_id": "e1", "state": "completed"}).encode()

    async def go() -> Any:
        return await signals._lean(_request(client, creds.runtime_key, "lean-c", body))

    response = client.portal.call(go)  # type: ignore[union-attr]
    assert response is not None and response.status_code == 200
    assert json.loads(bytes(response.body))["outcome"] == "applied"
