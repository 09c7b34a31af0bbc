"""Scoped runtime keys (issue 18 item 1): every run write and read checks the key's
capability (403 naming it) and scope (404, as a run that does not exist), on SQLite and
PostgreSQL, through the HTTP API. Old unscoped keys keep every capability."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from runbell.domain.capabilities import CAPABILITIES
from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.testing import TenantCreds, make_tenant
from tests.conftest import LiveServer, bearer

IN_RUN, OUT_RUN = "launch-1", "other-1"
_ids = count()


@pytest.fixture
def creds(core: Core) -> TenantCreds:
    return make_tenant(core)


def key(core: Core, creds: TenantCreds, caps: list[str] | None, **scope: Any) -> str:
    _, secret = accounts.create_key(
        core, creds.tenant_id, "runtime", capabilities=caps, run_patterns=["launch-*"], **scope
    )
    return secret


def make_run(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    r = client.put(
        f"/v1/runs/{run_id}",
        json={"owner": creds.owner_email, "state": "working", "title": "Launch"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text
    r = client.post(
        f"/v1/runs/{run_id}/operations",
        json={
            "operation_id": "op1",
            "target": {"type": "task", "id": f"{run_id}-t1"},
            "intent": "move the date",
        },
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text


@dataclass(frozen=True)
class Write:
    name: str
    capability: str
    call: Callable[[TestClient, str, str], httpx.Response]


def _n() -> str:
    return str(next(_ids))


WRITES = [
    Write(
        "put_run",
        "runs.report",
        lambda c, run, k: c.put(f"/v1/runs/{run}", json={"title": "New"}, headers=bearer(k)),
    ),
    Write(
        "signal",
        "runs.report",
        lambda c, run, k: c.post(
            f"/v1/runs/{run}/signals",
            json={"event_id": f"e{_n()}", "state": "working", "reason": "busy"},
            headers=bearer(k),
        ),
    ),
    Write(
        "progress",
        "runs.report",
        lambda c, run, k: c.post(
            f"/v1/runs/{run}/progress", json={"message": "half"}, headers=bearer(k)
        ),
    ),
    Write(
        "declare",
        "operations.declare",
        lambda c, run, k: c.post(
            f"/v1/runs/{run}/operations",
            json={
                "operation_id": f"op-{_n()}",
                "target": {"type": "task", "id": f"t-{_n()}"},
                "intent": "publish",
            },
            headers=bearer(k),
        ),
    ),
    Write(
        "move",
        "operations.settle",
        lambda c, run, k: c.patch(
            f"/v1/runs/{run}/operations/op1", json={"state": "sent"}, headers=bearer(k)
        ),
    ),
    Write(
        "claim",
        "operations.settle",
        lambda c, run, k: c.post(
            f"/v1/runs/{run}/claim", json={"worker_id": "worker-b"}, headers=bearer(k)
        ),
    ),
    Write(
        "cancel",
        "runs.cancel",
        lambda c, run, k: c.post(f"/v1/runs/{run}/cancel", json={}, headers=bearer(k)),
    ),
    Write(
        "input_request",
        "input_requests.create",
        lambda c, run, k: c.post(
            f"/v1/runs/{run}/input-requests",
            json={"input_request_id": f"ir-{_n()}", "kind": "approval", "summary": "Publish?"},
            headers=bearer(k),
        ),
    ),
    Write("get_run", "runs.read", lambda c, run, k: c.get(f"/v1/runs/{run}", headers=bearer(k))),
    Write(
        "ledger",
        "runs.read",
        lambda c, run, k: c.get(f"/v1/runs/{run}/operations", headers=bearer(k)),
    ),
]


@pytest.mark.parametrize("write", WRITES, ids=lambda w: w.name)
def test_capability_matrix(
    core: Core, client: TestClient, creds: TenantCreds, write: Write
) -> None:
    for run_id in (IN_RUN, OUT_RUN, "launch-2", "launch-3"):
        make_run(client, creds, run_id)
    lacking = key(core, creds, [c for c in CAPABILITIES if c != write.capability])
    only = key(core, creds, [write.capability])

    # Every capability but this one, run in scope: 403 naming the missing capability.
    r = write.call(client, IN_RUN, lacking)
    assert r.status_code == 403, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["missing_capability"] == write.capability
    assert write.capability in r.json()["detail"]
    # ... and out of scope too (a missing capability tells nothing about the run).
    r = write.call(client, OUT_RUN, lacking)
    assert r.status_code == 403, r.text
    assert r.json()["missing_capability"] == write.capability

    # Only this capability, run out of scope: 404, as for a run that does not exist.
    r = write.call(client, OUT_RUN, only)
    assert r.status_code == 404, r.text
    assert r.json()["detail"].startswith(f"no run {OUT_RUN!r}")
    if write.name != "put_run":  # PUT creates a missing run (in scope): no 404 to compare
        missing = write.call(client, "launch-missing", only)
        assert missing.status_code == 404
        assert r.json() == {
            **missing.json(),
            "detail": missing.json()["detail"].replace("launch-missing", OUT_RUN),
        }

    # Only this capability, run in scope: it works.
    r = write.call(client, IN_RUN, only)
    assert r.status_code in (200, 201, 202), r.text

    # The old unscoped key still does it all, anywhere in the tenant.
    r = write.call(client, "launch-2", creds.runtime_key)
    assert r.status_code in (200, 201, 202), r.text
    r = write.call(client, OUT_RUN, creds.runtime_key)
    assert r.status_code in (200, 201, 202), r.text


def test_listings_and_feed_keep_to_the_scope(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    for run_id in (IN_RUN, OUT_RUN):
        make_run(client, creds, run_id)
    reader = key(core, creds, ["runs.read"])
    listed = client.get("/v1/runs", headers=bearer(reader)).json()
    assert [r["run_id"] for r in listed["runs"]] == [IN_RUN]
    grouped = client.get("/v1/runs?group=working", headers=bearer(reader)).json()
    assert IN_RUN in str(grouped) and OUT_RUN not in str(grouped)
    events = client.get("/v1/events?after=earliest", headers=bearer(reader)).json()["events"]
    assert {e["run_id"] for e in events} == {IN_RUN}
    snapshot = client.get("/v1/events/snapshot", headers=bearer(reader)).json()
    assert OUT_RUN not in str(snapshot) and IN_RUN in str(snapshot)
    # The unscoped key sees both.
    everything = client.get("/v1/runs", headers=bearer(creds.runtime_key)).json()
    assert {r["run_id"] for r in everything["runs"]} == {IN_RUN, OUT_RUN}
    # Without runs.read: no listing at all.
    blind = key(core, creds, ["runs.report"])
    r = client.get("/v1/runs", headers=bearer(blind))
    assert r.status_code == 403 and r.json()["missing_capability"] == "runs.read"
    r = client.get("/v1/events", headers=bearer(blind))
    assert r.status_code == 403 and r.json()["missing_capability"] == "runs.read"


def test_glob_is_case_sensitive_and_whole(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    for run_id in ("launch-1", "Launch-2", "prelaunch-3", "launch-x:9"):
        make_run(client, creds, run_id)
    reader = key(core, creds, ["runs.read"])
    listed = client.get("/v1/runs", headers=bearer(reader)).json()
    assert sorted(r["run_id"] for r in listed["runs"]) == ["launch-1", "launch-x:9"]
    _, one = accounts.create_key(
        core, creds.tenant_id, "runtime", capabilities=["runs.read"], run_patterns=["launch-?"]
    )
    listed = client.get("/v1/runs", headers=bearer(one)).json()
    assert [r["run_id"] for r in listed["runs"]] == ["launch-1"]
    assert client.get("/v1/runs/Launch-2", headers=bearer(one)).status_code == 404


def test_own_runs_only(core: Core, client: TestClient, creds: TenantCreds) -> None:
    make_run(client, creds, "theirs-1")
    _, mine = accounts.create_key(
        core, creds.tenant_id, "runtime", capabilities=["runs.report", "runs.read"], own_runs=True
    )
    r = client.put("/v1/runs/mine-1", json={"owner": creds.owner_email}, headers=bearer(mine))
    assert r.status_code == 201, r.text
    assert client.get("/v1/runs/mine-1", headers=bearer(mine)).status_code == 200
    r = client.get("/v1/runs/theirs-1", headers=bearer(mine))
    assert r.status_code == 404
    r = client.put("/v1/runs/theirs-1", json={"title": "x"}, headers=bearer(mine))
    assert r.status_code == 404
    listed = client.get("/v1/runs", headers=bearer(mine)).json()
    assert [r["run_id"] for r in listed["runs"]] == ["mine-1"]


def test_people_and_admin_keys_are_unaffected(
    core: Core, client: TestClient, creds: TenantCreds
) -> None:
    make_run(client, creds, OUT_RUN)
    assert client.get(f"/v1/runs/{OUT_RUN}", headers=bearer(creds.owner_token)).status_code == 200
    assert client.get(f"/v1/runs/{OUT_RUN}", headers=bearer(creds.admin_key)).status_code == 200
    r = client.post(f"/v1/runs/{OUT_RUN}/cancel", json={}, headers=bearer(creds.owner_token))
    assert r.status_code == 202, r.text


def test_keys_api_creates_scoped_keys(core: Core, client: TestClient, creds: TenantCreds) -> None:
    r = client.post(
        "/v1/keys",
        json={"name": "copywriter", "capabilities": ["runs.report"], "run_patterns": ["launch-*"]},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["key"].startswith("rbk_") and made["capabilities"] == ["runs.report"]
    assert made["run_patterns"] == ["launch-*"] and made["own_runs"] is False
    r = client.put(
        "/v1/runs/launch-9", json={"owner": creds.owner_email}, headers=bearer(made["key"])
    )
    assert r.status_code == 201, r.text
    r = client.put(
        "/v1/runs/other-9", json={"owner": creds.owner_email}, headers=bearer(made["key"])
    )
    assert r.status_code == 404, r.text
    # A runtime key cannot make keys; an admin key is never scoped; a bad pattern is 422.
    r = client.post("/v1/keys", json={}, headers=bearer(creds.runtime_key))
    assert r.status_code == 403
    r = client.post(
        "/v1/keys",
        json={"role": "admin", "capabilities": ["runs.read"]},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "role"
    r = client.post(
        "/v1/keys", json={"run_patterns": ["launch-[1]"]}, headers=bearer(creds.admin_key)
    )
    assert r.status_code == 422 and "run_patterns" in r.text
    # Revoked: the next request is 401.
    r = client.delete(f"/v1/keys/{made['id']}", headers=bearer(creds.admin_key))
    assert r.status_code == 204
    assert client.get("/v1/runs/launch-9", headers=bearer(made["key"])).status_code == 401
    r = client.delete(f"/v1/keys/{made['id']}x", headers=bearer(creds.admin_key))
    assert r.status_code == 404


def test_a_scoped_stream_sees_only_its_runs(core: Core, creds: TenantCreds) -> None:
    reader = key(core, creds, ["runs.read"])
    with LiveServer(core) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for run_id in (OUT_RUN, IN_RUN):
            r = http.put(
                f"/v1/runs/{run_id}",
                json={"owner": creds.owner_email, "state": "working"},
                headers=bearer(creds.runtime_key),
            )
            assert r.status_code == 201
        seen: list[str] = []
        with http.stream(
            "GET", "/v1/events/stream?after=earliest", headers=bearer(reader)
        ) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:") and '"run_id"' in line:
                    seen.append(line)
                    if IN_RUN in line:
                        break
        assert seen and all(OUT_RUN not in line for line in seen)
