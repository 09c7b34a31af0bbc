"""The lean paths (``api.lean``) of the signal route (``api.routers.signals``) and of
``PUT /v1/runs/{id}`` (``api.routers.runs``) answer every request exactly as FastAPI's
own handler does: a table of malformed, unauthorised and unusual requests is sent with
the lean path on and off, and the answers compared byte for byte; well-formed signals and
PUTs get the same answers either way, and are served lean."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from runbell.api.lean import LeanRoute
from runbell.api.routers import runs, signals
from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, add_user
from tests.conftest import bearer

LIMIT = 256 * 1024


def _routes() -> list[LeanRoute]:
    found = [r for r in (*signals.router.routes, *runs.router.routes) if isinstance(r, LeanRoute)]
    assert [sorted(r.methods) for r in found] == [["POST"], ["PUT"]]
    return found


class Switch:
    """Turns the lean paths on and off. Per class: FastAPI builds the app's own route
    objects from the routers' (a router included with dependencies gets copies), so an
    instance's flag would not reach them."""

    def __init__(self, routes: list[LeanRoute]) -> None:
        self.classes = {type(r) for r in routes}

    def __call__(self, on: bool) -> None:
        for cls in self.classes:
            cls.enabled = on


@pytest.fixture
def lean_switch() -> Iterator[Switch]:
    switch = Switch(_routes())
    yield switch
    switch(True)


def _send(client: TestClient, case: dict[str, Any]) -> tuple[int, str, bytes]:
    r = client.request(
        case.get("method", "POST"),
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


def _put_cases(creds: TenantCreds, user_token: str) -> list[tuple[str, dict[str, Any]]]:
    """The odd ``PUT``s: each refused, by the lean path's checks or by FastAPI's."""
    key = {**bearer(creds.runtime_key), "content-type": "application/json"}
    anon = {"content-type": "application/json"}
    person = {**bearer(user_token), "content-type": "application/json"}
    owner = creds.owner_email.encode()
    good = b'{"owner":"' + owner + b'","state":"working"}'
    nested = b"[" * 100_000 + b"]" * 100_000
    path = "/v1/runs/lean-put"

    def case(content: bytes, headers: dict[str, str], at: str = path) -> dict[str, Any]:
        return {"method": "PUT", "path": at, "content": content, "headers": headers}

    def body(extra: bytes) -> bytes:
        return b'{"owner":"' + owner + b'"' + extra + b"}"

    return [
        ("no credentials", case(good, anon)),
        ("a person, not a key", case(good, person)),
        ("invalid JSON", case(b'{"owner": ', key)),
        ("invalid JSON, no credentials", case(b"{nope", anon)),
        ("a JSON array", case(b"[1, 2]", key)),
        ("a JSON null", case(b"null", key)),
        ("an empty body", case(b"", key)),
        ("no content type", case(good, bearer(creds.runtime_key))),
        ("text/plain", case(good, {**key, "content-type": "text/plain"})),
        ("unknown field", case(body(b',"x":1'), key)),
        ("a finished state", case(body(b',"state":"completed"'), key)),
        ("no owner", case(b'{"state":"working"}', key)),
        ("an unknown owner", case(b'{"owner":"nobody@example.com"}', key)),
        ("a string for a bool", case(body(b',"notify_on_complete":"yes"'), key)),
        ("a long title", case(body(b',"title":"' + b"t" * 5000 + b'"'), key)),
        ("NUL in a value", case(body(b',"title":"a\\u0000"'), key)),
        ("NUL, no credentials", case(body(b',"title":"a\\u0000"'), anon)),
        ("NaN", case(body(b',"sequence":NaN'), key)),
        ("an invalid escape", case(b'{"owner":"\\x41"}', key)),
        ("deeply nested", case(body(b',"metadata":' + nested), key)),
        ("not UTF-8", case(b'{"owner":"\xff"}', key)),
        ("a query parameter", case(good, key, path + "?force=1")),
        ("a bad run id", case(good, key, "/v1/runs/-lean")),
        ("a run id with a newline", case(good, key, "/v1/runs/lean%0A")),
        ("a state on an update", case(body(b',"state":"queued"'), key, "/v1/runs/lean-1")),
        ("over the body limit", case(body(b',"title":"' + b"r" * LIMIT + b'"'), key)),
    ]


def test_every_odd_request_answers_as_fastapi_would(
    core: Core, creds: TenantCreds, client: TestClient, lean_switch: Switch
) -> None:
    _, user_token = add_user(core, creds.tenant_id, "lean@example.com")
    r = client.put(
        "/v1/runs/lean-1",
        json={"owner": creds.owner_email, "state": "working"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text
    for name, case in _cases(creds, user_token) + _put_cases(creds, user_token):
        answers = []
        for on in (True, False):
            lean_switch(on)
            answers.append(_send(client, case))
        assert answers[0] == answers[1], name
        assert answers[0][0] >= 400, (name, answers[0])
    # none of them moved the run or made one
    r = client.get("/v1/runs/lean-1", headers=bearer(creds.runtime_key))
    assert r.json()["state"] == "working"
    assert r.json()["version"] == 1
    r = client.get("/v1/runs/lean-put", headers=bearer(creds.runtime_key))
    assert r.status_code == 404


def test_well_formed_signals_get_the_same_outcome_either_way(
    core: Core, creds: TenantCreds, client: TestClient, lean_switch: Switch
) -> None:
    outcomes: list[dict[str, Any]] = []
    for on, run_id in ((True, "lean-a"), (False, "lean-b")):
        lean_switch(on)
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


def test_well_formed_puts_get_the_same_answers_either_way(
    core: Core, creds: TenantCreds, client: TestClient, clock: Clock, lean_switch: Switch
) -> None:
    """A create (201) and an update (200), with every kind of field: byte for byte the same
    answer but for the run id, lean or not."""
    clock.freeze()
    answers: list[tuple[int, str, bytes]] = []
    for on, run_id in ((True, "lean-put-a"), (False, "lean-put-b")):
        lean_switch(on)
        create = {
            "owner": creds.owner_email,
            "state": "working",
            "title": "Fix the build ✓",
            "kind": "coding",
            "subject": {"type": "pr", "id": "42", "version": "abc"},
            "objective": "green CI",
            "notify_on_complete": True,
            "metadata": {"n": 1, "nested": {"a": [1, 2.5, None, "x"]}},
            "details": {"secret": "s"},
            "sequence": 3,
            "stall_after_seconds": 600,
            "done_when": {"text": "tests pass"},
            "links": [{"kind": "conversation", "id": "c-1", "url": "https://example.com/c"}],
            "worker_id": "w-1",
        }
        for body in (create, {"title": "renamed", "links": []}):
            r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
            answers.append(
                (r.status_code, r.headers["content-type"], r.content.replace(run_id.encode(), b"R"))
            )
    assert [a[0] for a in answers] == [201, 200, 201, 200], answers
    assert answers[:2] == answers[2:]


def test_a_well_formed_put_is_served_lean(
    core: Core, creds: TenantCreds, client: TestClient
) -> None:
    """As for signals: a FastAPI upgrade that changed what the lean path relies on would
    quietly send every PUT through the slow handler."""
    body = json.dumps({"owner": creds.owner_email, "state": "working"}).encode()
    request = _request(client, creds.runtime_key, "lean-d", body, method="PUT")

    async def go() -> Any:
        return await runs._lean_put(request)

    response = client.portal.call(go)  # type: ignore[union-attr]
    assert response is not None and response.status_code == 201
    assert json.loads(bytes(response.body))["run_id"] == "lean-d"


def test_the_app_serves_both_routes_lean_and_the_switch_reaches_them(
    core: Core,
    creds: TenantCreds,
    client: TestClient,
    lean_switch: Switch,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the app's own routes (not the routers' objects the tests above find): a
    well-formed PUT and signal are answered by the lean paths, and switched off they are
    not — so the comparisons above really compare the two handlers."""
    served: list[str] = []

    def spy(name: str, lean: Any) -> Any:
        async def wrapper(request: Request) -> Any:
            answer = await lean(request)
            served.append(f"{name}:{answer is not None}")
            return answer

        return wrapper

    monkeypatch.setattr(runs, "_lean_put", spy("put", runs._lean_put))
    monkeypatch.setattr(signals, "_lean", spy("signal", signals._lean))
    key = bearer(creds.runtime_key)
    for on, run_id in ((True, "lean-e"), (False, "lean-f")):
        lean_switch(on)
        r = client.put(f"/v1/runs/{run_id}", json={"owner": creds.owner_email}, headers=key)
        assert r.status_code == 201, r.text
        r = client.post(
            f"/v1/runs/{run_id}/signals", json={"event_id": run_id, "state": "working"}, headers=key
        )
        assert r.status_code == 200, r.text
    assert served == ["put:True", "signal:True"]


def _request(
    client: TestClient, token: str, run_id: str, body: bytes, *, method: str = "POST"
) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:  # pragma: no cover - the body is read once
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    path = f"/v1/runs/{run_id}/signals" if method == "POST" else f"/v1/runs/{run_id}"
    scope = {
        "type": "http",
        "method": method,
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
