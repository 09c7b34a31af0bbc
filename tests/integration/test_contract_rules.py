"""The OpenAPI document is as strict as the server (issue 16 rows 8 and 9).

- An unknown query parameter is a 422 naming it, on every route (a filter the server
  does not have must not look like one it applied), and every operation declares that 422.
- Integers: a JSON number with a zero fraction (``7.0``) is an integer, as JSON Schema
  says; ``"7"``, ``true`` and ``7.5`` are not. Numbers refuse ``"7"`` and ``true``.
- Query values with a closed set (``state``, ``group``) are enums in the document, and
  integer bounds are exact (the sequence maximum is 2**63 - 1, not a float).
- Every string's ``minLength`` is at least the fewest characters its ``pattern`` can match
  (and no ``maxLength`` is below that): the document promises no length nothing can fill.
"""

from __future__ import annotations

from dataclasses import dataclass

# Private, but the one parser that knows a pattern's width (3.11+); a Python that moves it
# fails this module's import, not silently.
from re import _parser as sre_parse
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


# --- every pattern fits its string's length bounds ----------------------------------------


def pattern_min_width(pattern: str) -> int:
    """The fewest characters a match of ``pattern`` spans (anchors are zero wide). JSON
    Schema applies a pattern with search semantics, so only this lower bound matters."""
    return int(sre_parse.parse(pattern).getwidth()[0])


@dataclass(frozen=True)
class Misfit:
    """A string schema whose ``pattern`` cannot match within its length bounds."""

    where: str
    field: str
    min_length: int
    max_length: int | None
    pattern_min: int
    pattern: str

    def __str__(self) -> str:
        bound = f"maxLength {self.max_length}" if self.too_long else f"minLength {self.min_length}"
        return (
            f"{' '.join(filter(None, (self.where, self.field)))}: {bound}, pattern needs "
            f"{self.pattern_min} ({self.pattern})"
        )

    @property
    def too_long(self) -> bool:
        return self.max_length is not None and self.pattern_min > self.max_length


Bounds = tuple[int, int | None]


def _own_bounds(schema: dict[str, Any]) -> Bounds:
    """The length bounds ``schema`` sets for a string: its own, its ``allOf`` members'
    (all apply), and the loosest of its string ``anyOf``/``oneOf`` branches (one applies)."""
    low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
    for member in schema.get("allOf", ()):
        member_low, member_high = _own_bounds(member)
        low, high = _both((low, high), (member_low, member_high))
    for key in ("anyOf", "oneOf"):
        branches = [_own_bounds(b) for b in schema.get(key, ()) if b.get("type") != "null"]
        if branches:
            highs = [h for _, h in branches]
            either = (min(lo for lo, _ in branches), None if None in highs else max(highs))
            low, high = _both((low, high), either)
    return low, high


def _both(a: Bounds, b: Bounds) -> Bounds:
    highs = [h for h in (a[1], b[1]) if h is not None]
    return max(a[0], b[0]), min(highs) if highs else None


def misfits(
    schema: Any,
    where: str,
    field: str = "",
    outer: Bounds = (0, None),
    outer_properties: dict[str, Any] | None = None,
) -> list[Misfit]:
    """Every pattern under ``schema`` that needs more characters than its string's
    ``minLength`` lets it have (absent: 0), or than its ``maxLength`` allows. ``outer`` are
    the bounds that also apply here (the enclosing schema's, for an ``allOf``/``anyOf``/
    ``oneOf`` member); ``outer_properties`` the enclosing object's own properties, whose
    bounds apply to the same-named properties of its ``allOf`` members and ``then``/``else``."""
    if not isinstance(schema, dict):
        return []
    low, high = _both(outer, _own_bounds(schema))
    found: list[Misfit] = []
    if isinstance(schema.get("pattern"), str):
        need = pattern_min_width(schema["pattern"])
        if need > low or (high is not None and need > high):
            found.append(Misfit(where, field, low, high, need, schema["pattern"]))
    properties = {**(outer_properties or {}), **(schema.get("properties") or {})}
    for name, sub in (schema.get("properties") or {}).items():
        outside = (outer_properties or {}).get(name)
        bounds = _own_bounds(outside) if isinstance(outside, dict) else (0, None)
        found += misfits(sub, where, f"{field}.{name}".lstrip("."), bounds)
    for key in ("allOf", "anyOf", "oneOf"):
        for member in schema.get(key, ()):
            found += misfits(member, where, field, (low, high), properties)
    for key in ("then", "else"):  # never into "if" or "not": they match, not constrain
        found += misfits(schema.get(key), where, field, (low, high), properties)
    for key in ("items", "additionalProperties", "propertyNames"):
        found += misfits(schema.get(key), where, f"{field}{'[]' if key == 'items' else f'<{key}>'}")
    for name, sub in (schema.get("patternProperties") or {}).items():
        found += misfits(sub, where, f"{field}<{name}>")
    for sub in schema.get("prefixItems") or ():
        found += misfits(sub, where, f"{field}[]")
    return found


def document_misfits(doc: dict[str, Any]) -> list[Misfit]:
    """:func:`misfits` over every schema of the document: the components, and each
    operation's parameters, request bodies and responses."""
    found: list[Misfit] = []
    for name, schema in doc["components"]["schemas"].items():
        found += misfits(schema, name)
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            op = f"{method.upper()} {path}"
            for parameter in operation.get("parameters", ()):
                where = f"{op} {parameter['in']} {parameter['name']}"
                found += misfits(parameter.get("schema"), where)
            for media in (operation.get("requestBody") or {}).get("content", {}).values():
                found += misfits(media.get("schema"), f"{op} body")
            for status, answer in operation.get("responses", {}).items():
                for media in (answer.get("content") or {}).values():
                    found += misfits(media.get("schema"), f"{op} {status}")
    return found


def test_the_misfit_finder_reads_bounds_where_json_schema_puts_them() -> None:
    """The finder itself: a bound on the enclosing schema, on an allOf member, on the
    object's own property (for an allOf member's property) or on a string branch counts."""
    https = {"pattern": "^https://.+$"}  # 9 characters at least
    fits = [
        {"type": "string", "minLength": 9, "allOf": [https]},
        {"type": "string", "allOf": [https, {"minLength": 9}]},
        {"anyOf": [{"type": "string", "minLength": 9, **https}, {"type": "null"}]},
        {
            "type": "object",
            "properties": {"u": {"anyOf": [{"type": "string", "minLength": 9}, {"type": "null"}]}},
            "allOf": [{"properties": {"u": https}}],
        },
        {"type": "string", "pattern": "^(a|bb)?$"},
    ]
    assert [m for i, s in enumerate(fits) for m in misfits(s, f"fits{i}")] == []
    misfit = [
        {"type": "string", "minLength": 8, "allOf": [https]},
        {"type": "string", "pattern": "x{3}"},
        {"type": "string", "minLength": 3, "maxLength": 4, "pattern": "^[0-9]{5}$"},
        {"type": "array", "items": {"type": "string", "pattern": "^.$"}},
        {"type": "object", "propertyNames": {"pattern": "^.+$"}},
        {
            "type": "object",
            "properties": {"u": {"type": "string", "minLength": 8}},
            "allOf": [{"properties": {"u": https}}],
        },
    ]
    found = [str(m) for i, s in enumerate(misfit) for m in misfits(s, f"misfit{i}")]
    assert found == [
        "misfit0: minLength 8, pattern needs 9 (^https://.+$)",
        "misfit1: minLength 0, pattern needs 3 (x{3})",
        "misfit2: maxLength 4, pattern needs 5 (^[0-9]{5}$)",
        "misfit3 []: minLength 0, pattern needs 1 (^.$)",
        "misfit4 <propertyNames>: minLength 0, pattern needs 1 (^.+$)",
        "misfit5 u: minLength 8, pattern needs 9 (^https://.+$)",
    ], found


def test_every_pattern_fits_its_length_bounds(client: TestClient) -> None:
    """No string schema promises lengths its pattern cannot fill: a pattern needing 11
    characters under ``minLength: 8`` says 8- to 10-character values exist, which no
    client can send, and schema-driven testers (schemathesis) spend their time looking for
    them. Each ``minLength`` is at least the shortest match of its pattern, and no
    ``maxLength`` is below it."""
    found = document_misfits(client.get("/openapi.json").json())
    assert found == [], "\n".join(str(m) for m in found)
