"""The OpenAPI document is as strict as the server (issue 16 rows 8 and 9).

- An unknown query parameter is a 422 naming it, on every route (a filter the server
  does not have must not look like one it applied), and every operation declares that 422.
- Integers: a JSON number with a zero fraction (``7.0``) is an integer, as JSON Schema
  says; ``"7"``, ``true`` and ``7.5`` are not. Numbers refuse ``"7"`` and ``true``.
- Query values with a closed set (``state``, ``group``) are enums in the document, and
  integer bounds are exact (the sequence maximum is 2**63 - 1, not a float).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from runbell.domain.runs import MAX_SEQUENCE
from runbell.testing import TenantCreds
from tests.conftest import bearer


@pytest.mark.parametrize(
    ("path", "unknown", "credential"),
    [
        ("/v1/deliveries?notification_id=ntf_nonexistent", ["notification_id"], "admin_key"),
        ("/v1/runs?stat=working&limit=5&colour=red", ["colour", "stat"], "runtime_key"),
        ("/v1/notifications?runid=r1", ["runid"], "owner_token"),
        ("/v1/events?after=earliest&since=0", ["since"], "runtime_key"),
        ("/v1/me?x=1", ["x"], "owner_token"),
        ("/healthz?verbose=1", ["verbose"], "admin_key"),
    ],
)
def test_unknown_query_parameter_is_a_422_naming_it(
    client: TestClient, creds: TenantCreds, path: str, unknown: list[str], credential: str
) -> None:
    r = client.get(path, headers=bearer(getattr(creds, credential)))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["field"] == unknown[0]
    assert [e["field"] for e in problem["errors"]] == unknown
    assert all(name in problem["detail"] for name in unknown)


def test_unknown_query_parameter_on_a_write_changes_nothing(
    client: TestClient, creds: TenantCreds
) -> None:
    rt = bearer(creds.runtime_key)
    r = client.put("/v1/runs/q-1?ownr=x", json={"owner": creds.owner_email}, headers=rt)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "ownr"
    assert client.get("/v1/runs/q-1", headers=rt).status_code == 404


def test_declared_query_parameters_still_work(client: TestClient, creds: TenantCreds) -> None:
    admin = bearer(creds.admin_key)
    r = client.get("/v1/deliveries?status=dead&status=failed&limit=3", headers=admin)
    assert r.status_code == 200, r.text
    r = client.get("/v1/runs?state=working,queued&group=", headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text


def test_every_operation_declares_its_422(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    missing = [
        f"{method.upper()} {path}"
        for path, item in doc["paths"].items()
        for method, operation in item.items()
        if "422" not in operation["responses"]
    ]
    assert missing == []
    some = doc["paths"]["/v1/me"]["get"]["responses"]["422"]
    assert some["content"]["application/problem+json"]["schema"]["$ref"].endswith("/Problem")


def _signal(client: TestClient, creds: TenantCreds, run_id: str, sequence: Any) -> Any:
    rt = bearer(creds.runtime_key)
    client.put(f"/v1/runs/{run_id}", json={"owner": creds.owner_email}, headers=rt)
    return client.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": f"e-{run_id}", "state": "working", "sequence": sequence},
        headers=rt,
    )


def test_an_integral_json_number_is_an_integer(client: TestClient, creds: TenantCreds) -> None:
    r = _signal(client, creds, "int-1", 7.0)
    assert r.status_code == 200, r.text
    assert r.json()["run"]["sequence"] == 7
    assert isinstance(r.json()["run"]["sequence"], int)


@pytest.mark.parametrize("value", ["7", True, 7.5, -1.0, MAX_SEQUENCE + 1])
def test_what_is_not_an_integer_is_refused(
    client: TestClient, creds: TenantCreds, value: Any
) -> None:
    r = _signal(client, creds, f"int-bad-{abs(hash(repr(value))) % 10_000}", value)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "sequence"


@pytest.mark.parametrize("value", ["7", True])
def test_a_number_refuses_strings_and_booleans(
    client: TestClient, creds: TenantCreds, value: Any
) -> None:
    r = client.post(
        "/v1/webhook-endpoints",
        json={"url": "https://hooks.example.com/x", "rate_limit_per_s": value},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "rate_limit_per_s"


def test_the_document_states_enums_and_exact_bounds(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    params = {p["name"]: p for p in doc["paths"]["/v1/runs"]["get"]["parameters"]}
    for name, expected in (
        ("state", "working"),
        ("group", "needs_you"),
    ):
        items = params[name]["schema"]["anyOf"][0]["items"]
        assert "items" not in params[name]["schema"]
        assert expected in items["anyOf"][0]["enum"], items
    signal = doc["components"]["schemas"]["SignalIn"]["properties"]["sequence"]["anyOf"][0]
    assert signal == {"type": "integer", "minimum": 0, "maximum": MAX_SEQUENCE}
    assert type(signal["maximum"]) is int
    after = {p["name"]: p for p in doc["paths"]["/v1/events"]["get"]["parameters"]}["after"]
    assert "pattern" in after["schema"]["anyOf"][0]


def test_rules_beyond_the_schema_are_declared(client: TestClient) -> None:
    """What JSON Schema cannot say is an ``x-runbell-rules`` entry and a line of the
    operation's description; what it can say is in the schema (if/then)."""
    doc = client.get("/openapi.json").json()
    put_run = doc["paths"]["/v1/runs/{run_id}"]["put"]
    fields = {r["field"] for r in put_run["x-runbell-rules"]}
    assert {"owner", "state"} <= fields
    assert "owner" in put_run["description"] and "x-runbell-rules" in put_run["description"]
    hook = doc["paths"]["/v1/webhook-endpoints"]["post"]["x-runbell-rules"]
    assert any(r["problem"] == "unsafe-destination" for r in hook)
    source = doc["components"]["schemas"]["SourceCreate"]
    mapper_rule = source["allOf"][1]
    assert mapper_rule["else"]["required"] == ["mapper"]
