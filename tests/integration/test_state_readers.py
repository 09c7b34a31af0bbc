"""The ``mcp_tasks`` and ``openai_responses`` state readers against real local peers, and
advisory sources that use them (both databases).

- ``mcp_tasks``: a real MCP server built with the ``mcp`` SDK (streamable HTTP on a
  loopback port, bearer auth) whose task moves working → input_required → completed.
- ``openai_responses``: a local HTTP server serving ``GET /v1/responses/{id}`` in the
  shape of OpenAI's Response object.
- An OpenAI ``response.completed`` webhook (thin payload, Standard Webhooks headers
  signed with the reference library) while the reader still says ``in_progress``: no
  alert; the scheduler's re-check applies it once the reader says ``completed``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from standardwebhooks import Webhook

from runbell.dispatch.scheduler import Scheduler
from runbell.domain.errors import ReaderError, ValidationFailed
from runbell.flows.context import Core
from runbell.ingress.mcp_tasks import McpTasksReader
from runbell.ingress.openai_responses import OpenAIResponsesReader
from runbell.ingress.readers import Observed
from runbell.testing import Clock, TenantCreds
from tests.conftest import SECRET_KEY, bearer
from tests.integration.mcp_task_server import PINNED_NAME, TaskServer
from tests.timeouts import WAIT, scaled

MCP_TOKEN = "mcp-token-5b2e-never-show-me"
OPENAI_KEY = "sk-test-9d1c-never-show-me"
LOOPBACK = frozenset({"127.0.0.1"})
# As OpenAI issues them: whsec_ and standard base64 (32 bytes here).
OPENAI_WHSEC = "whsec_" + base64.b64encode(b"openai-made-this-secret-32-bytes").decode()
OPENAI_WHSEC_NEXT = "whsec_" + base64.b64encode(b"openai-rotated-it-to-32-bytes-ok").decode()


# --- peers ---------------------------------------------------------------------------


@pytest.fixture
def task_server() -> Iterator[TaskServer]:
    with TaskServer(MCP_TOKEN) as server:
        yield server


def start_job(server: TaskServer, task_id: str) -> None:
    """Create the task the way an agent would: ``tools/call start_job`` with the SDK."""

    async def call() -> None:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {MCP_TOKEN}"}) as http,
            Client(streamable_http_client(server.url, http_client=http), cache=None) as client,
        ):
            result = await client.call_tool("start_job", {"task_id": task_id})
            assert not result.is_error

    asyncio.run(call())


class OpenAIPeer:
    """``GET /v1/responses/{id}`` with a Response object's shape; statuses set by tests."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.seen_auth: list[str | None] = []
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                peer.seen_auth.append(self.headers.get("Authorization"))
                response_id = self.path.removeprefix("/v1/responses/")
                if self.headers.get("Authorization") != f"Bearer {OPENAI_KEY}":
                    self._answer(401, {"error": {"message": "Incorrect API key provided"}})
                    return
                status = peer.status.get(response_id)
                if status is None:
                    self._answer(404, {"error": {"message": "No response found"}})
                    return
                self._answer(200, response_object(response_id, status))

            def _answer(self, code: int, doc: dict[str, Any]) -> None:
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
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)


def response_object(response_id: str, status: str) -> dict[str, Any]:
    """The fields of OpenAI's Response object a background response carries."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "background": True,
        "error": {"code": "server_error", "message": "boom"} if status == "failed" else None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "model": "gpt-4.1-2025-04-14",
        "output": [],
        "store": True,
    }


@pytest.fixture
def openai_peer() -> Iterator[OpenAIPeer]:
    peer = OpenAIPeer()
    peer.thread.start()
    yield peer
    peer.httpd.shutdown()
    peer.httpd.server_close()
    peer.thread.join(timeout=WAIT)


@pytest.fixture
def plain() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, follow_redirects=False, timeout=WAIT) as client:
        yield client


# --- mcp_tasks: the reader against a real MCP server -------------------------------------


def test_mcp_tasks_reader_follows_a_task_through_its_states(task_server: TaskServer) -> None:
    """tasks/get over streamable HTTP, each status mapped one to one."""
    start_job(task_server, "job-1")
    reader = McpTasksReader(task_server.url, bearer=MCP_TOKEN, allow_hosts=LOOPBACK)
    assert reader.read("job-1") == Observed("working", None)
    task_server.set_status("job-1", "input_required")
    assert reader.read("job-1") == Observed("input_required", None)
    task_server.set_status("job-1", "completed")
    assert reader.read("job-1") == Observed("completed", None)
    assert task_server.gets == ["job-1"] * 3
    assert task_server.unauthorized == 0


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_mcp_tasks_terminal_failures_map_one_to_one(task_server: TaskServer, status: str) -> None:
    task_server.create("job-2")
    task_server.set_status("job-2", status)
    reader = McpTasksReader(task_server.url, bearer=MCP_TOKEN, allow_hosts=LOOPBACK)
    assert reader.read("job-2").state == status


def test_mcp_tasks_template_names_the_task_of_a_run(task_server: TaskServer) -> None:
    task_server.create("task-run-7")
    reader = McpTasksReader(
        task_server.url,
        bearer=MCP_TOKEN,
        task_id_template="task-{run_id}",
        allow_hosts=LOOPBACK,
    )
    assert reader.read("run-7").state == "working"
    assert task_server.gets == ["task-run-7"]


def test_mcp_tasks_unknown_task_is_cannot_tell(task_server: TaskServer) -> None:
    reader = McpTasksReader(task_server.url, bearer=MCP_TOKEN, allow_hosts=LOOPBACK)
    with pytest.raises(ReaderError, match="unknown or expired task"):
        reader.read("nope")


def test_mcp_tasks_wrong_bearer_is_an_error_without_the_token(task_server: TaskServer) -> None:
    task_server.create("job-3")
    reader = McpTasksReader(task_server.url, bearer="wrong-token", allow_hosts=LOOPBACK)
    with pytest.raises(ReaderError) as caught:
        reader.read("job-3")
    assert "wrong-token" not in str(caught.value)
    assert task_server.unauthorized >= 1
    assert task_server.gets == []
    assert "wrong-token" not in repr(reader)


def test_mcp_tasks_loopback_is_refused_unless_allow_listed(task_server: TaskServer) -> None:
    """The SSRF guard sits on the SDK's HTTP stack: nothing reaches the server."""
    task_server.create("job-4")
    reader = McpTasksReader(task_server.url, bearer=MCP_TOKEN)
    with pytest.raises(ReaderError, match="refused"):
        reader.read("job-4")
    assert task_server.gets == []
    assert task_server.unauthorized == 0


def test_mcp_tasks_reader_dials_the_checked_address_and_keeps_the_name(
    task_server: TaskServer,
) -> None:
    """The name is resolved once, by the guard's resolver, and the connection goes to that
    answer: a name no system resolver knows still reaches the server, whose every request
    carries the name in Host."""
    asked: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["127.0.0.1"]

    task_server.create("job-p")
    url = f"http://{PINNED_NAME}:{task_server.port}/mcp"
    reader = McpTasksReader(
        url, bearer=MCP_TOKEN, allow_hosts=frozenset({PINNED_NAME}), resolve=resolve
    )
    assert reader.read("job-p").state == "working"
    assert asked and {host for host, _ in asked} == {PINNED_NAME}
    assert set(task_server.hosts) == {f"{PINNED_NAME}:{task_server.port}"}


def test_mcp_tasks_a_name_resolving_into_our_network_is_refused(task_server: TaskServer) -> None:
    """Not allow-listed, a name whose answer is loopback is refused before any connect."""
    task_server.create("job-r")
    url = f"https://{PINNED_NAME}:{task_server.port}/mcp"
    reader = McpTasksReader(url, bearer=MCP_TOKEN, resolve=lambda host, port: ["127.0.0.1"])
    with pytest.raises(ReaderError, match="refused"):
        reader.read("job-r")
    assert task_server.hosts == []


def test_mcp_tasks_a_server_that_never_answers_is_cannot_tell() -> None:
    """A peer that accepts and then says nothing costs one bounded read, not a worker."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []

    def hold() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=hold, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
    try:
        reader = McpTasksReader(url, timeout=0.5, allow_hosts=LOOPBACK)
        with pytest.raises(ReaderError, match=r"took over 0\.5 s|timed out|ReadTimeout"):
            reader.read("job-1")
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_mcp_tasks_reader_is_usable_from_inside_an_event_loop(task_server: TaskServer) -> None:
    task_server.create("job-5")
    reader = McpTasksReader(task_server.url, bearer=MCP_TOKEN, allow_hosts=LOOPBACK)

    async def inside() -> Observed:
        return reader.read("job-5")

    assert asyncio.run(inside()).state == "working"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": "ftp://example.com/mcp"}, "url"),
        ({"url": "https://user:pw@example.com/mcp"}, "url"),
        ({"url": "https://example.com/mcp", "task_id_template": "fixed"}, "task_id_template"),
        ({"url": "https://example.com/mcp", "timeout": 90}, "timeout"),
        ({"url": "https://example.com/mcp", "bearer": "a\nb"}, "bearer"),
    ],
)
def test_mcp_tasks_bad_config_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    url = kwargs.pop("url")
    with pytest.raises(ValidationFailed) as caught:
        McpTasksReader(url, **kwargs)
    assert caught.value.extra["field"] == field


# --- openai_responses: the reader against a local Responses endpoint -----------------------


@pytest.mark.parametrize(
    ("status", "observed"),
    [
        ("queued", Observed("working", None)),
        ("in_progress", Observed("working", None)),
        ("completed", Observed("completed", None)),
        ("failed", Observed("failed", None)),
        ("cancelled", Observed("cancelled", None)),
        ("incomplete", Observed("completed", None, effects_verified=False)),
    ],
)
def test_openai_reader_maps_each_status(
    plain: httpx.Client, openai_peer: OpenAIPeer, status: str, observed: Observed
) -> None:
    openai_peer.status["resp_1"] = status
    reader = OpenAIResponsesReader(plain, OPENAI_KEY, base_url=openai_peer.base_url)
    assert reader.read("resp_1") == observed
    assert openai_peer.seen_auth == [f"Bearer {OPENAI_KEY}"]


def test_openai_reader_errors_never_show_the_key(
    plain: httpx.Client, openai_peer: OpenAIPeer
) -> None:
    openai_peer.status["resp_1"] = "completed"
    reader = OpenAIResponsesReader(plain, "sk-wrong-key-1234", base_url=openai_peer.base_url)
    with pytest.raises(ReaderError, match="HTTP 401") as caught:
        reader.read("resp_1")
    assert "sk-wrong" not in str(caught.value) and "sk-wrong" not in repr(reader)
    with pytest.raises(ReaderError, match="HTTP 404"):
        OpenAIResponsesReader(plain, OPENAI_KEY, base_url=openai_peer.base_url).read("resp_x")


def test_openai_reader_refuses_an_unknown_status(
    plain: httpx.Client, openai_peer: OpenAIPeer
) -> None:
    openai_peer.status["resp_1"] = "requires_action"
    reader = OpenAIResponsesReader(plain, OPENAI_KEY, base_url=openai_peer.base_url)
    with pytest.raises(ReaderError, match="requires_action"):
        reader.read("resp_1")


def test_openai_reader_response_ids_stay_in_the_path(
    plain: httpx.Client, openai_peer: OpenAIPeer
) -> None:
    reader = OpenAIResponsesReader(plain, OPENAI_KEY, base_url=openai_peer.base_url)
    assert reader.url_for("resp_1/../x?y") == (
        f"{openai_peer.base_url}/v1/responses/resp_1%2F..%2Fx%3Fy"
    )


@pytest.mark.parametrize(
    ("base_url", "api_key", "field"),
    [
        ("https://api.openai.com/v1", OPENAI_KEY, "base_url"),
        ("not a url", OPENAI_KEY, "base_url"),
        ("https://api.openai.com", "", "api_key"),
    ],
)
def test_openai_reader_bad_config_names_the_field(
    plain: httpx.Client, base_url: str, api_key: str, field: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        OpenAIResponsesReader(plain, api_key, base_url=base_url)
    assert caught.value.extra["field"] == field


# --- advisory sources through the API (SQLite and PostgreSQL) --------------------------------


def signed(body: bytes, secret: str, msg_id: str, at: datetime) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body.decode()),
        "content-type": "application/json",
    }


def deliver(
    client: TestClient, source: dict[str, Any], payload: Any, msg_id: str, at: datetime
) -> Any:
    body = json.dumps(payload).encode()
    return client.post(
        f"/v1/sources/{source['id']}/webhook",
        content=body,
        headers=signed(body, source["signing_secret"], msg_id, at),
    )


def create_source(client: TestClient, creds: TenantCreds, **body: Any) -> dict[str, Any]:
    r = client.post("/v1/sources", json=body, headers=bearer(creds.admin_key))
    assert r.status_code == 201, r.text
    source: dict[str, Any] = r.json()
    return source


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


@pytest.fixture
def frozen(clock: Clock) -> Clock:
    clock.freeze(clock().replace(microsecond=0))
    return clock


def openai_event(event_type: str, response_id: str, at: datetime) -> dict[str, Any]:
    return {
        "id": f"evt_{response_id}_{event_type}",
        "object": "event",
        "created_at": int(at.timestamp()),
        "type": event_type,
        "data": {"id": response_id},
    }


@pytest.fixture
def openai_source(
    client: TestClient, creds: TenantCreds, openai_peer: OpenAIPeer
) -> dict[str, Any]:
    """An OpenAI source the way OpenAI is set up: OpenAI makes the endpoint's signing
    secret, Runbell is given it (and does not echo it)."""
    source = create_source(
        client,
        creds,
        name="openai",
        kind="webhook",
        mapper="openai",
        trust="advisory",
        reader={
            "type": "openai_responses",
            "api_key": OPENAI_KEY,
            "base_url": openai_peer.base_url,
        },
        signing_secret=OPENAI_WHSEC,
    )
    assert "signing_secret" not in source
    return {**source, "signing_secret": OPENAI_WHSEC}


def test_openai_completed_webhook_waits_for_the_reader_then_the_recheck_applies_it(
    client: TestClient,
    core: Core,
    frozen: Clock,
    creds: TenantCreds,
    openai_peer: OpenAIPeer,
    openai_source: dict[str, Any],
) -> None:
    """response.completed while the response is still in_progress: mismatch, no alert;
    a redelivery (same webhook-id) is a duplicate; once OpenAI says completed, the
    scheduler's re-check applies it and alerts once."""
    start_run(client, creds, "resp_bg1")
    openai_peer.status["resp_bg1"] = "in_progress"
    event = openai_event("response.completed", "resp_bg1", frozen())
    r = deliver(client, openai_source, event, "wh_1", frozen())
    assert r.status_code == 200, r.text
    assert [x["outcome"] for x in r.json()["results"]] == ["mismatch"]
    assert run_state(client, creds, "resp_bg1") == "working"
    assert attention_types(client, creds) == []

    again = deliver(client, openai_source, event, "wh_1", frozen.advance(5))
    assert [x["outcome"] for x in again.json()["results"]] == ["duplicate"]

    scheduler = Scheduler(core)
    # Still in progress at the first re-check: nothing changes.
    first = frozen.advance(core.settings.mismatch_backoff_s[0] + 1)
    assert scheduler.tick(first)["mismatch"] == 1
    assert run_state(client, creds, "resp_bg1") == "working"
    assert attention_types(client, creds) == []

    openai_peer.status["resp_bg1"] = "completed"
    later = frozen.advance(max(core.settings.mismatch_backoff_s) + 1)
    assert scheduler.tick(later)["mismatch"] == 1
    assert run_state(client, creds, "resp_bg1") == "completed"
    assert attention_types(client, creds) == ["completed"]
    assert scheduler.tick(frozen.advance(3600))["mismatch"] == 0
    assert attention_types(client, creds) == ["completed"]
    assert set(openai_peer.seen_auth) == {f"Bearer {OPENAI_KEY}"}


def test_openai_incomplete_is_confirmed_as_needs_review(
    client: TestClient,
    frozen: Clock,
    creds: TenantCreds,
    openai_peer: OpenAIPeer,
    openai_source: dict[str, Any],
) -> None:
    start_run(client, creds, "resp_inc")
    openai_peer.status["resp_inc"] = "incomplete"
    r = deliver(
        client,
        openai_source,
        openai_event("response.incomplete", "resp_inc", frozen()),
        "wh_i",
        frozen(),
    )
    assert [x["outcome"] for x in r.json()["results"]] == ["applied"]
    assert run_state(client, creds, "resp_inc") == "completed"
    assert attention_types(client, creds) == ["needs_review"]


def test_openai_completed_claim_on_an_incomplete_response_is_a_review(
    client: TestClient,
    frozen: Clock,
    creds: TenantCreds,
    openai_peer: OpenAIPeer,
    openai_source: dict[str, Any],
) -> None:
    """The reader's word on the effects wins: never a success alert for a cut-off answer."""
    start_run(client, creds, "resp_cut")
    openai_peer.status["resp_cut"] = "incomplete"
    r = deliver(
        client,
        openai_source,
        openai_event("response.completed", "resp_cut", frozen()),
        "wh_c",
        frozen(),
    )
    assert [x["outcome"] for x in r.json()["results"]] == ["applied"]
    assert attention_types(client, creds) == ["needs_review"]


def test_openai_source_key_is_sealed_and_masked(
    client: TestClient, core: Core, creds: TenantCreds, openai_source: dict[str, Any]
) -> None:
    assert openai_source["reader"]["api_key"] == "***"
    listing = client.get("/v1/sources", headers=bearer(creds.admin_key))
    assert OPENAI_KEY not in listing.text
    with core.db.read() as conn:
        stored = conn.execute(
            sa.text("SELECT reader FROM sources WHERE id = :id"), {"id": openai_source["id"]}
        ).scalar_one()
    assert OPENAI_KEY not in str(stored)


def test_mcp_tasks_source_confirms_each_claim_through_tasks_get(
    client: TestClient, core: Core, frozen: Clock, creds: TenantCreds, task_server: TaskServer
) -> None:
    """A generic advisory webhook's claims are applied only as the MCP task agrees:
    input_required early → mismatch, applied by the re-check once the task is there;
    completed confirmed at once, one completed alert."""
    source = create_source(
        client,
        creds,
        name="mcp-agent",
        kind="webhook",
        mapper="generic",
        trust="advisory",
        reader={"type": "mcp_tasks", "url": task_server.url, "bearer": MCP_TOKEN},
    )
    assert source["reader"]["bearer"] == "***"
    start_job(task_server, "job-9")
    start_run(client, creds, "job-9")

    early = deliver(client, source, {"run_id": "job-9", "state": "input_required"}, "m-1", frozen())
    assert [x["outcome"] for x in early.json()["results"]] == ["mismatch"]
    assert run_state(client, creds, "job-9") == "working"

    task_server.set_status("job-9", "input_required")
    Scheduler(core).tick(frozen.advance(core.settings.mismatch_backoff_s[0] + 1))
    assert run_state(client, creds, "job-9") == "input_required"

    task_server.set_status("job-9", "completed")
    done = deliver(client, source, {"run_id": "job-9", "state": "completed"}, "m-2", frozen())
    assert [x["outcome"] for x in done.json()["results"]] == ["applied"]
    assert run_state(client, creds, "job-9") == "completed"
    assert attention_types(client, creds).count("completed") == 1
    assert MCP_TOKEN not in client.get("/v1/sources", headers=bearer(creds.admin_key)).text


@pytest.mark.parametrize(
    ("reader", "field"),
    [
        ({"type": "openai_responses"}, "reader.api_key"),
        (
            {"type": "openai_responses", "api_key": "k", "base_url": "https://x.example/v1"},
            "reader.base_url",
        ),
        ({"type": "mcp_tasks"}, "reader.url"),
        (
            {"type": "mcp_tasks", "url": "https://x.example/mcp", "task_id_template": "fixed"},
            "reader.task_id_template",
        ),
        ({"type": "mcp_tasks", "url": "https://10.0.0.8/mcp"}, None),
        ({"type": "carrier_pigeon"}, "reader"),
    ],
)
def test_registration_refuses_bad_reader_config_naming_the_field(
    client: TestClient, creds: TenantCreds, reader: dict[str, Any], field: str | None
) -> None:
    r = client.post(
        "/v1/sources",
        json={"name": "bad", "kind": "webhook", "mapper": "openai", "reader": reader},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 422, r.text
    problem = r.json()
    if field is not None:
        assert problem["field"] == field, problem
    else:
        assert problem["rule"] == "private", problem


# --- runbell source create (the CLI, as a process) -------------------------------------------


def test_cli_source_create_takes_the_new_reader_kinds(tmp_path: Path) -> None:
    """``runbell source create --reader JSON`` registers openai_responses and mcp_tasks
    sources (secrets masked in what it prints), and refuses a bad one naming the field."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNBELL_")}
    env.update(
        RUNBELL_DATA_DIR=str(tmp_path),
        RUNBELL_SECRET_KEY=SECRET_KEY,
        RUNBELL_OUTBOUND_ALLOW_HOSTS="127.0.0.1",
    )
    runbell = str(Path(sys.executable).with_name("runbell"))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [runbell, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=scaled(60),
            check=False,
        )

    assert cli("migrate").returncode == 0
    assert cli("tenant", "create", "acme").returncode == 0
    openai_reader = {
        "type": "openai_responses",
        "api_key": OPENAI_KEY,
        "base_url": "http://127.0.0.1:9",
    }
    made = cli(
        "source",
        "create",
        "openai",
        "--tenant",
        "acme",
        "--mapper",
        "openai",
        "--reader",
        json.dumps(openai_reader),
    )
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    assert shown["reader"]["type"] == "openai_responses"
    assert shown["reader"]["api_key"] == "***"
    assert shown["signing_secret"].startswith("whsec_")
    assert OPENAI_KEY not in made.stdout + made.stderr

    mcp_reader = {"type": "mcp_tasks", "url": "http://127.0.0.1:9/mcp", "bearer": MCP_TOKEN}
    made = cli(
        "source",
        "create",
        "agent",
        "--tenant",
        "acme",
        "--mapper",
        "generic",
        "--reader",
        json.dumps(mcp_reader),
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["reader"]["bearer"] == "***"

    bad = cli(
        "source",
        "create",
        "broken",
        "--tenant",
        "acme",
        "--mapper",
        "generic",
        "--reader",
        json.dumps({**mcp_reader, "task_id_template": "fixed"}),
    )
    assert bad.returncode == 2
    assert "task_id_template" in bad.stderr and "Traceback" not in bad.stderr

    # A schema-level refusal names the field and never prints the key it was given.
    bad = cli(
        "source",
        "create",
        "slow",
        "--tenant",
        "acme",
        "--mapper",
        "openai",
        "--reader",
        json.dumps({**openai_reader, "timeout": 99}),
    )
    assert bad.returncode == 2
    assert "timeout" in bad.stderr and OPENAI_KEY not in bad.stderr + bad.stdout


def test_a_provider_issued_secret_verifies_and_rotates(
    client: TestClient,
    frozen: Clock,
    creds: TenantCreds,
    openai_peer: OpenAIPeer,
    openai_source: dict[str, Any],
) -> None:
    """OpenAI rotates its endpoint's secret: Runbell is given the new one; both verify
    until the next rotation, and neither is ever echoed."""
    r = client.post(
        f"/v1/sources/{openai_source['id']}/rotate-secret",
        json={"signing_secret": OPENAI_WHSEC_NEXT},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 200, r.text
    assert "signing_secret" not in r.json() and r.json()["secrets"] == 2
    for n, secret in enumerate((OPENAI_WHSEC, OPENAI_WHSEC_NEXT)):
        run_id = f"resp_rot{n}"
        start_run(client, creds, run_id)
        openai_peer.status[run_id] = "completed"
        event = openai_event("response.completed", run_id, frozen())
        res = deliver(client, {**openai_source, "signing_secret": secret}, event, f"w{n}", frozen())
        assert [x["outcome"] for x in res.json()["results"]] == ["applied"], res.text
    listing = client.get("/v1/sources", headers=bearer(creds.admin_key)).text
    assert OPENAI_WHSEC.removeprefix("whsec_") not in listing
    assert OPENAI_WHSEC_NEXT.removeprefix("whsec_") not in listing


@pytest.mark.parametrize(
    "secret", ["sk-not-a-webhook-secret", "whsec_not base64!", "whsec_" + "QUJD" * 2]
)
def test_a_bad_provider_secret_is_422_without_echoing_it(
    client: TestClient, creds: TenantCreds, secret: str
) -> None:
    r = client.post(
        "/v1/sources",
        json={
            "name": "openai",
            "mapper": "openai",
            "trust": "authoritative",
            "signing_secret": secret,
        },
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "signing_secret"
    assert secret not in r.text
