"""The HTTP contract as a client sees it (DESIGN §6): every JSON answer ends in one newline
and parses, and /openapi.json declares the problem answers each operation can give."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi.testclient import TestClient

from runbell.testing import TenantCreds
from tests.conftest import bearer

LIMIT = 256 * 1024


def assert_one_newline_json(r: httpx.Response) -> Any:
    """The body is JSON followed by exactly one newline (so curl output ends cleanly)."""
    assert r.content.endswith(b"\n"), r.content[-40:]
    assert not r.content.endswith(b"\n\n"), r.content[-40:]
    assert not r.content[:-1].endswith((b" ", b"\r")), r.content[-40:]
    return json.loads(r.content)


def test_every_json_answer_ends_with_one_newline(client: TestClient, creds: TenantCreds) -> None:
    """Successes, problem+json errors (schema, Runbell, framework, body limit) and the
    OpenAPI document all end in exactly one newline and still parse."""
    rt, admin, me = bearer(creds.runtime_key), bearer(creds.admin_key), bearer(creds.owner_token)
    seen: dict[str, httpx.Response] = {}

    def call(name: str, method: str, path: str, status: int, **kw: Any) -> Any:
        r = client.request(method, path, **kw)
        assert r.status_code == status, (name, r.status_code, r.text)
        seen[name] = r
        return assert_one_newline_json(r)

    call("health", "GET", "/healthz", 200)
    call("ready", "GET", "/readyz", 200)
    call("openapi", "GET", "/openapi.json", 200)
    call("put-run", "PUT", "/v1/runs/nl-1", 201, json={"owner": creds.owner_email}, headers=rt)
    call("get-run", "GET", "/v1/runs/nl-1", 200, headers=rt)
    call("list-runs", "GET", "/v1/runs", 200, headers=rt)
    call(
        "signal",
        "POST",
        "/v1/runs/nl-1/signals",
        200,
        json={"event_id": "e1", "state": "failed", "error": {"user_action_required": True}},
        headers=rt,
    )
    call("progress", "POST", "/v1/runs/nl-1/progress", 202, json={"message": "x"}, headers=rt)
    call("events", "GET", "/v1/events?after=earliest", 200, headers=rt)
    inbox = call("inbox", "GET", "/v1/notifications", 200, headers=me)
    note_id = inbox["notifications"][0]["id"]
    call("trail", "GET", f"/v1/notifications/{note_id}/trail", 200, headers=admin)
    call("ack", "POST", f"/v1/notifications/{note_id}/ack", 200, headers=me)
    call(
        "endpoint",
        "POST",
        "/v1/webhook-endpoints",
        201,
        json={"url": "http://127.0.0.1:9/hook"},
        headers={**admin, "Idempotency-Key": "nl-ep"},
    )
    call(
        "endpoint-replay",
        "POST",
        "/v1/webhook-endpoints",
        201,
        json={"url": "http://127.0.0.1:9/hook"},
        headers={**admin, "Idempotency-Key": "nl-ep"},
    )
    call("prefs", "GET", "/v1/me/preferences", 200, headers=me)
    # problem+json, from each place that writes one
    call("schema-422", "PUT", "/v1/runs/nl-2", 422, json={"sequence": "x"}, headers=rt)
    call("runbell-422", "PUT", "/v1/runs/nl-2", 422, json={"title": "t"}, headers=rt)
    call("not-json-422", "PUT", "/v1/runs/nl-2", 422, content=b"{", headers=rt)
    call("401", "GET", "/v1/runs", 401)
    call("403", "GET", "/v1/notifications", 403, headers=rt)
    call("404", "GET", "/v1/runs/nope", 404, headers=rt)
    call("404-route", "GET", "/v1/no-such-thing", 404, headers=rt)
    call("405", "DELETE", "/v1/runs/nl-1", 405, headers=rt)
    call("410", "GET", "/v1/events?after=0", 200, headers=rt)  # not expired: still JSON
    call(
        "413",
        "PUT",
        "/v1/runs/nl-3",
        413,
        content=b"{" + b" " * (LIMIT + 1) + b"}",
        headers={**rt, "Content-Type": "application/json"},
    )
    # a stored answer replays byte for byte, newline included
    assert seen["endpoint-replay"].content == seen["endpoint"].content
    for name in ("schema-422", "runbell-422", "401", "403", "404", "405", "413"):
        assert seen[name].headers["content-type"].startswith("application/problem+json"), name
