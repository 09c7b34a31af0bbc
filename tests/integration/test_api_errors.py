"""The HTTP error contract (DESIGN §6): problem+json, 422/413/401/403/404, tenant isolation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from runbell.flows import accounts as account_flows
from runbell.flows import members
from runbell.flows.context import Core
from runbell.store import accounts
from runbell.store.migrate import current_revision
from runbell.testing import TenantCreds, add_user, make_tenant
from tests.conftest import LiveServer, bearer
from tests.timeouts import WAIT

PROBLEM = "application/problem+json"
LIMIT = 256 * 1024


def assert_problem(r: httpx.Response, status: int, *, field: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem document with ``status`` (and ``field``)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].split(";")[0].strip() == PROBLEM, r.headers
    body = r.json()
    for key in ("type", "title", "status", "detail"):
        assert key in body, f"problem lacks {key!r}: {body}"
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    if field is not None:
        assert body.get("field") == field, body
    return dict(body)


def make_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> dict[str, Any]:
    body = {"owner": creds.owner_email, "state": "working", **fields}
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    return dict(r.json())


def signal(
    client: TestClient, creds: TenantCreds, run_id: str, event_id: str, state: str
) -> dict[str, Any]:
    r = client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": event_id, "state": state},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def run_exists(core: Core, tenant_id: str, run_id: str) -> bool:
    from runbell.store import runs

    with core.db.read() as conn:
        return runs.get_run(conn, tenant_id, run_id) is not None


# --- every error is problem+json ------------------------------------------------------


def test_framework_errors_are_problem_json(client: TestClient, creds: TenantCreds) -> None:
    """Unknown paths (404) and wrong methods (405) also answer problem+json."""
    assert_problem(client.get("/v1/no-such-thing", headers=bearer(creds.admin_key)), 404)
    assert_problem(client.delete("/v1/runs/r1", headers=bearer(creds.runtime_key)), 405)


# --- 422 naming the field --------------------------------------------------------------


def test_malformed_json_is_422_problem(client: TestClient, creds: TenantCreds) -> None:
    """A body that is not JSON is a 422 problem, and nothing is created."""
    r = client.put(
        "/v1/runs/r1",
        content=b'{"owner": "x", "title": ',
        headers={**bearer(creds.runtime_key), "Content-Type": "application/json"},
    )
    assert_problem(r, 422)
    assert client.get("/v1/runs/r1", headers=bearer(creds.runtime_key)).status_code == 404


def test_malformed_json_problem_names_the_body(client: TestClient, creds: TenantCreds) -> None:
    """The 422 for a body that is not JSON names ``body`` as the field, not a byte offset."""
    r = client.put(
        "/v1/runs/r1",
        content=b'{"owner": "x", "title": ',
        headers={**bearer(creds.runtime_key), "Content-Type": "application/json"},
    )
    assert_problem(r, 422, field="body")


def test_creating_a_run_without_owner_is_422(client: TestClient, creds: TenantCreds) -> None:
    """A new run needs an owner: 422 naming ``owner``, nothing created."""
    r = client.put("/v1/runs/r1", json={"title": "t"}, headers=bearer(creds.runtime_key))
    assert_problem(r, 422, field="owner")
    assert client.get("/v1/runs/r1", headers=bearer(creds.runtime_key)).status_code == 404


def test_owner_who_is_not_a_member_is_422(client: TestClient, creds: TenantCreds) -> None:
    """An owner who is not a member is a fixable input error: 422 naming ``owner``."""
    r = client.put(
        "/v1/runs/r1", json={"owner": "stranger@x.test"}, headers=bearer(creds.runtime_key)
    )
    assert_problem(r, 422, field="owner")


def test_authority_naming_a_non_member_is_422(client: TestClient, creds: TenantCreds) -> None:
    """An authority user who is not a member is a 422 naming ``authority.users``."""
    r = client.put(
        "/v1/runs/r1",
        json={"owner": creds.owner_email, "authority": {"users": ["stranger@x.test"]}},
        headers=bearer(creds.runtime_key),
    )
    assert_problem(r, 422, field="authority.users")
    assert client.get("/v1/runs/r1", headers=bearer(creds.runtime_key)).status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("PUT", "/v1/runs/r1", {"owner": "o@acme.test", "sequence": "x"}, "sequence"),
        ("PUT", "/v1/runs/r1", {"owner": "o@acme.test", "foo": 1}, "foo"),
        ("PUT", "/v1/runs/r1", {"owner": "o@acme.test", "state": "bogus"}, "state"),
        ("POST", "/v1/runs/r1/signals", {"event_id": "e1", "state": "bogus"}, "state"),
        (
            "POST",
            "/v1/runs/r1/signals",
            {"event_id": "e1", "state": "working", "sequence": "x"},
            "sequence",
        ),
        ("POST", "/v1/runs/r1/signals", {"event_id": "e1", "state": "working", "foo": 1}, "foo"),
    ],
    ids=[
        "put-sequence",
        "put-unknown",
        "put-state",
        "signal-state",
        "signal-sequence",
        "signal-unknown",
    ],
)
def test_wrong_types_are_422_naming_the_field(
    client: TestClient,
    creds: TenantCreds,
    method: str,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    """A wrong type, bad enum value or unknown field is a 422 whose ``field`` names it."""
    make_run(client, creds, "r1")
    r = client.request(method, path, json=body, headers=bearer(creds.runtime_key))
    problem = assert_problem(r, 422, field=field)
    assert field in problem["detail"]
    run = client.get("/v1/runs/r1", headers=bearer(creds.runtime_key)).json()
    assert (run["state"], run["version"]) == ("working", 1)


@pytest.mark.parametrize(
    "bad_id", ["has space", "x" * 201, "-leading-dash", "semi;colon"], ids=lambda s: s[:12]
)
def test_invalid_run_id_in_path_is_422(client: TestClient, creds: TenantCreds, bad_id: str) -> None:
    """A run id outside the allowed pattern is a 422 naming ``run_id``, on PUT and GET."""
    r = client.put(
        f"/v1/runs/{bad_id}", json={"owner": creds.owner_email}, headers=bearer(creds.runtime_key)
    )
    assert_problem(r, 422, field="run_id")
    r = client.get(f"/v1/runs/{bad_id}", headers=bearer(creds.runtime_key))
    assert_problem(r, 422, field="run_id")
    listed = client.get("/v1/runs", headers=bearer(creds.runtime_key)).json()
    assert listed["runs"] == []


# --- 413 over the body limit -----------------------------------------------------------


def big_run_body(owner: str) -> bytes:
    body = json.dumps({"owner": owner, "metadata": {"blob": "a" * (LIMIT + 1024)}}).encode()
    assert len(body) > LIMIT
    return body


def test_body_over_limit_with_content_length_is_413(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A body over 256 KiB with an honest Content-Length is a 413 problem; nothing commits."""
    body = big_run_body(creds.owner_email)
    r = client.put(
        "/v1/runs/big-1",
        content=body,
        headers={**bearer(creds.runtime_key), "Content-Type": "application/json"},
    )
    assert_problem(r, 413)
    assert not run_exists(core, creds.tenant_id, "big-1")
    # Just under the limit is accepted: the cap is the limit, not something smaller.
    ok = json.dumps({"owner": creds.owner_email, "metadata": {"blob": "a" * (LIMIT - 1024)}})
    r = client.put(
        "/v1/runs/big-2",
        content=ok.encode(),
        headers={**bearer(creds.runtime_key), "Content-Type": "application/json"},
    )
    assert r.status_code == 201, r.text[:300]


def test_chunked_body_over_limit_is_413(live: LiveServer, core: Core, creds: TenantCreds) -> None:
    """A chunked body (no Content-Length) over 256 KiB is a 413 problem; nothing commits."""
    body = big_run_body(creds.owner_email)

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), 16 * 1024):
            yield body[i : i + 16 * 1024]

    with httpx.Client(base_url=live.url, timeout=WAIT) as http:
        r = http.put(
            "/v1/runs/big-chunked",
            content=chunks(),
            headers={**bearer(creds.runtime_key), "Content-Type": "application/json"},
        )
        assert r.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.request.headers
        assert not run_exists(core, creds.tenant_id, "big-chunked")
        assert_problem(r, 413)


# --- 401 / 403 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer rbk_not-a-real-key"},
        {"Authorization": "Bearer rbu_not-a-real-token"},
        {"Authorization": "Bearer something-else"},
    ],
    ids=["missing", "empty-bearer", "basic", "bad-key", "bad-user-token", "garbage"],
)
def test_missing_or_bad_credentials_are_401(
    client: TestClient, creds: TenantCreds, headers: dict[str, str]
) -> None:
    """No, malformed or unknown credentials answer 401 problem+json on every kind of route."""
    assert_problem(client.get("/v1/notifications", headers=headers), 401)
    assert_problem(client.get("/v1/runs/r1", headers=headers), 401)
    r = client.put("/v1/runs/r1", json={"owner": creds.owner_email}, headers=headers)
    assert_problem(r, 401)
    assert client.get("/v1/runs/r1", headers=bearer(creds.runtime_key)).status_code == 404


def test_revoked_api_key_is_401(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """A revoked API key stops working at once (revoked through this process; another
    process sees it within RUNBELL_AUTH_CACHE_S: tests/integration/test_credential_memo.py)."""
    with core.db.transaction() as tx:
        key_id, key = accounts.create_api_key(tx.conn, creds.tenant_id, "runtime", tx.now)
    assert client.get("/v1/runs", headers=bearer(key)).status_code == 200
    account_flows.revoke_key(core, creds.tenant_id, key_id)
    assert_problem(client.get("/v1/runs", headers=bearer(key)), 401)
    r = client.put("/v1/runs/r9", json={"owner": creds.owner_email}, headers=bearer(key))
    assert_problem(r, 401)
    assert not run_exists(core, creds.tenant_id, "r9")
    # The other keys of the tenant are unaffected.
    assert client.get("/v1/runs", headers=bearer(creds.runtime_key)).status_code == 200


def test_revoked_member_token_is_401(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """Revoking a membership makes that person's tokens answer 401."""
    user_id, token = add_user(core, creds.tenant_id, "leaver@acme.test")
    assert client.get("/v1/notifications", headers=bearer(token)).status_code == 200
    members.revoke_member(core, creds.tenant_id, user_id)
    assert_problem(client.get("/v1/notifications", headers=bearer(token)), 401)
    assert client.get("/v1/notifications", headers=bearer(creds.owner_token)).status_code == 200


def test_user_token_cannot_put_runs(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """A person's token on the runtime endpoint PUT /v1/runs is a 403; nothing is created."""
    r = client.put(
        "/v1/runs/r1", json={"owner": creds.owner_email}, headers=bearer(creds.owner_token)
    )
    assert_problem(r, 403)
    assert not run_exists(core, creds.tenant_id, "r1")


def test_runtime_key_cannot_read_the_inbox(client: TestClient, creds: TenantCreds) -> None:
    """The inbox belongs to people: a runtime key on GET /v1/notifications is a 403."""
    assert_problem(client.get("/v1/notifications", headers=bearer(creds.runtime_key)), 403)


def test_trail_needs_an_admin(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """A plain member cannot read a trail (403); an admin key and an admin member can."""
    make_run(client, creds, "r1", notify_on_complete=True)
    note_id = signal(client, creds, "r1", "e1", "completed")["notifications"][0]["id"]
    _, member = add_user(core, creds.tenant_id, "plain@acme.test", role="member")
    _, admin_member = add_user(core, creds.tenant_id, "boss@acme.test", role="admin")
    assert_problem(client.get(f"/v1/notifications/{note_id}/trail", headers=bearer(member)), 403)
    assert_problem(
        client.get(f"/v1/notifications/{note_id}/trail", headers=bearer(creds.runtime_key)), 403
    )
    for who in (creds.admin_key, admin_member):
        r = client.get(f"/v1/notifications/{note_id}/trail", headers=bearer(who))
        assert r.status_code == 200, r.text
        assert r.json()["id"] == note_id


# --- tenant isolation ------------------------------------------------------------------


@dataclass(frozen=True)
class Foreign:
    """Tenant B and the things it owns."""

    creds: TenantCreds
    run_id: str
    note_id: str
    source_id: str


@pytest.fixture
def foreign(client: TestClient, core: Core) -> Foreign:
    other = make_tenant(core, "other")
    make_run(client, other, "b-run", notify_on_complete=True, details={"k": "b-secret"})
    res = signal(client, other, "b-run", "b-e1", "completed")
    assert res["outcome"] == "applied"
    note_id = res["notifications"][0]["id"]
    r = client.post(
        "/v1/sources",
        json={"name": "hook", "kind": "webhook", "mapper": "generic", "trust": "authoritative"},
        headers=bearer(other.admin_key),
    )
    assert r.status_code == 201, r.text
    return Foreign(other, "b-run", note_id, r.json()["id"])


def foreign_state(client: TestClient, b: Foreign) -> dict[str, Any]:
    """Everything of B's that A's calls might change, read with B's credentials."""
    run = client.get(f"/v1/runs/{b.run_id}", headers=bearer(b.creds.runtime_key)).json()
    note = client.get(f"/v1/notifications/{b.note_id}", headers=bearer(b.creds.owner_token)).json()
    sources = client.get("/v1/sources", headers=bearer(b.creds.admin_key)).json()["sources"]
    src = next(s for s in sources if s["id"] == b.source_id)
    return {
        "run": {k: run[k] for k in ("state", "version", "title", "owner", "progress", "details")},
        "note": (note["state"], note["closed_at"], note["first_seen_at"]),
        "secrets": src["secrets"],
    }


GHOST_RUN = "never-existed-1"
GHOST_NOTE = "ntf_00000000000000000000000000"
GHOST_SOURCE = "src_00000000000000000000000000"

# (method, path template, which of A's credentials, JSON body)
ISOLATION_CASES = [
    ("GET", "/v1/runs/{run}", "runtime_key", None),
    ("GET", "/v1/runs/{run}", "admin_key", None),
    ("GET", "/v1/runs/{run}", "owner_token", None),
    ("POST", "/v1/runs/{run}/signals", "runtime_key", {"event_id": "a-e1", "state": "failed"}),
    ("POST", "/v1/runs/{run}/progress", "runtime_key", {"message": "hi"}),
    ("GET", "/v1/notifications/{note}", "owner_token", None),
    ("POST", "/v1/notifications/{note}/ack", "owner_token", None),
    ("GET", "/v1/notifications/{note}/trail", "admin_key", None),
    ("POST", "/v1/sources/{source}/rotate-secret", "admin_key", None),
]


@pytest.mark.parametrize(
    ("method", "template", "cred", "body"),
    ISOLATION_CASES,
    ids=[f"{m} {p} ({c})" for m, p, c, _ in ISOLATION_CASES],
)
def test_another_tenants_ids_answer_404_like_unknown_ids(
    client: TestClient,
    creds: TenantCreds,
    foreign: Foreign,
    method: str,
    template: str,
    cred: str,
    body: dict[str, Any] | None,
) -> None:
    """Tenant A using B's id gets the same 404 as for an id that never existed; B is untouched."""
    headers = bearer(getattr(creds, cred))
    before = foreign_state(client, foreign)
    path = template.format(run=foreign.run_id, note=foreign.note_id, source=foreign.source_id)
    ghost = template.format(run=GHOST_RUN, note=GHOST_NOTE, source=GHOST_SOURCE)

    real = assert_problem(client.request(method, path, json=body, headers=headers), 404)
    fake = assert_problem(client.request(method, ghost, json=body, headers=headers), 404)

    assert (real["type"], real["title"], real["status"]) == (
        fake["type"],
        fake["title"],
        fake["status"],
    )
    assert set(real) == set(fake), "extra members would tell the two apart"
    foreign_id = next(i for i in (foreign.run_id, foreign.note_id, foreign.source_id) if i in path)
    ghost_id = next(i for i in (GHOST_RUN, GHOST_NOTE, GHOST_SOURCE) if i in ghost)
    assert foreign_id in real["detail"], "the 404 should echo the id asked for"
    assert real["detail"].replace(foreign_id, ghost_id) == fake["detail"]
    assert foreign_state(client, foreign) == before


def test_put_on_another_tenants_run_id_leaves_it_untouched(
    client: TestClient, core: Core, creds: TenantCreds, foreign: Foreign
) -> None:
    """PUT with B's run id from tenant A never modifies B's run; run ids are per tenant."""
    before = foreign_state(client, foreign)
    r = client.put(
        f"/v1/runs/{foreign.run_id}",
        json={"owner": creds.owner_email, "title": "A's own", "details": {"k": "a"}},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text  # a new run in A: nothing of B's leaks or changes
    mine = r.json()
    assert mine["owner"] == creds.owner_id
    assert (mine["title"], mine["version"], mine["state"]) == ("A's own", 1, "queued")
    assert foreign_state(client, foreign) == before
    theirs = client.get(f"/v1/runs/{foreign.run_id}", headers=bearer(foreign.creds.runtime_key))
    assert theirs.json()["state"] == "completed"
    assert theirs.json()["details"] == {"k": "b-secret"}


def test_event_feed_never_shows_another_tenants_events(
    client: TestClient, creds: TenantCreds, foreign: Foreign
) -> None:
    """GET /v1/events with any of A's credentials never carries anything of tenant B."""
    make_run(client, creds, "a-run", notify_on_complete=True)
    signal(client, creds, "a-run", "a-e1", "completed")
    for token in (creds.runtime_key, creds.admin_key, creds.owner_token):
        r = client.get("/v1/events?after=earliest&limit=500", headers=bearer(token))
        assert r.status_code == 200, r.text
        events = r.json()["events"]
        assert events, "A's own events are visible"
        text = json.dumps(events)
        for foreign_id in (foreign.run_id, foreign.note_id, foreign.source_id):
            assert foreign_id not in text
        assert {e["run_id"] for e in events} <= {"a-run", None}
    # B still sees its own: the feed is per tenant, not empty.
    theirs = client.get("/v1/events?after=earliest", headers=bearer(foreign.creds.admin_key))
    assert foreign.run_id in {e["run_id"] for e in theirs.json()["events"]}


def test_lists_and_snapshot_never_show_another_tenants_things(
    client: TestClient, creds: TenantCreds, foreign: Foreign
) -> None:
    """Run lists, the inbox, sources and the feed snapshot of A never include B's items."""
    make_run(client, creds, "a-run")
    for token in (creds.runtime_key, creds.admin_key, creds.owner_token):
        runs = client.get("/v1/runs", headers=bearer(token)).json()["runs"]
        assert [r["run_id"] for r in runs] == ["a-run"]
        snap = client.get("/v1/events/snapshot", headers=bearer(token))
        assert snap.status_code == 200, snap.text
        assert foreign.run_id not in snap.text and foreign.note_id not in snap.text
    assert inbox_ids(client, creds.owner_token) == []
    sources = client.get("/v1/sources", headers=bearer(creds.admin_key)).json()["sources"]
    assert foreign.source_id not in {s["id"] for s in sources}


def inbox_ids(client: TestClient, token: str) -> list[str]:
    r = client.get("/v1/notifications", headers=bearer(token))
    assert r.status_code == 200, r.text
    return [n["id"] for n in r.json()["notifications"]]


# --- run visibility inside a tenant ----------------------------------------------------


def test_member_without_access_gets_404_admin_member_sees(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A member who is neither owner nor authority cannot see a run (404); admins can."""
    _, outsider = add_user(core, creds.tenant_id, "outsider@acme.test", role="member")
    _, helper = add_user(core, creds.tenant_id, "helper@acme.test", role="member")
    _, admin = add_user(core, creds.tenant_id, "admin@acme.test", role="admin")
    make_run(
        client,
        creds,
        "private-1",
        authority={"users": ["helper@acme.test"]},
        details={"k": "hidden"},
    )
    hidden = assert_problem(client.get("/v1/runs/private-1", headers=bearer(outsider)), 404)
    ghost = assert_problem(client.get("/v1/runs/private-2", headers=bearer(outsider)), 404)
    assert hidden["title"] == ghost["title"]
    assert hidden["detail"].replace("private-1", "private-2") == ghost["detail"]
    listed = client.get("/v1/runs", headers=bearer(outsider)).json()
    assert [r["run_id"] for r in listed["runs"]] == []
    for token in (admin, helper, creds.owner_token):
        r = client.get("/v1/runs/private-1", headers=bearer(token))
        assert r.status_code == 200, r.text
        assert r.json()["run_id"] == "private-1"


# --- operations ------------------------------------------------------------------------


def test_healthz_is_ok(client: TestClient) -> None:
    """Liveness answers 200 without credentials."""
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


def test_readyz_reports_the_schema_revision(client: TestClient, core: Core) -> None:
    """Readiness answers 200 with the database's migrated schema revision."""
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    body = r.json()
    revision = current_revision(core.db.engine)
    assert revision
    assert body["schema"] == revision
    assert body["database"] == core.db.dialect


def test_openapi_lists_every_v1_path(client: TestClient) -> None:
    """/openapi.json documents every /v1 route the app serves, with its methods."""
    r = client.get("/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    expected = {
        "/v1/runs": {"get"},
        "/v1/runs/{run_id}": {"put", "get"},
        "/v1/runs/{run_id}/signals": {"post"},
        "/v1/runs/{run_id}/progress": {"post"},
        "/v1/notifications": {"get"},
        "/v1/notifications/{notification_id}": {"get"},
        "/v1/notifications/{notification_id}/ack": {"post"},
        "/v1/notifications/{notification_id}/trail": {"get"},
        "/v1/events": {"get"},
        "/v1/events/stream": {"get"},
        "/v1/sources": {"get", "post"},
        "/v1/sources/{source_id}/rotate-secret": {"post"},
        "/v1/sources/{source_id}/webhook": {"post"},
    }
    for path, methods in expected.items():
        assert path in paths, f"{path} missing from /openapi.json"
        assert methods <= set(paths[path]), (path, set(paths[path]))
    served: dict[str, set[str]] = {}
    for route in client.app.routes:  # type: ignore[attr-defined]
        path = getattr(route, "path", "")
        if path.startswith("/v1/"):
            served.setdefault(path, set()).update(m.lower() for m in route.methods or ())
    for path, methods in served.items():
        assert path in paths, f"served route {path} is not in /openapi.json"
        assert methods - {"head"} <= set(paths[path])


def test_lone_surrogates_are_refused_before_anything_is_written(
    client: TestClient, creds: TenantCreds
) -> None:
    """A lone UTF-16 surrogate would be stored and then break every read of the run:
    it is a 422 naming the field (issue 16: the nested field, not just "body"), nothing is
    committed; a real emoji pair is fine."""
    rt = {**bearer(creds.runtime_key), "Content-Type": "application/json"}
    body = b'{"owner": "%s", "metadata": {"a": "\\ud800"}}' % creds.owner_email.encode()
    r = client.put("/v1/runs/sur-1", content=body, headers=rt)
    assert_problem(r, 422, field="metadata.a")
    assert client.get("/v1/runs/sur-1", headers=bearer(creds.runtime_key)).status_code == 404
    assert client.get("/v1/runs", headers=bearer(creds.runtime_key)).status_code == 200
    ok = b'{"owner": "%s", "metadata": {"a": "\\ud83d\\ude00"}}' % creds.owner_email.encode()
    r = client.put("/v1/runs/sur-2", content=ok, headers=rt)
    assert r.status_code == 201, r.text
    assert r.json()["metadata"] == {"a": "\U0001f600"}


def test_absurdly_nested_json_is_a_422_not_a_vague_400(
    client: TestClient, creds: TenantCreds
) -> None:
    """A body nested thousands of levels deep is reported as malformed JSON."""
    r = client.put(
        "/v1/runs/deep",
        content=b"[" * 100_000,
        headers={**bearer(creds.runtime_key), "Content-Type": "application/json"},
    )
    assert_problem(r, 422, field="body")
