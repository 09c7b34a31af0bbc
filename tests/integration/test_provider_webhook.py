"""Signed provider webhooks (``POST /v1/sources/{id}/webhook``): Standard Webhooks
verification, secret rotation, dedupe, and the generic and OpenAI mappers.

Requests are signed with the ``standardwebhooks`` reference library, as a provider would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from standardwebhooks import Webhook

from runbell.flows import reconcile
from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, make_tenant
from tests.conftest import bearer
from tests.timeouts import WAIT

Headers = dict[str, str]
OPENAI_AUTH = "Bearer sk-test-4f1e0c-keep-me-secret"


# --- helpers -------------------------------------------------------------------------


@pytest.fixture
def frozen(clock: Clock) -> Clock:
    clock.freeze(clock().replace(microsecond=0))
    return clock


def signed(body: bytes, secret: str, msg_id: str, at: datetime) -> Headers:
    """The three Standard Webhooks headers, computed by the reference library."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body.decode()),
        "content-type": "application/json",
    }


def create_source(client: TestClient, creds: TenantCreds, **body: Any) -> dict[str, Any]:
    r = client.post("/v1/sources", json=body, headers=bearer(creds.admin_key))
    assert r.status_code == 201, r.text
    source: dict[str, Any] = r.json()
    return source


def generic_source(client: TestClient, creds: TenantCreds) -> dict[str, Any]:
    return create_source(
        client, creds, name="ci-runner", kind="webhook", mapper="generic", trust="authoritative"
    )


def deliver(
    client: TestClient,
    source_id: str,
    payload: Any,
    secret: str,
    msg_id: str,
    at: datetime,
) -> Any:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return client.post(
        f"/v1/sources/{source_id}/webhook", content=body, headers=signed(body, secret, msg_id, at)
    )


def start_run(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    r = client.put(
        f"/v1/runs/{run_id}",
        json={"owner": creds.owner_email, "state": "working", "notify_on_complete": True},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text


def run_state(client: TestClient, creds: TenantCreds, run_id: str) -> str:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    state: str = r.json()["state"]
    return state


def attention_types(client: TestClient, creds: TenantCreds) -> list[str]:
    r = client.get("/v1/notifications", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    return [n["attention_type"] for n in r.json()["notifications"]]


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    return problem


# --- the generic mapper, signatures, rotation, dedupe ------------------------------------------


def test_webhook_source_shows_its_signing_secret_once(
    client: TestClient, creds: TenantCreds
) -> None:
    """Creating a webhook source answers its whsec_ secret once; listings never show it."""
    source = generic_source(client, creds)
    secret = source["signing_secret"]
    assert secret.startswith("whsec_")
    assert source["webhook_url"] == f"/v1/sources/{source['id']}/webhook"
    listing = client.get("/v1/sources", headers=bearer(creds.admin_key))
    assert listing.status_code == 200
    assert secret not in listing.text
    assert secret.removeprefix("whsec_") not in listing.text
    (listed,) = [s for s in listing.json()["sources"] if s["id"] == source["id"]]
    assert "signing_secret" not in listed


def test_signed_event_is_applied_and_notifies(
    client: TestClient, frozen: Clock, creds: TenantCreds
) -> None:
    """A correctly signed generic event moves the run and alerts its owner."""
    source = generic_source(client, creds)
    start_run(client, creds, "r1")
    r = deliver(
        client,
        source["id"],
        {"run_id": "r1", "state": "completed"},
        source["signing_secret"],
        "msg_1",
        frozen(),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["accepted"] == 1
    assert [(x["run_id"], x["event_id"], x["outcome"]) for x in body["results"]] == [
        ("r1", "msg_1", "applied")
    ]
    assert run_state(client, creds, "r1") == "completed"
    assert attention_types(client, creds) == ["completed"]


@pytest.mark.parametrize("forgery", ["wrong_secret", "tampered_body", "no_signature"])
def test_bad_signature_is_401_and_records_nothing(
    client: TestClient, frozen: Clock, creds: TenantCreds, forgery: str
) -> None:
    """An unsigned or forged request is 401 and leaves no trace (its id stays usable)."""
    source = generic_source(client, creds)
    start_run(client, creds, "r1")
    body = json.dumps({"run_id": "r1", "state": "completed"}).encode()
    secret = source["signing_secret"]
    headers = signed(body, secret, "msg_1", frozen())
    sent = body
    if forgery == "wrong_secret":
        headers = signed(body, "whsec_" + "A" * 32, "msg_1", frozen())
    elif forgery == "tampered_body":
        sent = json.dumps({"run_id": "r1", "state": "failed"}).encode()
    else:
        del headers["webhook-signature"]
    r = client.post(f"/v1/sources/{source['id']}/webhook", content=sent, headers=headers)
    assert_problem(r, 401)
    assert run_state(client, creds, "r1") == "working"
    assert attention_types(client, creds) == []

    genuine = deliver(
        client, source["id"], {"run_id": "r1", "state": "completed"}, secret, "msg_1", frozen()
    )
    assert genuine.status_code == 200, genuine.text
    assert genuine.json()["results"][0]["outcome"] == "applied"


@pytest.mark.parametrize("skew_s", [-600, 600])
def test_timestamp_outside_tolerance_is_401(
    client: TestClient, frozen: Clock, creds: TenantCreds, skew_s: int
) -> None:
    """A correctly signed request stamped 10 minutes away from now is refused (replay)."""
    source = generic_source(client, creds)
    start_run(client, creds, "r1")
    r = deliver(
        client,
        source["id"],
        {"run_id": "r1", "state": "completed"},
        source["signing_secret"],
        "msg_old",
        frozen() + timedelta(seconds=skew_s),
    )
    problem = assert_problem(r, 401)
    assert "timestamp" in problem["detail"]
    assert run_state(client, creds, "r1") == "working"
    assert attention_types(client, creds) == []


def test_rotation_keeps_the_previous_secret_valid(
    client: TestClient, frozen: Clock, creds: TenantCreds
) -> None:
    """After rotate-secret the old and new secrets both verify, until the next rotation."""
    source = generic_source(client, creds)
    old = source["signing_secret"]
    r = client.post(f"/v1/sources/{source['id']}/rotate-secret", headers=bearer(creds.admin_key))
    assert r.status_code == 200, r.text
    new = r.json()["signing_secret"]
    assert new.startswith("whsec_") and new != old

    for run_id, secret in (("r-old", old), ("r-new", new)):
        start_run(client, creds, run_id)
        res = deliver(
            client,
            source["id"],
            {"run_id": run_id, "state": "completed"},
            secret,
            f"msg-{run_id}",
            frozen(),
        )
        assert res.status_code == 200, res.text
        assert res.json()["results"][0]["outcome"] == "applied"
        assert run_state(client, creds, run_id) == "completed"

    r = client.post(f"/v1/sources/{source['id']}/rotate-secret", headers=bearer(creds.admin_key))
    assert r.status_code == 200, r.text
    start_run(client, creds, "r-late")
    payload = {"run_id": "r-late", "state": "completed"}
    assert_problem(deliver(client, source["id"], payload, old, "msg-late", frozen()), 401)
    ok = deliver(client, source["id"], payload, new, "msg-late", frozen())
    assert ok.status_code == 200, ok.text


def test_same_webhook_id_twice_is_a_duplicate(
    client: TestClient, frozen: Clock, creds: TenantCreds
) -> None:
    """A redelivery (same webhook-id, re-signed later) is answered `duplicate`, one alert."""
    source = generic_source(client, creds)
    start_run(client, creds, "r1")
    payload = {"run_id": "r1", "state": "completed"}
    first = deliver(client, source["id"], payload, source["signing_secret"], "msg_1", frozen())
    assert first.json()["results"][0]["outcome"] == "applied"
    again = deliver(
        client, source["id"], payload, source["signing_secret"], "msg_1", frozen.advance(30)
    )
    assert again.status_code == 200, again.text
    assert again.json()["results"][0]["outcome"] == "duplicate"
    assert attention_types(client, creds) == ["completed"]


def test_event_for_unknown_run_is_404_and_can_be_retried(
    client: TestClient, frozen: Clock, creds: TenantCreds
) -> None:
    """An event before its run exists is 404 and not remembered, so a retry applies."""
    source = generic_source(client, creds)
    payload = {"run_id": "early", "state": "completed"}
    secret = source["signing_secret"]
    assert_problem(deliver(client, source["id"], payload, secret, "msg_e", frozen()), 404)
    start_run(client, creds, "early")
    retry = deliver(client, source["id"], payload, secret, "msg_e", frozen.advance(60))
    assert retry.status_code == 200, retry.text
    assert retry.json()["results"][0]["outcome"] == "applied"


def test_webhook_cannot_reach_another_tenants_run(
    client: TestClient, core: Core, frozen: Clock, creds: TenantCreds
) -> None:
    """A source only ever moves runs of its own tenant: another tenant's run id is 404."""
    other = make_tenant(core, "other")
    r = client.put(
        "/v1/runs/theirs",
        json={"owner": other.owner_email, "state": "working"},
        headers=bearer(other.runtime_key),
    )
    assert r.status_code == 201, r.text
    source = generic_source(client, creds)
    res = deliver(
        client,
        source["id"],
        {"run_id": "theirs", "state": "failed"},
        source["signing_secret"],
        "msg_x",
        frozen(),
    )
    assert_problem(res, 404)
    assert run_state(client, other, "theirs") == "working"


def test_another_tenant_cannot_rotate_the_secret(
    client: TestClient, core: Core, frozen: Clock, creds: TenantCreds
) -> None:
    """Rotating another tenant's source is 404, and its current secret keeps working."""
    source = generic_source(client, creds)
    other = make_tenant(core, "other")
    r = client.post(f"/v1/sources/{source['id']}/rotate-secret", headers=bearer(other.admin_key))
    assert_problem(r, 404)
    assert "signing_secret" not in r.text
    start_run(client, creds, "r1")
    ok = deliver(
        client,
        source["id"],
        {"run_id": "r1", "state": "completed"},
        source["signing_secret"],
        "m1",
        frozen(),
    )
    assert ok.status_code == 200, ok.text


# --- ids and bodies -------------------------------------------------------------------


def test_unknown_source_is_404(client: TestClient, frozen: Clock, creds: TenantCreds) -> None:
    """A webhook to a source that does not exist, or is not a webhook source, is 404."""
    payload = {"run_id": "r1", "state": "completed"}
    secret = "whsec_" + "B" * 32
    assert_problem(deliver(client, "src_doesnotexist", payload, secret, "m1", frozen()), 404)
    sources = client.get("/v1/sources", headers=bearer(creds.admin_key)).json()["sources"]
    (api_source,) = [s for s in sources if s["kind"] == "api"]
    assert_problem(deliver(client, api_source["id"], payload, secret, "m2", frozen()), 404)


def test_malformed_json_with_valid_signature_is_422(
    client: TestClient, frozen: Clock, creds: TenantCreds
) -> None:
    """A genuine but unparsable body is 422 naming the body, not a 401 or a 500."""
    source = generic_source(client, creds)
    start_run(client, creds, "r1")
    r = deliver(client, source["id"], b'{"run_id": "r1", ', source["signing_secret"], "m", frozen())
    problem = assert_problem(r, 422)
    assert problem["field"] == "body"
    assert run_state(client, creds, "r1") == "working"


def test_generic_payload_without_run_id_is_422_naming_it(
    client: TestClient, frozen: Clock, creds: TenantCreds
) -> None:
    """A signed generic event missing run_id is a 422 that names the field."""
    source = generic_source(client, creds)
    r = deliver(
        client, source["id"], {"state": "completed"}, source["signing_secret"], "m", frozen()
    )
    assert assert_problem(r, 422)["field"] == "run_id"


# --- the OpenAI mapper with an advisory source ------------------------------------------------


class OpenAIStub:
    """An OpenAI-like ``GET /v1/responses/{id}`` answering ``{"status": …}`` set by the test."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.unauthorized = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                response_id = self.path.removeprefix("/v1/responses/")
                if self.headers.get("Authorization") != OPENAI_AUTH:
                    stub.unauthorized += 1
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = stub.status.get(response_id)
                code, doc = (
                    (404, {"error": "no such response"})
                    if status is None
                    else (
                        200,
                        {
                            "id": response_id,
                            "object": "response",
                            "status": status,
                        },
                    )
                )
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        port = self.httpd.server_address[1]
        self.url_template = f"http://127.0.0.1:{port}/v1/responses/{{run_id}}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)


@pytest.fixture
def openai_api() -> Iterator[OpenAIStub]:
    stub = OpenAIStub()
    stub.thread.start()
    yield stub
    stub.httpd.shutdown()
    stub.httpd.server_close()
    stub.thread.join(timeout=WAIT)


@pytest.fixture
def openai_source(client: TestClient, creds: TenantCreds, openai_api: OpenAIStub) -> dict[str, Any]:
    return create_source(
        client,
        creds,
        name="openai",
        kind="webhook",
        mapper="openai",
        trust="advisory",
        reader={
            "type": "http_json",
            "url_template": openai_api.url_template,
            "state_field": "status",
            "sequence_field": None,
            "state_map": {"in_progress": "working", "completed": "completed"},
            "headers": {"Authorization": OPENAI_AUTH},
        },
    )


def openai_event(event_type: str, response_id: str, at: datetime) -> dict[str, Any]:
    return {
        "id": f"evt_{response_id}_{event_type}",
        "object": "event",
        "created_at": int(at.timestamp()),
        "type": event_type,
        "data": {"id": response_id},
    }


def test_openai_completed_while_still_in_progress_is_a_mismatch(
    client: TestClient,
    core: Core,
    frozen: Clock,
    creds: TenantCreds,
    openai_api: OpenAIStub,
    openai_source: dict[str, Any],
) -> None:
    """response.completed while OpenAI still says in_progress: mismatch, no alert."""
    start_run(client, creds, "resp_1")
    openai_api.status["resp_1"] = "in_progress"
    r = deliver(
        client,
        openai_source["id"],
        openai_event("response.completed", "resp_1", frozen()),
        openai_source["signing_secret"],
        "wh_1",
        frozen(),
    )
    assert r.status_code == 200, r.text
    (result,) = r.json()["results"]
    assert (result["run_id"], result["event_id"], result["outcome"]) == (
        "resp_1",
        "wh_1",
        "mismatch",
    )
    assert run_state(client, creds, "resp_1") == "working"
    assert attention_types(client, creds) == []

    # OpenAI finishes: the next re-check confirms the claim, and only then is there an alert.
    openai_api.status["resp_1"] = "completed"
    later = frozen.advance(core.settings.mismatch_backoff_s[0] + 1)
    assert reconcile.recheck_mismatches(core, later) == 1
    assert run_state(client, creds, "resp_1") == "completed"
    assert attention_types(client, creds) == ["completed"]
    assert openai_api.unauthorized == 0


def test_openai_failed_confirmed_by_the_reader_notifies(
    client: TestClient,
    frozen: Clock,
    creds: TenantCreds,
    openai_api: OpenAIStub,
    openai_source: dict[str, Any],
) -> None:
    """response.failed that the reader confirms is applied, with a `failed` alert."""
    start_run(client, creds, "resp_2")
    openai_api.status["resp_2"] = "failed"
    r = deliver(
        client,
        openai_source["id"],
        openai_event("response.failed", "resp_2", frozen()),
        openai_source["signing_secret"],
        "wh_2",
        frozen(),
    )
    assert r.status_code == 200, r.text
    assert [x["outcome"] for x in r.json()["results"]] == ["applied"]
    assert run_state(client, creds, "resp_2") == "failed"
    assert attention_types(client, creds) == ["failed"]
    assert openai_api.unauthorized == 0  # the stored credential was sent


def test_reader_credentials_are_never_shown(
    client: TestClient, creds: TenantCreds, openai_source: dict[str, Any]
) -> None:
    """The reader's Authorization header is stored sealed and listed only as ***."""
    assert openai_source["reader"]["headers"] == {"Authorization": "***"}
    listing = client.get("/v1/sources", headers=bearer(creds.admin_key))
    assert "sk-test" not in listing.text
    (listed,) = [s for s in listing.json()["sources"] if s["id"] == openai_source["id"]]
    assert listed["reader"]["headers"] == {"Authorization": "***"}


def test_openai_event_types_it_does_not_track_are_ignored(
    client: TestClient,
    frozen: Clock,
    creds: TenantCreds,
    openai_source: dict[str, Any],
) -> None:
    """batch.completed is answered 200 with nothing accepted, so OpenAI does not retry."""
    r = deliver(
        client,
        openai_source["id"],
        {
            "id": "evt_b",
            "object": "event",
            "created_at": int(frozen().timestamp()),
            "type": "batch.completed",
            "data": {"id": "batch_1"},
        },
        openai_source["signing_secret"],
        "wh_b",
        frozen(),
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": 0, "results": []}
    assert attention_types(client, creds) == []


def test_a_provider_reason_is_cleaned_and_cut_like_an_api_one(
    client: TestClient, frozen: Clock, creds: TenantCreds
) -> None:
    """The generic mapper's reason is public too: one safe line of at most 200 characters."""
    source = generic_source(client, creds)
    start_run(client, creds, "r-pub")
    payload = {"run_id": "r-pub", "state": "failed", "reason": "disk\nfull " + "z" * 400}
    r = deliver(client, source["id"], payload, source["signing_secret"], "m-pub", frozen())
    assert r.status_code == 200, r.text
    run = client.get("/v1/runs/r-pub", headers=bearer(creds.runtime_key)).json()
    assert run["stop_reason"].startswith("disk full zzz")
    assert len(run["stop_reason"]) == 200 and run["stop_reason"].endswith("…")
