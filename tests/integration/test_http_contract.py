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


# --- /openapi.json declares the real problem answers ---------------------------------

AUTH = (401, 503)  # any credential: bad credentials, database unreachable
ROLE = (401, 403, 503)  # a kind or role is required (or a session's CSRF token)
WRITE = (401, 403, 413, 422, 503)  # an unsafe method: a body can be too large or invalid

# Each operation and the problem statuses it can answer with (besides 2xx).
CAN_RETURN: dict[tuple[str, str], set[int]] = {
    # HTTP hooks (issue 20): a runtime key; the runs and requests it reports and opens.
    ("post", "/v1/hooks/claude-code"): {*WRITE, 404, 409},
    ("post", "/v1/hooks/codex"): {*WRITE, 404, 409},
    ("put", "/v1/runs/{run_id}"): {*WRITE, 409},
    # Reads answer 403 to a scoped key without runs.read (issue 18).
    ("get", "/v1/runs/{run_id}"): {*ROLE, 404, 422},
    ("get", "/v1/runs"): {*ROLE, 422},
    ("post", "/v1/runs/{run_id}/signals"): {*WRITE, 404, 409},
    ("post", "/v1/runs/{run_id}/progress"): {*WRITE, 404},
    ("post", "/v1/runs/{run_id}/input-requests"): {*WRITE, 404, 409},
    ("post", "/v1/runs/{run_id}/operations"): {*WRITE, 404, 409},
    ("get", "/v1/runs/{run_id}/operations"): {*ROLE, 404, 422},
    ("patch", "/v1/runs/{run_id}/operations/{operation_id}"): {*WRITE, 404, 409},
    ("post", "/v1/runs/{run_id}/claim"): {*WRITE, 404, 409},
    ("post", "/v1/runs/{run_id}/operations/{operation_id}/supersede"): {*WRITE, 404, 409},
    ("post", "/v1/runs/{run_id}/operations/{operation_id}/findings"): {*WRITE, 404, 409},
    ("get", "/v1/runs/{run_id}/history"): {*ROLE, 404, 422},
    ("get", "/v1/input-requests/{request_id}"): {*ROLE, 404, 422},
    ("post", "/v1/input-requests/{request_id}/responses"): {*WRITE, 404, 409},
    ("post", "/v1/runs/{run_id}/cancel"): {*WRITE, 404, 409},
    ("post", "/v1/runs/{run_id}/amendments"): {*WRITE, 404, 409},
    ("post", "/v1/sources"): {*WRITE},
    ("get", "/v1/sources"): {*ROLE},
    ("post", "/v1/sources/{source_id}/rotate-secret"): {*WRITE, 404},
    ("post", "/v1/sources/{source_id}/webhook"): {401, 404, 409, 413, 422, 503},
    ("get", "/v1/notifications"): {*ROLE, 422},
    ("get", "/v1/notifications/{notification_id}"): {*ROLE, 404},
    ("post", "/v1/notifications/{notification_id}/ack"): {*WRITE, 404},
    ("post", "/v1/inbox/acknowledge"): {*WRITE},
    ("post", "/v1/notifications/{notification_id}/receipts"): {*WRITE, 404},
    ("get", "/v1/notifications/{notification_id}/trail"): {*ROLE, 404},
    ("get", "/v1/events"): {*ROLE, 410, 422},
    ("get", "/v1/events/snapshot"): {*ROLE},
    ("get", "/v1/events/stream"): {*ROLE, 422},
    ("get", "/v1/policy"): {*ROLE},
    ("put", "/v1/policy"): {*WRITE},
    ("post", "/v1/policy/dry-run"): {*WRITE},
    ("get", "/v1/policy/retention"): {*ROLE},
    ("patch", "/v1/policy/retention"): {*WRITE},
    ("get", "/v1/deliveries"): {*ROLE, 422},
    ("get", "/v1/deliveries/{delivery_id}"): {*ROLE, 404},
    ("post", "/v1/deliveries/{delivery_id}/replay"): {*WRITE, 404, 409},
    ("get", "/v1/operator-events"): {*ROLE, 422},
    ("post", "/v1/webhook-endpoints"): {*WRITE},
    ("get", "/v1/webhook-endpoints"): {*ROLE},
    ("get", "/v1/webhook-endpoints/{endpoint_id}"): {*ROLE, 404},
    ("patch", "/v1/webhook-endpoints/{endpoint_id}"): {*WRITE, 404},
    ("post", "/v1/webhook-endpoints/{endpoint_id}/rotate-secret"): {*WRITE, 404},
    ("post", "/v1/webhook-endpoints/{endpoint_id}/recover"): {*WRITE, 404},
    ("get", "/v1/me"): {*ROLE},
    ("get", "/v1/me/preferences"): {*ROLE},
    ("put", "/v1/me/preferences"): {*WRITE},
    ("get", "/v1/push/vapid-public-key"): {503},
    ("post", "/v1/me/push-subscriptions"): {*WRITE, 409},
    ("get", "/v1/me/push-subscriptions"): {*ROLE},
    ("delete", "/v1/me/push-subscriptions/{subscription_id}"): {*ROLE, 404, 413},
    ("post", "/v1/me/chat-destinations"): {*WRITE},
    ("post", "/v1/chat-destinations"): {*WRITE},
    ("get", "/v1/me/chat-destinations"): {*ROLE},
    ("delete", "/v1/me/chat-destinations/{destination_id}"): {*ROLE, 404, 413},
    ("post", "/v1/schedules"): {*WRITE},
    ("get", "/v1/schedules"): {*AUTH},
    ("get", "/v1/schedules/{schedule_id}"): {*AUTH, 404},
    ("patch", "/v1/schedules/{schedule_id}"): {*WRITE, 404, 409},
    ("post", "/v1/schedules/{schedule_id}/pause"): {*WRITE, 404, 409},
    ("post", "/v1/schedules/{schedule_id}/resume"): {*WRITE, 404, 409},
    ("post", "/v1/schedules/{schedule_id}/revoke"): {*WRITE, 404, 409},
    # Scoped keys and delegated tokens (issue 18).
    ("post", "/v1/keys"): {*WRITE},
    ("delete", "/v1/keys/{key_id}"): {*ROLE, 404, 413},
    ("post", "/v1/runs/{run_id}/delegations"): {*WRITE, 404},
    ("get", "/v1/runs/{run_id}/delegations"): {*ROLE, 404, 422},
    ("delete", "/v1/delegations/{delegation_id}"): {*ROLE, 404, 413},
    ("post", "/v1/subject-grants"): {*WRITE},
    ("get", "/v1/subject-grants"): {*ROLE},
    ("delete", "/v1/subject-grants/{grant_id}"): {*ROLE, 404, 413},
    # Edit before approving, machines that answer (issue 19): a callback URL is its own
    # credential (no 401), used once (410).
    ("post", "/v1/input-requests/{request_id}/callback-urls"): {*WRITE, 404, 409},
    ("post", "/v1/callbacks/{token}"): {403, 404, 409, 410, 413, 503},
    ("get", "/healthz"): set(),
    ("get", "/readyz"): {503},
    # Acting from a web push (issue 19 item 2): the token is the credential.
    ("post", "/v1/push-actions"): {401, 403, 404, 409, 410, 413, 422, 503},
}
# Whatever can refuse a credential (401) refuses a guessed one with 429 past the
# failed-authentication burst (docs/api.md 1.1).
for _codes in CAN_RETURN.values():
    if 401 in _codes:
        _codes.add(429)

# Any operation answers 422 for a query parameter it does not take (issue 16 row 9).
CAN_RETURN = {operation: {*codes, 422} for operation, codes in CAN_RETURN.items()}
# POSTs that honour Idempotency-Key (docs/api.md 1.4).
IDEMPOTENT = {
    "/v1/webhook-endpoints",
    "/v1/webhook-endpoints/{endpoint_id}/rotate-secret",
    "/v1/webhook-endpoints/{endpoint_id}/recover",
    "/v1/sources",
    "/v1/sources/{source_id}/rotate-secret",
    "/v1/runs/{run_id}/input-requests",
    "/v1/runs/{run_id}/operations",
    "/v1/runs/{run_id}/claim",
    "/v1/input-requests/{request_id}/responses",
    "/v1/runs/{run_id}/cancel",
    "/v1/runs/{run_id}/amendments",
    "/v1/me/push-subscriptions",
    "/v1/me/chat-destinations",
    "/v1/chat-destinations",
    "/v1/deliveries/{delivery_id}/replay",
    "/v1/subject-grants",
    "/v1/notifications/{notification_id}/ack",
    "/v1/inbox/acknowledge",
    "/v1/notifications/{notification_id}/receipts",
    "/v1/schedules",
}


def test_openapi_declares_each_operations_problem_answers(client: TestClient) -> None:
    """Every operation declares each problem status it can answer with, as
    application/problem+json with the shared Problem schema, and no FastAPI 422 shape
    that the server never sends."""
    doc = client.get("/openapi.json").json()
    operations = {
        (method, path): op for path, item in doc["paths"].items() for method, op in item.items()
    }
    assert set(operations) == set(CAN_RETURN), set(operations) ^ set(CAN_RETURN)
    for (method, path), op in operations.items():
        for code in CAN_RETURN[(method, path)]:
            declared = op["responses"].get(str(code))
            assert declared is not None, f"{method} {path} does not declare {code}"
            content = declared["content"]
            assert list(content) == ["application/problem+json"], (method, path, code)
            assert content["application/problem+json"]["schema"] == {
                "$ref": "#/components/schemas/Problem"
            }
        for code in op["responses"]:
            if not code.startswith("2"):
                assert int(code) in CAN_RETURN[(method, path)], f"{method} {path}: {code}?"
        if (method, path) != ("get", "/v1/events/stream"):
            assert op["responses"].get(str(doc_success(op))) is not None
        for waits in (429, 503):
            if waits in CAN_RETURN[(method, path)]:
                assert "Retry-After" in op["responses"][str(waits)]["headers"]
        headers = {p["name"] for p in op.get("parameters", []) if p["in"] == "header"}
        assert ("Idempotency-Key" in headers) == (method == "post" and path in IDEMPOTENT), (
            method,
            path,
        )
    problem = doc["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail"}
    assert {"field", "errors", "current"} <= set(problem["properties"])
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    stream = operations[("get", "/v1/events/stream")]["responses"]["200"]["content"]
    assert list(stream) == ["text/event-stream"]


def doc_success(op: dict[str, Any]) -> int:
    return min(int(c) for c in op["responses"] if c.startswith("2"))


def test_declared_problems_are_what_the_server_sends(
    client: TestClient, creds: TenantCreds
) -> None:
    """A sample of real answers: each status is declared for its operation, with the
    media type the server really uses."""
    doc = client.get("/openapi.json").json()
    rt, me = bearer(creds.runtime_key), bearer(creds.owner_token)
    samples = [
        ("get", "/v1/runs/{run_id}", client.get("/v1/runs/nope", headers=rt)),
        ("get", "/v1/runs/{run_id}", client.get("/v1/runs/nope")),
        ("get", "/v1/notifications", client.get("/v1/notifications", headers=rt)),
        ("get", "/v1/events", client.get("/v1/events?after=x", headers=rt)),
        (
            "post",
            "/v1/me/chat-destinations",
            client.post("/v1/me/chat-destinations", json={}, headers=me),
        ),
        (
            "put",
            "/v1/runs/{run_id}",
            client.put(
                "/v1/runs/big",
                content=b"{" + b" " * (LIMIT + 1) + b"}",
                headers={**rt, "Content-Type": "application/json"},
            ),
        ),
    ]
    for method, path, r in samples:
        declared = doc["paths"][path][method]["responses"][str(r.status_code)]
        assert r.headers["content-type"].split(";")[0] in declared["content"], (path, r.text)


def test_a_405_lists_every_method_of_the_path(client: TestClient, creds: TenantCreds) -> None:
    """Paths served by several routes answer 405 with all their methods in Allow."""
    rt = bearer(creds.runtime_key)
    for path, allow in (
        ("/v1/runs/r1", "GET, PUT"),
        ("/v1/webhook-endpoints/ep_1", "GET, PATCH"),
        ("/v1/sources", "GET, POST"),
        ("/v1/me/preferences", "GET, PUT"),
    ):
        r = client.request("DELETE", path, headers=rt)
        assert r.status_code == 405, r.text
        assert r.headers["allow"] == allow, path
        assert r.headers["content-type"].startswith("application/problem+json")
