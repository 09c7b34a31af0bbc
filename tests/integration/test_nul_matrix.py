"""Issue 16 row 2: U+0000 (and any code point PostgreSQL text cannot store) is refused
before anything is written, with a 422 naming the field, identically on both databases.

Before, a NUL in any string was a 500 on PostgreSQL (``text fields cannot contain NUL``)
and a 201 on SQLite. The matrix covers every string-bearing endpoint and every place a
string arrives: a body value, a nested key, a nested value, a query parameter, a path
parameter, a stored header, a web form and a provider webhook's payload. Each case
asserts the 422 problem, the field it names, and that no table gained or lost a row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.api.schemas import InputRequestIn, OperationIn, RunPut, SignalIn
from runbell.domain import limits as L
from runbell.flows.context import Core
from runbell.store.tables import metadata
from runbell.testing import TenantCreds
from tests.conftest import bearer
from tests.integration.test_web import sign_in

NUL = "\x00"


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    field: str  # the field the 422 must name
    who: str = "runtime"  # runtime | admin | owner | browser
    json: Any = None
    params: dict[str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    form: dict[str, str] | None = None


R = "/v1/runs/nul-run"
ASK = {"input_request_id": "ask-nul", "kind": "text", "summary": "Which?"}
OP = {"operation_id": "op-nul", "target": {"type": "invoice", "id": "7"}, "intent": "pay it"}

CASES: dict[str, Case] = {
    # --- body values -------------------------------------------------------------------
    "run title": Case("PUT", R, "title", json={"title": f"a{NUL}b"}),
    "run owner": Case("PUT", "/v1/runs/nul-new", "owner", json={"owner": f"x{NUL}@y"}),
    "run objective": Case("PUT", R, "objective", json={"objective": NUL}),
    "run kind": Case("PUT", R, "kind", json={"kind": NUL}),
    "run subject id": Case(
        "PUT", R, "subject.id", json={"subject": {"type": "pr", "id": f"1{NUL}"}}
    ),
    "run authority user": Case("PUT", R, "authority.users.0", json={"authority": {"users": [NUL]}}),
    "signal event_id": Case(
        "POST", f"{R}/signals", "event_id", json={"event_id": f"e{NUL}", "state": "working"}
    ),
    "signal reason": Case(
        "POST",
        f"{R}/signals",
        "reason",
        json={"event_id": "e1", "state": "failed", "reason": f"boom{NUL}"},
    ),
    "signal error message": Case(
        "POST",
        f"{R}/signals",
        "error.message",
        json={"event_id": "e1", "state": "failed", "error": {"message": NUL}},
    ),
    "signal report link label": Case(
        "POST",
        f"{R}/signals",
        "report.links.0.label",
        json={
            "event_id": "e1",
            "state": "completed",
            "report": {"links": [{"label": NUL, "url": "https://x.example"}]},
        },
    ),
    "progress message": Case("POST", f"{R}/progress", "message", json={"message": NUL}),
    "input request summary": Case(
        "POST", f"{R}/input-requests", "summary", json={**ASK, "summary": f"ok{NUL}"}
    ),
    "input request option label": Case(
        "POST",
        f"{R}/input-requests",
        "options.0.label",
        json={**ASK, "kind": "choice", "options": [{"id": "a", "label": NUL}]},
    ),
    "answer value": Case(
        "POST",
        "/v1/input-requests/ask-open/responses",
        "value",
        who="owner",
        json={
            "decision": "answer",
            "value": f"yes{NUL}",
            "expected_run_version": 2,
            "expected_request_version": 1,
        },
    ),
    "operation intent": Case(
        "POST", f"{R}/operations", "intent", json={**OP, "intent": f"pay{NUL}"}
    ),
    "operation target id": Case(
        "POST",
        f"{R}/operations",
        "target.id",
        json={**OP, "target": {"type": "invoice", "id": NUL}},
    ),
    "amendment text": Case(
        "POST", f"{R}/amendments", "text", who="owner", json={"text": f"please{NUL}"}
    ),
    "cancel reason": Case("POST", f"{R}/cancel", "reason", who="owner", json={"reason": NUL}),
    "source name": Case("POST", "/v1/sources", "name", who="admin", json={"name": NUL}),
    "webhook endpoint description": Case(
        "POST",
        "/v1/webhook-endpoints",
        "description",
        who="admin",
        json={"url": "https://hooks.example.com/x", "description": NUL},
    ),
    "preferences timezone": Case(
        "PUT", "/v1/me/preferences", "timezone", who="owner", json={"timezone": f"UTC{NUL}"}
    ),
    "push user_agent": Case(
        "POST",
        "/v1/me/push-subscriptions",
        "user_agent",
        who="owner",
        json={
            "endpoint": "https://push.example.com/x",
            "keys": {"p256dh": "B" * 87, "auth": "A" * 22},
            "user_agent": f"Firefox{NUL}",
        },
    ),
    "chat label": Case(
        "POST",
        "/v1/me/chat-destinations",
        "label",
        who="owner",
        json={"url": "jsons://chat.example.com/x", "label": NUL},
    ),
    "policy rule id": Case(
        "PUT",
        "/v1/policy",
        "rules.0.id",
        who="admin",
        json={"rules": [{"id": NUL, "decision": "inbox"}]},
    ),
    # --- nested keys and values of free-form JSON ---------------------------------------
    "run metadata key": Case("PUT", R, "metadata", json={"metadata": {f"k{NUL}": 1}}),
    "run metadata value": Case("PUT", R, "metadata.k", json={"metadata": {"k": NUL}}),
    "run details nested key": Case(
        "PUT", R, "details.a.0", json={"details": {"a": [{f"b{NUL}": 1}]}}
    ),
    "run details nested value": Case(
        "PUT", R, "details.a.0.b", json={"details": {"a": [{"b": NUL}]}}
    ),
    "progress counts key": Case("POST", f"{R}/progress", "counts", json={"counts": {NUL: 1}}),
    "progress counts value": Case(
        "POST", f"{R}/progress", "counts.unit", json={"counts": {"unit": NUL}}
    ),
    "input request details": Case(
        "POST",
        f"{R}/input-requests",
        "details.evidence",
        json={**ASK, "details": {"evidence": NUL}},
    ),
    "operation details key": Case(
        "POST", f"{R}/operations", "details", json={**OP, "details": {NUL: "x"}}
    ),
    "operation evidence": Case(
        "PATCH",
        f"{R}/operations/op-open",
        "evidence.receipt",
        json={"state": "sent", "evidence": {"receipt": NUL}},
    ),
    # --- query and path parameters ------------------------------------------------------
    "runs after": Case("GET", "/v1/runs", "after", params={"after": NUL}),
    "notifications cursor": Case(
        "GET", "/v1/notifications", "cursor", who="owner", params={"cursor": f"a{NUL}"}
    ),
    "deliveries endpoint_id": Case(
        "GET", "/v1/deliveries", "endpoint_id", who="admin", params={"endpoint_id": NUL}
    ),
    "notification id in the path": Case(
        "POST", "/v1/notifications/ntf%00x/ack", "notification_id", who="owner", json={}
    ),
    # --- stored headers -----------------------------------------------------------------
    "Idempotency-Key": Case(
        "POST",
        f"{R}/signals",
        "idempotency-key",
        json={"event_id": "e1", "state": "working"},
        headers={"Idempotency-Key": f"k{NUL}"},
    ),
    "webhook-id of a provider webhook": Case(
        "POST",
        "/v1/sources/SOURCE/webhook",
        "webhook-id",
        who="none",
        json={"type": "x"},
        headers={"webhook-id": f"msg{NUL}"},
    ),
    "X-Runbell-Owner of /mcp": Case(
        "POST",
        "/mcp",
        "x-runbell-owner",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"X-Runbell-Owner": f"me{NUL}@example.com", "Accept": "application/json"},
    ),
    # --- provider webhook payload -------------------------------------------------------
    "provider webhook payload": Case(
        "POST",
        "/v1/sources/SOURCE/webhook",
        "data.reason",
        who="none",
        json={"type": "run.failed", "data": {"run_id": "nul-run", "reason": NUL}},
    ),
    # --- web forms ----------------------------------------------------------------------
    "web amendment form": Case(
        "POST", "/runs/nul-run/amendments", "text", who="browser", form={"text": f"a{NUL}b"}
    ),
    "web settings form": Case(
        "POST", "/settings", "quiet_start_0", who="browser", form={"quiet_start_0": NUL}
    ),
}


#: Every table's row count in one statement: one round trip, built and compiled once
#: (a statement per table was 8% of this file's CPU, twice per case).
ROW_COUNTS = sa.select(
    *(
        sa.select(sa.func.count()).select_from(table).scalar_subquery().label(table.name)
        for table in metadata.sorted_tables
    )
)


def row_counts(core: Core) -> dict[str, int]:
    with core.db.read() as conn:
        row = conn.execute(ROW_COUNTS).one()
    counts = {name: int(value) for name, value in row._mapping.items()}
    assert list(counts) == [table.name for table in metadata.sorted_tables]
    return counts


def setup_world(client: TestClient, core: Core, creds: TenantCreds) -> dict[str, str]:
    """A run waiting on an open question, with a declared operation, and a webhook
    source: every case's target exists, so only the NUL can be at fault."""
    rt = bearer(creds.runtime_key)
    r = client.put(R, json={"owner": creds.owner_email, "state": "working"}, headers=rt)
    assert r.status_code == 201, r.text
    r = client.post(
        f"{R}/operations",
        json={"operation_id": "op-open", "target": {"type": "t", "id": "1"}, "intent": "do"},
        headers=rt,
    )
    assert r.status_code in (200, 201), r.text
    r = client.post(
        f"{R}/input-requests",
        json={"input_request_id": "ask-open", "kind": "text", "summary": "Which?"},
        headers=rt,
    )
    assert r.status_code in (200, 201), r.text
    r = client.post(
        "/v1/sources",
        json={"name": "hooks", "kind": "webhook", "mapper": "generic", "trust": "authoritative"},
        headers=bearer(creds.admin_key),
    )
    assert r.status_code == 201, r.text
    return {"SOURCE": r.json()["id"]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_nul_is_refused_before_writing(
    client: TestClient, core: Core, creds: TenantCreds, name: str
) -> None:
    case = CASES[name]
    names = setup_world(client, core, creds)
    path = case.path.replace("SOURCE", names["SOURCE"])
    headers = dict(case.headers)
    csrf = None
    if case.who == "browser":
        csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    elif case.who != "none":
        token = {
            "runtime": creds.runtime_key,
            "admin": creds.admin_key,
            "owner": creds.owner_token,
        }[case.who]
        headers.update(bearer(token))
    if case.json is not None and case.method == "PUT" and path.startswith("/v1/runs/"):
        case_json = {"owner": creds.owner_email, **case.json}
        if "owner" in case.json:
            case_json = case.json
    else:
        case_json = case.json
    before = row_counts(core)
    if case.form is not None:
        r = client.request(
            case.method,
            path,
            data={**case.form, "csrf_token": csrf or ""},
            headers=headers,
            follow_redirects=False,
        )
    else:
        r = client.request(case.method, path, json=case_json, params=case.params, headers=headers)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["field"].lower() == case.field.lower(), problem
    assert "U+0000" in problem["detail"] or "NUL" in problem["detail"], problem
    assert row_counts(core) == before


@pytest.mark.parametrize(
    ("model", "body", "where"),
    [
        (RunPut, {"title": NUL}, "title"),
        (RunPut, {"metadata": {"a": {NUL: 1}}}, "metadata.a"),
        (SignalIn, {"event_id": "e", "state": "working", "reason": NUL}, "reason"),
        (InputRequestIn, {**ASK, "details": {"x": [NUL]}}, "details.x.0"),
        (OperationIn, {**OP, "target": {"type": "t", "id": f"1{NUL}"}}, "target.id"),
    ],
)
def test_the_models_refuse_it_for_every_face(model: Any, body: Any, where: str) -> None:
    """The rule is in the request models too, so a face that validates with them (the
    MCP tools) refuses the same input with the same words, strict mode or not."""
    from pydantic import ValidationError

    for strict in (False, True):
        with pytest.raises(ValidationError) as caught:
            model.model_validate(body, strict=strict)
        assert f"{where}: " in str(caught.value) and "U+0000" in str(caught.value)


def test_the_openapi_document_states_the_rule_and_the_lengths(client: TestClient) -> None:
    """Schema-driven clients and testers see the rule: free-text strings carry the
    pattern forbidding U+0000, map keys the same ``propertyNames`` pattern, free-form
    objects the recursive ``JsonObject``; and every ``maxLength`` is the constant the
    column width comes from (``domain.limits``)."""
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    title = schemas["RunPut"]["properties"]["title"]["anyOf"][0]
    assert title == {"type": "string", "maxLength": L.TITLE, "pattern": L.STORABLE_PATTERN}
    version = schemas["Subject"]["properties"]["version"]["anyOf"]
    assert {"type": "string", "maxLength": L.SUBJECT_VERSION, "pattern": L.STORABLE_PATTERN} in (
        version
    )
    metadata = schemas["RunPut"]["properties"]["metadata"]["anyOf"][0]
    assert metadata == {"allOf": [{"$ref": "#/components/schemas/JsonObject"}]}
    assert schemas["JsonObject"]["propertyNames"] == {"pattern": L.STORABLE_PATTERN}
    assert {"type": "string", "pattern": L.STORABLE_PATTERN} in schemas["JsonValue"]["anyOf"]
    counts = schemas["ProgressIn"]["properties"]["counts"]["anyOf"][0]
    assert counts["propertyNames"]["pattern"] == L.STORABLE_PATTERN
    cursor = next(p for p in doc["paths"]["/v1/runs"]["get"]["parameters"] if p["name"] == "after")
    assert cursor["schema"]["anyOf"][0]["pattern"] == L.STORABLE_PATTERN
    # The pattern means what the server does, in the regular-expression dialect of
    # JSON Schema validators (Python's re here, as schemathesis uses).
    assert re.fullmatch(L.STORABLE_PATTERN, "ok \U0001f600") is not None
    assert re.fullmatch(L.STORABLE_PATTERN, f"a{NUL}b") is None
