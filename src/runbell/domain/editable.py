"""Editable values: a request offers a value the person may change before approving.

An input request may declare ``editable: {"schema": <JSON Schema>, "value": <initial>}``
(issue 19 item 3): the person sees the value, may edit it and approve the edited version;
the answer says ``edited`` and carries the value. The schema is a small subset of JSON
Schema, checked here and validated with the ``jsonschema`` library (draft 2020-12):

- ``type``: object, string, array, number, integer or boolean (one type, not a list)
- ``properties``, ``required`` (objects), ``items`` (arrays, one schema)
- ``enum``, ``maxLength``, ``minLength``, ``maximum``, ``minimum``, ``maxItems``
- ``title`` and ``description`` (shown, never checked)

Anything else (``$ref``, ``pattern``, ``oneOf``, ``additionalProperties``, …) is refused:
the form renders only what it understands, and a value it can render stays checkable.

Example::

    spec = parse_spec({"schema": {"type": "object", "properties": {"command": {"type":
                       "string", "maxLength": 10000}}, "required": ["command"]},
                       "value": {"command": "rm -rf ./build"}})
    check_value(spec, {"command": "rm -rf ./build/tmp"})   # None: valid
    is_edited(spec, {"command": "rm -rf ./build"})         # False: the initial value
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from runbell.domain.errors import ValidationFailed

TYPES = ("object", "string", "array", "number", "integer", "boolean")
KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "maxLength",
        "minLength",
        "maximum",
        "minimum",
        "maxItems",
        "title",
        "description",
    }
)
#: The schema and the value, each as JSON, are at most this many characters.
MAX_JSON = 64_000
MAX_DEPTH = 8


@dataclass(frozen=True, slots=True)
class Editable:
    """A checked editable spec: the schema (within the subset) and the initial value."""

    schema: dict[str, Any]
    value: Any

    def as_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "value": self.value}

    @property
    def single_string(self) -> str | None:
        """The property name when the schema is ``{type: object}`` with exactly one
        string property (``{command: string}``): the form shows that string as text."""
        props = self.schema.get("properties") or {}
        if self.schema.get("type") == "object" and len(props) == 1:
            (name, sub), *_ = props.items()
            if isinstance(sub, dict) and sub.get("type") == "string":
                return str(name)
        return None


def parse_spec(given: object, field: str = "editable") -> Editable | None:
    """``editable`` from a request body, checked (None when absent), or a 422 naming the
    part that is wrong (``editable.schema.properties.x.pattern``)."""
    if given is None:
        return None
    if not isinstance(given, dict) or set(given) - {"schema", "value"} or "schema" not in given:
        raise ValidationFailed(
            f'{field} is an object with a schema and a value: {{"schema": {{...}}, "value": ...}}',
            field=field,
        )
    schema, value = given["schema"], given.get("value")
    if _size(schema) > MAX_JSON or _size(value) > MAX_JSON:
        raise ValidationFailed(f"{field} is at most {MAX_JSON} characters of JSON", field=field)
    _check_schema(schema, f"{field}.schema", 0)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:  # the subset check should have caught it; keep the net
        raise ValidationFailed(f"{field}.schema: {exc.message}", field=f"{field}.schema") from exc
    spec = Editable(schema=schema, value=value)
    problem = check_value(spec, value)
    if problem is not None:
        path, message = problem
        where = f"{field}.value" + (f".{path}" if path else "")
        raise ValidationFailed(f"{where}: {message}", field=where)
    return spec


def parse_stored(stored: object) -> Editable | None:
    """A request's stored ``editable`` (checked when the request was opened), or None."""
    if not isinstance(stored, dict) or "schema" not in stored:
        return None
    return Editable(schema=stored["schema"], value=stored.get("value"))


def check_value(spec: Editable, value: object) -> tuple[str, str] | None:
    """None when ``value`` fits the schema, else (the path to the first problem, dotted,
    "" for the value itself; the message)."""
    errors = sorted(
        Draft202012Validator(spec.schema).iter_errors(value),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if not errors:
        return None
    first = errors[0]
    return ".".join(str(p) for p in first.absolute_path), first.message


def require_value(spec: Editable, value: object, field: str = "value") -> None:
    """422 naming the path (``value.command``) when ``value`` does not fit the schema."""
    if _size(value) > MAX_JSON:
        raise ValidationFailed(f"{field} is at most {MAX_JSON} characters of JSON", field=field)
    problem = check_value(spec, value)
    if problem is not None:
        path, message = problem
        where = field + (f".{path}" if path else "")
        raise ValidationFailed(f"{where}: {message}", field=where)


def is_edited(spec: Editable, value: object) -> bool:
    """Whether the approved value differs from the initial one (by JSON value)."""
    return _canonical(value) != _canonical(spec.value)


def _check_schema(schema: object, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValidationFailed(f"{where}: nested deeper than {MAX_DEPTH} levels", field=where)
    if not isinstance(schema, dict):
        raise ValidationFailed(f"{where} must be an object", field=where)
    unknown = sorted(set(schema) - KEYWORDS)
    if unknown:
        raise ValidationFailed(
            f"{where}.{unknown[0]}: not in the supported subset ({', '.join(sorted(KEYWORDS))})",
            field=f"{where}.{unknown[0]}",
        )
    kind = schema.get("type")
    if kind not in TYPES:
        raise ValidationFailed(
            f"{where}.type must be one of {', '.join(TYPES)}", field=f"{where}.type"
        )
    props = schema.get("properties")
    if props is not None:
        if kind != "object" or not isinstance(props, dict):
            raise ValidationFailed(
                f"{where}.properties: an object's properties, by name", field=f"{where}.properties"
            )
        for name, sub in props.items():
            _check_schema(sub, f"{where}.properties.{name}", depth + 1)
    required = schema.get("required")
    if required is not None and (
        kind != "object"
        or not isinstance(required, list)
        or not all(isinstance(r, str) and r in (props or {}) for r in required)
    ):
        raise ValidationFailed(
            f"{where}.required: names of the object's properties", field=f"{where}.required"
        )
    items = schema.get("items")
    if items is not None:
        if kind != "array":
            raise ValidationFailed(f"{where}.items: only for an array", field=f"{where}.items")
        _check_schema(items, f"{where}.items", depth + 1)
    enum = schema.get("enum")
    if enum is not None and (not isinstance(enum, list) or not enum):
        raise ValidationFailed(f"{where}.enum: a non-empty list", field=f"{where}.enum")
    for bound, types in (
        ("maxLength", ("string",)),
        ("minLength", ("string",)),
        ("maxItems", ("array",)),
        ("maximum", ("number", "integer")),
        ("minimum", ("number", "integer")),
    ):
        if bound not in schema:
            continue
        limit = schema[bound]
        whole = bound in ("maxLength", "minLength", "maxItems")
        ok = (
            kind in types
            and not isinstance(limit, bool)
            and (isinstance(limit, int) if whole else isinstance(limit, (int, float)))
            and (not whole or limit >= 0)
        )
        if not ok:
            raise ValidationFailed(
                f"{where}.{bound}: a {'whole ' if whole else ''}number, for {' or '.join(types)}",
                field=f"{where}.{bound}",
            )
    for text in ("title", "description"):
        if text in schema and not isinstance(schema[text], str):
            raise ValidationFailed(f"{where}.{text}: a string", field=f"{where}.{text}")


def _size(doc: object) -> int:
    try:
        return len(json.dumps(doc))
    except (TypeError, ValueError):
        return MAX_JSON + 1


def _canonical(doc: object) -> str:
    return json.dumps(doc, sort_keys=True)
