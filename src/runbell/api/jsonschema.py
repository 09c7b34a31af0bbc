"""JSON Schema for the request models: the integer and number types, and the rules a
``Field`` cannot carry, added to the models' schemas (``json_schema_extra``).

The server checks each of these too (the model, or the flow or domain check named next to
it); the OpenAPI document says them so that a generated client sends nothing the server
refuses (issue 16). Rules JSON Schema cannot state at all are ``x-runbell-rules``
(``runbell.api.openapi.rules``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictFloat, StrictInt

from runbell.domain.runs import MAX_SEQUENCE


def integral(value: Any) -> Any:
    """``7.0`` → ``7`` (JSON Schema's integer); anything else is left to ``StrictInt``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# JSON integers: ``7`` or ``7.0``; never ``"7"``, ``true`` or ``7.5``. Bounds go inside the
# ``Annotated`` (before the validator) so that the JSON Schema says ``minimum``/``maximum``.
Integer = Annotated[StrictInt, BeforeValidator(integral)]
NonNegativeInteger = Annotated[StrictInt, Field(ge=0), BeforeValidator(integral)]
PositiveInteger = Annotated[StrictInt, Field(ge=1), BeforeValidator(integral)]
SequenceNumber = Annotated[StrictInt, Field(ge=0, le=MAX_SEQUENCE), BeforeValidator(integral)]
#: ``stall_after_seconds``: at most 30 days; 0 is never.
StallSeconds = Annotated[StrictInt, Field(ge=0, le=30 * 86_400), BeforeValidator(integral)]
#: A JSON number: ``7`` or ``7.5``; never ``"7"`` or ``true``.
Number = StrictFloat


def _value_branch(prop: dict[str, Any]) -> dict[str, Any]:
    """The non-null schema of a property (``X | None`` is ``anyOf [X, null]``)."""
    for branch in prop.get("anyOf", ()):
        if branch.get("type") != "null":
            return dict(branch)
    return prop


def refine(**extra: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """``json_schema_extra`` adding keywords to some properties' schemas (their non-null
    branch), for rules a ``Field`` cannot carry (a second pattern, a property of items)."""

    def apply(schema: dict[str, Any]) -> None:
        for name, keywords in extra.items():
            prop = schema["properties"][name]
            if "anyOf" in prop:
                prop["anyOf"] = [
                    {**b, **keywords} if b.get("type") != "null" else b for b in prop["anyOf"]
                ]
            else:
                prop.update(keywords)

    return apply


def not_null(*names: str) -> Callable[[dict[str, Any]], None]:
    """``json_schema_extra`` for fields that may be left out but not sent as ``null``."""

    def apply(schema: dict[str, Any]) -> None:
        for name in names:
            prop = schema["properties"][name]
            branch = _value_branch(prop)
            keep = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
            schema["properties"][name] = {**branch, **keep}

    return apply


#: An outbound URL as far as a pattern can say what the SSRF guard accepts by default:
#: https, no credentials, a host name of two or more labels whose last one starts with a
#: letter (``domain.ssrf.check_url``; its other rules are ``x-runbell-rules``).
HTTPS_NAME_URL = (
    r"^https://[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]([A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?\.?(:[0-9]{1,5})?([/?][\x21-\x7e]*)?$"
)
# Each field with a pattern says, as its minLength, the fewest characters the pattern can
# match: a smaller one promises values nothing can fill, and schema-driven testers
# (schemathesis) spend their time searching for them (test_contract_rules checks them all).
#: The shortest :data:`HTTPS_NAME_URL`: ``https://a.b``.
HTTPS_NAME_URL_MIN = 11

#: What the readers check (``runbell.ingress``), as far as a pattern can say it.
HEADER_VALUE = r"^[\t\x20-\x7e]*$"
DOTTED = {"allOf": [{"pattern": r"^[^.]+(\.[^.]+)*$"}]}  # one character at least
HEADERS = {
    "propertyNames": {"minLength": 1, "pattern": r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"},
    "additionalProperties": {"type": "string", "pattern": HEADER_VALUE},
}


READER_URL_TEMPLATE = r"^https?://[^/?#{}@\s\\]+[/?][^#\s]*\{run_id\}[^#\s]*$"
#: The shortest :data:`READER_URL_TEMPLATE`: ``http://a/{run_id}``.
READER_URL_TEMPLATE_MIN = 17
#: The shortest MCP task id template: ``{run_id}`` (it must hold that placeholder).
TASK_ID_TEMPLATE_MIN = 8


def reader_schema(schema: dict[str, Any]) -> None:
    from runbell.domain.runs import RunState

    refine(
        url_template={
            "allOf": [{"pattern": READER_URL_TEMPLATE}],
            "description": "an absolute http(s) URL with {run_id} in its path or query",
        },
        state_field=DOTTED,
        sequence_field=DOTTED,
        state_map={"additionalProperties": {"enum": sorted(s.value for s in RunState)}},
        headers=HEADERS,
    )(schema)


#: ``whsec_`` and standard base64 of 16 to 128 bytes (``signatures.check_secret``).
B64_TAIL = r"(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)"
B64 = r"[A-Za-z0-9+/]{4}"
SIGNING_SECRET_PATTERN = rf"^whsec_(?:(?:{B64}){{5}}{B64_TAIL}|(?:{B64}){{6,42}}{B64_TAIL}?)$"
SIGNING_SECRET: Any = {"properties": {"signing_secret": {"pattern": SIGNING_SECRET_PATTERN}}}
#: The shortest :data:`SIGNING_SECRET_PATTERN`: ``whsec_`` and 24 characters (16 bytes).
SIGNING_SECRET_MIN = 30


#: One quiet window (``domain.quiet_hours.QuietWindow.parse`` checks the same; other
#: members are ignored). Its start and end must differ (``x-runbell-rules``).
HHMM_PATTERN = r"^([01]?[0-9]|2[0-3]):[0-5][0-9]$"
HHMM_MIN = 4  # 9:00
QUIET_WINDOW: dict[str, Any] = {
    "type": "object",
    "required": ["start", "end"],
    "properties": {
        "start": {
            "type": "string",
            "minLength": HHMM_MIN,
            "pattern": HHMM_PATTERN,
            "description": "HH:MM",
        },
        "end": {
            "type": "string",
            "minLength": HHMM_MIN,
            "pattern": HHMM_PATTERN,
            "description": "HH:MM",
        },
        "days": {
            "anyOf": [
                {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 6}},
                {"type": "null"},
            ],
            "description": "0 (Monday) to 6 (Sunday); absent: every day",
        },
    },
}


def timezones(schema: dict[str, Any]) -> None:
    from zoneinfo import available_timezones

    schema["properties"]["timezone"]["anyOf"][0]["enum"] = sorted(available_timezones())


#: The shortest chat URL the pattern of :func:`chat_url` accepts: ``ntfy://x`` (the
#: shortest schemes, json and ntfy, have four letters).
CHAT_URL_MIN = 8


def chat_url(schema: dict[str, Any]) -> None:
    from runbell.channels.chat_urls import SUPPORTED_SCHEMES  # Apprise: only when asked

    schemes = "|".join(sorted(SUPPORTED_SCHEMES))
    refine(url={"allOf": [{"pattern": rf"^({schemes})://[^\s,;]+$"}]})(schema)
