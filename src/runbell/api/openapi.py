"""The OpenAPI document tells the real contract: which problem answers each operation gives.

Every operation declares its error answers with :func:`problems` (``responses=`` on the
route), all as ``application/problem+json`` with the shared ``Problem`` schema (RFC 9457:
``type``, ``title``, ``status``, ``detail`` and the extension members Runbell adds), so
generated clients and schema-driven testers (schemathesis) see what the server sends.
FastAPI's own ``422 HTTPValidationError`` (``application/json``, a shape Runbell never
sends) is dropped: an operation that can answer 422 declares the problem it really is.

What JSON Schema can say is said in the schemas (bounds, enums, patterns, ``if``/``then``
for fields that depend on another field's value). What it cannot say (a rule that depends
on stored state, on the operator's settings or on DNS, or one comparing two values) is
declared with :func:`rules` as the operation's ``x-runbell-rules`` extension: a list of
``{field, problem, rule}`` (the problem type slug and the ``field`` the 422 names), also
written into the operation's description so that people see it in ``/docs``.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from runbell.domain.limits import STORABLE_PATTERN
from runbell.domain.runs import MAX_SEQUENCE

PROBLEM_MEDIA = "application/problem+json"
PROBLEM_REF = "#/components/schemas/Problem"

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "An RFC 9457 problem document. Members other than type, title, status "
    "and detail appear only where they apply.",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "description": "https://runbell.dev/problems/<slug>"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "what happened, in plain words"},
        "field": {
            "type": "string",
            "description": "422: the body field, query parameter or header at fault",
        },
        "errors": {
            "type": "array",
            "description": "422: every problem found, {field, message}",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
        "current": {
            "type": "object",
            "description": "409: the state now (the run, the input request, the delivery)",
        },
        "rule": {"type": "string", "description": "unsafe-destination: the SSRF rule"},
        "oldest_available_cursor": {"type": "string", "description": "410"},
        "head_cursor": {"type": "string", "description": "410"},
        "snapshot_url": {"type": "string", "description": "410"},
    },
    "additionalProperties": True,
}

DESCRIPTIONS: dict[int, str] = {
    401: "Missing, unknown, revoked or expired credentials (or, for the provider webhook, "
    "no valid signature)",
    403: "Authenticated, but this credential's kind or role may not do this (or a browser "
    "session's unsafe request without its X-CSRF-Token)",
    404: "Unknown id, another tenant's id, or one the caller may not see",
    409: "The current state forbids it; `current` says what is true now",
    410: "The cursor is older than the feed's retention: load the snapshot",
    413: "The request body is over RUNBELL_MAX_BODY_BYTES",
    422: "Invalid request: `field` and `errors` name what to fix (a body field, a header, "
    "or a query parameter, including one this operation does not take)",
    429: "Too many failed authentications from this address or with this credential "
    "(RUNBELL_AUTH_FAILURE_BURST per window); retry after Retry-After seconds. A correct "
    "credential is never refused this way",
    503: "The database is unreachable; retry after Retry-After seconds",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before retrying",
        "schema": {"type": "integer"},
    }
}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status as a problem+json answer."""
    out: dict[int | str, dict[str, Any]] = {}
    if 401 in codes and 429 not in codes:
        # Whatever can refuse a credential can refuse a guessed one with 429 past the
        # failed-authentication burst (runbell.flows.auth_failures).
        codes = tuple(sorted((*codes, 429)))
    for code in codes:
        entry: dict[str, Any] = {
            "description": DESCRIPTIONS[code],
            "content": {PROBLEM_MEDIA: {"schema": {"$ref": PROBLEM_REF}}},
        }
        if code in (429, 503):
            entry["headers"] = _RETRY_AFTER
        out[code] = entry
    return out


def rule(field: str, says: str, problem: str = "validation") -> dict[str, str]:
    """One rule JSON Schema cannot state: a 422 ``problem`` naming ``field``."""
    return {"field": field, "problem": problem, "rule": says}


def rules(*items: dict[str, str]) -> dict[str, Any]:
    """``openapi_extra=`` for a route whose input has rules beyond its schema."""
    return {"x-runbell-rules": list(items)}


#: The SSRF guard on an outbound URL (webhook endpoints, push, chat, state readers).
SSRF_RULE = (
    "the host must be public: a name that resolves only to public addresses, or a public "
    "IP literal (not loopback, private, link-local, multicast or reserved, not a local-only "
    "name such as localhost or *.internal); plain http only to a host on the operator's "
    "RUNBELL_OUTBOUND_ALLOW_HOSTS (which also admits private hosts). Checked again on "
    "every call"
)


IDEMPOTENCY_RULE = rule(
    "Idempotency-Key",
    "a key already used (by this caller) for another request, i.e. another method, path, "
    "query or body, is refused; a retry of the same request returns the first answer",
)


def _describe_rules(operation: dict[str, Any]) -> None:
    if any(p.get("name") == "Idempotency-Key" for p in operation.get("parameters", ())):
        operation["x-runbell-rules"] = [*operation.get("x-runbell-rules", ()), IDEMPOTENCY_RULE]
    items = operation.get("x-runbell-rules")
    if not items:
        return
    lines = [f"- `{r['field']}`: {r['rule']} (422 `{r['problem']}`)" for r in items]
    text = operation.get("description", "").rstrip()
    operation["description"] = (
        f"{text}\n\nRules the schema cannot state (`x-runbell-rules`):\n\n" + "\n".join(lines)
    ).lstrip()


def install(app: FastAPI) -> None:
    """Serve the document with the Problem schema and without FastAPI's 422 shape."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        schemas["Problem"] = PROBLEM_SCHEMA
        declare_storable(doc)
        for path_item in doc.get("paths", {}).values():
            for operation in path_item.values():
                responses = operation.setdefault("responses", {})
                # FastAPI adds its own 422 shape to any operation with parameters; every
                # operation answers the Problem instead, at least for a query parameter
                # it does not take (``runbell.api.deps.known_query``).
                if _is_fastapi_422(responses.get("422")) or "422" not in responses:
                    responses["422"] = problems(422)[422]
                _describe_rules(operation)
        _exact_integer_bounds(doc)
        for name in ("HTTPValidationError", "ValidationError"):
            if name in schemas and f"#/components/schemas/{name}" not in json.dumps(doc):
                del schemas[name]
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
#: Integer bounds too large for a float to hold exactly (FastAPI's OpenAPI models keep
#: ``maximum`` as a float, so 2**63 - 1 would come out as 9.223372036854776e18, i.e. 2**63).
_EXACT = {float(bound): bound for bound in (MAX_SEQUENCE,)}


def _exact_integer_bounds(node: Any) -> None:
    """Bounds as the models declare them: ``minimum: 0``, not ``0.0``, and the sequence's
    ``maximum`` exactly 9223372036854775807 (a validator comparing it with a float would
    accept 2**63, which the server refuses)."""
    if isinstance(node, list):
        for item in node:
            _exact_integer_bounds(item)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in _BOUNDS and isinstance(value, float) and value.is_integer():
            node[key] = _EXACT.get(value, int(value))
        else:
            _exact_integer_bounds(value)


def _is_fastapi_422(response: dict[str, Any] | None) -> bool:
    if response is None:
        return False
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref", "").endswith("/HTTPValidationError"))


# --- the character rule (runbell.domain.limits), stated ---------------------------------

JSON_VALUE_REF = "#/components/schemas/JsonValue"
JSON_OBJECT_REF = "#/components/schemas/JsonObject"
_STORABLE_STRING: dict[str, Any] = {"type": "string", "pattern": STORABLE_PATTERN}
JSON_SCHEMAS: dict[str, dict[str, Any]] = {
    "JsonValue": {
        "title": "JsonValue",
        "description": "Any JSON value whose strings and keys hold no U+0000",
        "anyOf": [
            _STORABLE_STRING,
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": {"$ref": JSON_VALUE_REF}},
            {"$ref": JSON_OBJECT_REF},
        ],
    },
    "JsonObject": {
        "title": "JsonObject",
        "description": "A JSON object whose strings and keys, at every depth, hold no U+0000",
        "type": "object",
        "propertyNames": {"pattern": STORABLE_PATTERN},
        "additionalProperties": {"$ref": JSON_VALUE_REF},
    },
}
_NOT_FREE_TEXT = ("pattern", "enum", "const", "format", "contentEncoding")


def declare_storable(doc: dict[str, Any]) -> None:
    """State the character rule wherever the server enforces it (``api.limits``): every
    free-text string gets the pattern forbidding U+0000, every map's keys the same
    (``propertyNames``), and every free-form JSON object (``dict[str, Any]``) becomes
    :data:`JSON_SCHEMAS` ``JsonObject``, recursive, so schema-driven clients and testers
    see the rule instead of meeting an undeclared 422."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in schemas.items():
        if name != "Problem":
            _walk(schema)
    for path_item in doc.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                if isinstance(parameter.get("schema"), dict):
                    _walk(parameter["schema"])
            for media in operation.get("requestBody", {}).get("content", {}).values():
                if isinstance(media.get("schema"), dict):
                    _walk(media["schema"])
    schemas.update(JSON_SCHEMAS)


def _walk(schema: dict[str, Any]) -> None:
    kind = schema.get("type")
    if kind == "string" and not any(k in schema for k in _NOT_FREE_TEXT):
        schema["pattern"] = STORABLE_PATTERN
    if kind == "object" and "properties" not in schema:
        extra = schema.get("additionalProperties", True)
        if extra is True or extra == {}:
            # Free-form JSON: the recursive rule, keeping what the field says about itself.
            kept = {k: v for k, v in schema.items() if k in ("title", "description", "default")}
            schema.clear()
            schema.update(kept, allOf=[{"$ref": JSON_OBJECT_REF}])
            return
        names = schema.setdefault("propertyNames", {})
        names.setdefault("pattern", STORABLE_PATTERN)
    elif kind == "object" and schema.get("additionalProperties", True) is not False:
        # Declared fields plus extra keys the model ignores (a push subscription's
        # expirationTime): the extra keys are checked too.
        schema.setdefault("propertyNames", {}).setdefault("pattern", STORABLE_PATTERN)
    if kind == "array" and "items" not in schema and "prefixItems" not in schema:
        schema["items"] = {"$ref": JSON_VALUE_REF}  # a free-form list holds JSON values
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        for sub in (schema.get(key) or {}).values():
            if isinstance(sub, dict):
                _walk(sub)
    # never into "not": tightening what is negated would widen what is allowed
    for key in ("items", "additionalProperties", "propertyNames"):
        if isinstance(schema.get(key), dict):
            _walk(schema[key])
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for sub in schema.get(key) or []:
            if isinstance(sub, dict):
                _walk(sub)
