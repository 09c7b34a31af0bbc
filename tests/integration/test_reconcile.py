"""Advisory sources and reconciliation (invariant 3): no success alert until the runtime's
own state, read over HTTP by the source's ``http_json`` state reader, agrees.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.dispatch.scheduler import Scheduler
from runbell.flows import reconcile
from runbell.flows.context import Core
from runbell.store import accounts
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds
from tests.conftest import bearer, free_port
from tests.timeouts import WAIT

Headers = dict[str, str]
AFTER_ANY_BACKOFF_S = 2000  # more than the longest default backoff step (1800 s)


class RuntimeStub:
    """The agent runtime's status endpoint: ``GET /runs/{run_id}`` answers what the test set."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, dict[str, Any]]] = {}
        self.requests: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub.requests.append(self.path)
                run_id = self.path.removeprefix("/runs/")
                status, doc = stub.answers.get(run_id, (404, {"error": "unknown run"}))
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url_template = f"http://127.0.0.1:{self.httpd.server_address[1]}/runs/{{run_id}}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def say(self, run_id: str, state: str, *, status: int = 200) -> None:
        self.answers[run_id] = (status, {"state": state})

    def __enter__(self) -> RuntimeStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=WAIT)


@pytest.fixture
def runtime() -> Iterator[RuntimeStub]:
    with RuntimeStub() as stub:
        yield stub


@pytest.fixture
def frozen(clock: Clock) -> Clock:
    clock.freeze()
    return clock


def advisory_source(
    client: TestClient, core: Core, creds: TenantCreds, url_template: str
) -> tuple[str, Headers]:
    """Register an advisory API source with an http_json reader; return (id, its key's auth)."""
    r = client.post(
        "/v1/sources",
        json={
            "name": "agent-runtime",
            "kind": "api",
            "trust": "advisory",
            "reader": {"type": "http_json", "url_template": url_template},
        },
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 201, r.text
    source_id: str = r.json()["id"]
    with core.db.transaction() as tx:
        _, key = accounts.create_api_key(
            tx.conn, creds.tenant_id, "runtime", tx.now, source_id=source_id
        )
    return source_id, bearer(key)


def start_run(
    client: TestClient, auth: Headers, creds: TenantCreds, run_id: str = "r1", **fields: Any
) -> None:
    r = client.put(
        f"/v1/runs/{run_id}",
        json={"owner": creds.owner_email, "state": "working", "notify_on_complete": True} | fields,
        headers=auth,
    )
    assert r.status_code == 201, r.text


def claim(
    client: TestClient, auth: Headers, event_id: str, state: str, run_id: str = "r1"
) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/signals", json={"event_id": event_id, "state": state}, headers=auth
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def run_view(client: TestClient, creds: TenantCreds, run_id: str = "r1") -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def inbox(client: TestClient, creds: TenantCreds) -> list[dict[str, Any]]:
    r = client.get("/v1/notifications", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    notes: list[dict[str, Any]] = r.json()["notifications"]
    return notes


def attention_types(client: TestClient, creds: TenantCreds) -> list[str]:
    return [n["attention_type"] for n in inbox(client, creds)]


def mismatches(core: Core, run_id: str = "r1") -> list[dict[str, Any]]:
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(t.mismatches)
            .where(t.mismatches.c.run_id == run_id)
            .order_by(t.mismatches.c.created_at)
        ).all()
    return [dict(r._mapping) for r in rows]


def feed_types(client: TestClient, auth: Headers) -> list[tuple[str, dict[str, Any]]]:
    r = client.get("/v1/events", params={"after": "earliest", "limit": 500}, headers=auth)
    assert r.status_code == 200, r.text
    return [(e["type"], e["data"]) for e in r.json()["events"]]


def recheck_after(core: Core, clock: Clock, seconds: float) -> int:
    now: datetime = clock.advance(seconds)
    due: int = reconcile.recheck_mismatches(core, now)
    return due


# --- converging ----------------------------------------------------------------------


def test_advisory_claim_that_agrees_is_applied_at_once(
    client: TestClient, core: Core, creds: TenantCreds, runtime: RuntimeStub
) -> None:
    """When the state reader already agrees, the advisory claim applies with one alert."""
    _, auth = advisory_source(client, core, creds, runtime.url_template)
    start_run(client, auth, creds)
    runtime.say("r1", "completed")
    result = claim(client, auth, "e1", "completed")
    assert result["outcome"] == "applied"
    assert result["run"]["state"] == "completed"
    assert [n["attention_type"] for n in result["notifications"]] == ["completed"]
    assert runtime.requests == ["/runs/r1"]  # read over HTTP, from the runtime itself
    assert mismatches(core) == []
    assert claim(client, auth, "e1", "completed")["outcome"] == "duplicate"
    assert attention_types(client, creds) == ["completed"]


def test_early_completion_is_held_until_the_state_reader_agrees(
    client: TestClient,
    core: Core,
    frozen: Clock,
    creds: TenantCreds,
    runtime: RuntimeStub,
) -> None:
    """An early `completed` waits, unalerted, until a re-check sees the runtime agree."""
    _, auth = advisory_source(client, core, creds, runtime.url_template)
    start_run(client, auth, creds)
    runtime.say("r1", "working")

    first = claim(client, auth, "e1", "completed")
    assert first["outcome"] == "mismatch"
    assert first["notifications"] == []
    assert first["run"]["state"] == "working"
    assert "working" in first["reason"]
    second = claim(client, auth, "e2", "completed")  # the callback is sent again
    assert second["outcome"] == "mismatch"
    assert inbox(client, creds) == []
    (open_one,) = mismatches(core)
    assert open_one["status"] == "open"
    assert run_view(client, creds)["open_mismatches"] == 1

    # Not due yet: the first re-check waits for the backoff.
    assert reconcile.recheck_mismatches(core, frozen()) == 0
    assert run_view(client, creds)["state"] == "working"

    runtime.say("r1", "completed")
    assert recheck_after(core, frozen, core.settings.mismatch_backoff_s[0] + 1) == 1
    run = run_view(client, creds)
    assert run["state"] == "completed"
    assert run["open_mismatches"] == 0
    assert attention_types(client, creds) == ["completed"]
    (resolved,) = mismatches(core)
    assert resolved["status"] == "resolved"

    # Again later: nothing is due, nothing changes.
    assert recheck_after(core, frozen, AFTER_ANY_BACKOFF_S) == 0
    Scheduler(core).tick(frozen())
    assert run_view(client, creds)["version"] == run["version"]
    assert attention_types(client, creds) == ["completed"]

    events = feed_types(client, auth)
    assert [name for name, _ in events].count("run.mismatch") == 1
    closed = [data for name, data in events if name == "run.mismatch_closed"]
    assert [c["status"] for c in closed] == ["resolved"]


def test_mismatch_that_never_converges_escalates_once(
    client: TestClient,
    core: Core,
    frozen: Clock,
    creds: TenantCreds,
    runtime: RuntimeStub,
) -> None:
    """A claim that never converges escalates to exactly one `mismatch` alert."""
    _, auth = advisory_source(client, core, creds, runtime.url_template)
    # The re-checks take longer than the default stall threshold, and the run reports
    # nothing meanwhile: it would (rightly) stall too. This test is about the mismatch.
    start_run(client, auth, creds, stall_after_seconds=0)
    runtime.say("r1", "working")
    assert claim(client, auth, "e1", "completed")["outcome"] == "mismatch"

    max_checks = core.settings.mismatch_max_checks
    for check in range(1, max_checks):
        assert recheck_after(core, frozen, AFTER_ANY_BACKOFF_S) == 1
        (row,) = mismatches(core)
        assert (row["status"], row["checks"]) == ("open", check)
        assert inbox(client, creds) == []

    assert recheck_after(core, frozen, AFTER_ANY_BACKOFF_S) == 1
    (row,) = mismatches(core)
    assert row["status"] == "escalated"
    notes = inbox(client, creds)
    assert [n["attention_type"] for n in notes] == ["mismatch"]
    assert notes[0]["recipient"] == creds.owner_id
    assert run_view(client, creds)["state"] == "working"

    scheduler = Scheduler(core)
    for _ in range(3):
        scheduler.tick(frozen.advance(AFTER_ANY_BACKOFF_S))
    assert attention_types(client, creds) == ["mismatch"]
    assert mismatches(core)[0]["checks"] == max_checks

    # When the runtime finally agrees, the run completes and the mismatch alert is moot.
    runtime.say("r1", "completed")
    assert claim(client, auth, "e3", "completed")["outcome"] == "applied"
    by_type = {n["attention_type"]: n for n in inbox(client, creds)}
    assert set(by_type) == {"mismatch", "completed"}
    assert by_type["mismatch"]["state"] == "resolved"
    assert by_type["completed"]["state"] == "open"


def test_rechecks_follow_the_bounded_backoff_schedule(
    client: TestClient,
    core: Core,
    frozen: Clock,
    creds: TenantCreds,
    runtime: RuntimeStub,
) -> None:
    """Re-check k waits mismatch_backoff_s[k] (the last step repeats); none runs early."""
    _, auth = advisory_source(client, core, creds, runtime.url_template)
    start_run(client, auth, creds)
    runtime.say("r1", "working")
    assert claim(client, auth, "e1", "completed")["outcome"] == "mismatch"
    backoff = core.settings.mismatch_backoff_s
    for check in range(core.settings.mismatch_max_checks):
        wait = backoff[min(check, len(backoff) - 1)]
        assert recheck_after(core, frozen, wait - 1) == 0, f"check {check + 1} ran early"
        assert recheck_after(core, frozen, 1) == 1, f"check {check + 1} did not run"
        assert len(runtime.requests) == check + 2  # the signal's read, then one per check
    assert mismatches(core)[0]["status"] == "escalated"


def test_reader_reporting_another_state_is_followed(
    client: TestClient,
    core: Core,
    frozen: Clock,
    creds: TenantCreds,
    runtime: RuntimeStub,
) -> None:
    """Claim `completed`, runtime says `failed`: the run fails and no success alert exists."""
    _, auth = advisory_source(client, core, creds, runtime.url_template)
    start_run(client, auth, creds)
    runtime.say("r1", "failed")
    result = claim(client, auth, "e1", "completed")
    assert result["outcome"] == "mismatch"
    assert inbox(client, creds) == []

    assert recheck_after(core, frozen, core.settings.mismatch_backoff_s[0] + 1) == 1
    run = run_view(client, creds)
    assert run["state"] == "failed"
    assert run["open_mismatches"] == 0
    assert attention_types(client, creds) == ["failed"]
    (row,) = mismatches(core)
    assert row["status"] == "superseded"

    assert recheck_after(core, frozen, AFTER_ANY_BACKOFF_S) == 0
    assert claim(client, auth, "e2", "completed")["outcome"] == "stale"
    assert attention_types(client, creds) == ["failed"]


# --- an unavailable reader -------------------------------------------------------------


def test_reader_error_is_a_mismatch_without_notification(
    client: TestClient,
    core: Core,
    frozen: Clock,
    creds: TenantCreds,
    runtime: RuntimeStub,
) -> None:
    """A reader answering 500 cannot confirm anything: mismatch, no alert, re-checked later."""
    _, auth = advisory_source(client, core, creds, runtime.url_template)
    start_run(client, auth, creds)
    runtime.say("r1", "completed", status=500)
    result = claim(client, auth, "e1", "completed")
    assert result["outcome"] == "mismatch"
    assert "unavailable" in result["reason"]
    assert result["run"]["state"] == "working"
    assert inbox(client, creds) == []
    (row,) = mismatches(core)
    assert row["status"] == "open"
    assert "500" in row["last_error"]

    # Still failing at the first re-check: nothing applied, nothing sent.
    assert recheck_after(core, frozen, core.settings.mismatch_backoff_s[0] + 1) == 1
    assert run_view(client, creds)["state"] == "working"
    assert inbox(client, creds) == []

    # The runtime answers again and agrees: the claim is applied, once.
    runtime.say("r1", "completed")
    assert recheck_after(core, frozen, AFTER_ANY_BACKOFF_S) == 1
    assert run_view(client, creds)["state"] == "completed"
    assert attention_types(client, creds) == ["completed"]


def test_unreachable_reader_is_a_mismatch_without_notification(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A reader nobody listens on (runtime down) is a mismatch, never a success alert."""
    closed = f"http://127.0.0.1:{free_port()}/runs/{{run_id}}"
    _, auth = advisory_source(client, core, creds, closed)
    start_run(client, auth, creds)
    result = claim(client, auth, "e1", "completed")
    assert result["outcome"] == "mismatch"
    assert result["notifications"] == []
    assert run_view(client, creds)["state"] == "working"
    assert inbox(client, creds) == []
    assert [row["status"] for row in mismatches(core)] == ["open"]


# --- registration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url_template", "rule"),
    [
        ("http://10.0.0.1/runs/{run_id}", "https-only"),
        ("https://10.0.0.1/runs/{run_id}", "private"),
        ("https://169.254.169.254/latest/{run_id}", "link-local"),
        ("https://[::ffff:10.0.0.1]/runs/{run_id}", "ipv4-mapped"),
        ("https://100.64.0.1/runs/{run_id}", "cgnat"),
        ("https://0x0a000001/runs/{run_id}", "private"),
    ],
)
def test_private_reader_url_is_refused_at_registration(
    client: TestClient, creds: TenantCreds, url_template: str, rule: str
) -> None:
    """A state reader pointing into a private network is refused with 422 (SSRF), saying why."""
    r = client.post(
        "/v1/sources",
        json={
            "name": "sneaky",
            "kind": "api",
            "trust": "advisory",
            "reader": {"type": "http_json", "url_template": url_template},
        },
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert f"({rule})" in r.json()["detail"]
    listed = client.get("/v1/sources", headers=bearer(creds.admin_key)).json()["sources"]
    assert "sneaky" not in [s["name"] for s in listed]


@pytest.mark.parametrize(
    ("reader", "field"),
    [
        ({"url_template": "http://127.0.0.1:9/runs/"}, "url_template"),
        ({"state_map": {"done": "finished"}}, "state_map.done"),
        ({"state_field": ""}, "state_field"),
    ],
)
def test_unusable_reader_config_is_refused_at_registration(
    client: TestClient, creds: TenantCreds, reader: dict[str, Any], field: str
) -> None:
    """A reader config the reader refuses is a 422 at registration, naming the field."""
    config = {"type": "http_json", "url_template": "http://127.0.0.1:9/runs/{run_id}", **reader}
    r = client.post(
        "/v1/sources",
        json={"name": "broken", "kind": "api", "trust": "advisory", "reader": config},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == f"reader.{field}"


@pytest.mark.parametrize(
    "url_template",
    [
        "https://{run_id}.agents.example.com/status",
        "https://agents{run_id}.example.com/status",
        "https://agents.example.com:{run_id}/status",
        "https://{run_id}@agents.example.com/status",
        "https://user:{run_id}@agents.example.com/status",
        "http{run_id}://agents.example.com/status",
        "https://agents.example.com/status#{run_id}",
    ],
)
def test_run_id_outside_path_and_query_is_refused_at_registration(
    client: TestClient, creds: TenantCreds, url_template: str
) -> None:
    """A run id is the runtime's input: it may fill the path or the query, never choose
    the scheme, credentials, host or port of the server asked (nor hide in a fragment)."""
    r = client.post(
        "/v1/sources",
        json={
            "name": "hostile",
            "kind": "api",
            "trust": "advisory",
            "reader": {"type": "http_json", "url_template": url_template},
        },
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["field"] == "reader.url_template"
    assert body["errors"] == [{"field": "reader.url_template", "message": body["detail"]}]
    assert "only in the path or the query" in body["detail"]
    listed = client.get("/v1/sources", headers=bearer(creds.admin_key)).json()["sources"]
    assert "hostile" not in [s["name"] for s in listed]


@pytest.mark.parametrize(
    "url_template",
    ["http://127.0.0.1:9/runs/{run_id}", "http://127.0.0.1:9/status?run={run_id}&v=1"],
)
def test_run_id_in_path_or_query_is_accepted(
    client: TestClient, creds: TenantCreds, url_template: str
) -> None:
    r = client.post(
        "/v1/sources",
        json={
            "name": "fine",
            "kind": "api",
            "trust": "advisory",
            "reader": {"type": "http_json", "url_template": url_template},
        },
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 201, r.text
    assert r.json()["reader"]["url_template"] == url_template


def test_advisory_source_without_reader_is_refused(client: TestClient, creds: TenantCreds) -> None:
    """An advisory source must name a state reader, or nothing could ever confirm it."""
    r = client.post(
        "/v1/sources",
        json={"name": "blind", "kind": "api", "trust": "advisory"},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 422
    assert r.json()["field"] == "reader"
