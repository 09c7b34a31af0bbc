"""The tenant's attention policy (read it, replace the tenant's own rules) and its
retention periods (read them, override some)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, cast

from fastapi import APIRouter, Query
from pydantic import ConfigDict, Field, RootModel, StrictBool

from runbell.api.deps import Admin, CoreDep
from runbell.api.jsonschema import Integer, StallSeconds, refine
from runbell.api.openapi import problems, rule, rules
from runbell.api.schemas import Storable, Urgency
from runbell.domain import digest_schedule, digests, escalation, notify_throttle
from runbell.domain import limits as L
from runbell.domain import policy as policy_rules
from runbell.domain import retention as retention_rules
from runbell.domain.errors import ValidationFailed
from runbell.domain.policy import TenantPolicy
from runbell.flows import dry_run, policy, retention

router = APIRouter(prefix="/v1/policy", tags=["policy"])


def _rule_schema() -> Mapping[str, Any]:
    """One policy rule as ``domain.policy.Rule.parse`` checks it."""
    count = {"type": "integer", "minimum": 0}
    condition = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "in": {"type": "array"},
            **{op: {"type": "number"} for op in ("gte", "lte", "gt", "lt")},
        },
    }
    return {
        "type": "object",
        "required": ["id", "decision"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string", "minLength": 1, "maxLength": L.RULE_ID},
            "decision": {"enum": list(policy_rules.DECISION_KINDS)},
            "urgency": {"anyOf": [{"enum": list(policy_rules.URGENCIES)}, {"type": "null"}]},
            "when": {
                "type": "object",
                "description": "fact: value (equal), or fact: {gte|lte|gt|lt: number, in: [..]}",
                "propertyNames": {"enum": sorted(policy_rules.FACT_NAMES)},
                "additionalProperties": {
                    "anyOf": [condition, {"not": {"type": "object"}}],
                },
            },
            "expires_after_s": {"anyOf": [count, {"type": "null"}]},
            "digest_window_s": {
                "anyOf": [
                    {"type": "integer", "minimum": 1, "maximum": digests.MAX_WINDOW_S},
                    {"type": "null"},
                ]
            },
            "digest_key": {
                "anyOf": [
                    {
                        "type": "string",
                        "minLength": 1,
                        "pattern": rf"^[A-Za-z0-9_.:-]{{1,{L.DIGEST_KEY}}}$",
                    },
                    {"type": "null"},
                ]
            },
            "digest_max_items": {
                "anyOf": [
                    {"type": "integer", "minimum": 1, "maximum": digests.MAX_ITEMS_LIMIT},
                    {"type": "null"},
                ]
            },
            "digest_at": {
                "description": "send the digest at this local time of the recipient "
                "(instead of every digest_window_s)",
                "anyOf": [
                    {"type": "string", "minLength": 4, "pattern": digest_schedule.PATTERN},
                    {"type": "null"},
                ],
            },
            "digest_days": {
                "description": "with digest_at: the weekdays it is sent, 0 (Monday) to 6",
                "anyOf": [
                    {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 7,
                        "items": {"type": "integer", "minimum": 0, "maximum": 6},
                    },
                    {"type": "null"},
                ],
            },
            "throttle": {
                "description": "at most limit pushes per recipient per key per window_s; "
                "the rest fold into the digest or stay in the inbox (then)",
                "anyOf": [
                    {
                        "type": "object",
                        "required": ["limit"],
                        "additionalProperties": False,
                        "properties": {
                            "limit": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": notify_throttle.MAX_LIMIT,
                            },
                            "window_s": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": notify_throttle.MAX_WINDOW_S,
                            },
                            "key": {"enum": list(notify_throttle.KEYS)},
                            "then": {"enum": list(notify_throttle.THEN)},
                        },
                    },
                    {"type": "null"},
                ],
            },
            "escalation": {
                "anyOf": [
                    {
                        "type": "array",
                        "maxItems": escalation.MAX_STEPS,
                        "items": {
                            "type": "object",
                            "required": ["after_s", "channel"],
                            "additionalProperties": False,
                            "properties": {
                                "after_s": {
                                    "type": "integer",
                                    "minimum": 1,
                                    "maximum": escalation.MAX_AFTER_S,
                                },
                                "channel": {"enum": list(escalation.ESCALATION_CHANNELS)},
                            },
                        },
                    },
                    {"type": "null"},
                ]
            },
            "lock_screen_answers": {
                "type": "boolean",
                "description": "web push offers Approve/Reject on the notification itself "
                "(approvals only, never for a request flagged risky); default false",
            },
            "snooze_s": {
                "anyOf": [
                    {
                        "type": "integer",
                        "minimum": policy_rules.MIN_SNOOZE_S,
                        "maximum": policy_rules.MAX_SNOOZE_S,
                    },
                    {"type": "null"},
                ],
                "description": "how long a push's Snooze hides it (default 3600)",
            },
            "fallback": {
                "description": "a channel failed for good (or its receipt stayed unknown "
                "unknown_after_s) → the ladder's next consented channel at once",
                "anyOf": [
                    {"type": "boolean"},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "unknown_after_s": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": escalation.MAX_AFTER_S,
                            }
                        },
                    },
                    {"type": "null"},
                ],
            },
        },
        # A push says how urgent it is.
        "if": {"properties": {"decision": {"const": "push"}}},
        "then": {"required": ["urgency"], "properties": {"urgency": {"type": "string"}}},
    }


POLICY_RULES = rules(
    rule("id", "rule ids are unique in the document"),
    rule("escalation", "after_s increases from step to step; each channel at most once"),
    rule("fallback", "a rule with a fallback has an escalation ladder"),
    rule("throttle", "only on a rule that decides push or digest"),
    rule("digest_at", "not with digest_window_s"),
    rule("digest_days", "only with digest_at"),
)


class PolicyDoc(Storable):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra=refine(rules={"items": _rule_schema()})
    )
    rules: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    replace_defaults: StrictBool = False
    quiet_hours_bypass: list[Urgency] = Field(
        default_factory=list, description="urgencies that may be sent during quiet hours"
    )
    stall_after_seconds: StallSeconds | None = Field(
        default=None,
        description="a working run silent this long is stalled (default 900; 0: never)",
    )


@router.get("", responses=problems(401, 403, 503))
def get_policy(who: Admin, core: CoreDep) -> Mapping[str, Any]:
    """The effective rules in order (tenant rules first), and the tenant's own document."""
    return policy.get_policy(core, who.tenant_id)


@router.put("", responses=problems(401, 403, 413, 422, 503), openapi_extra=POLICY_RULES)
def put_policy(body: PolicyDoc, who: Admin, core: CoreDep) -> Mapping[str, Any]:
    """Replace the tenant's rules; they are validated whole before anything is stored."""
    return policy.set_policy(core, who.tenant_id, cast(TenantPolicy, body.model_dump()))


@router.post(
    "/dry-run",
    responses=problems(401, 403, 413, 422, 503),
    openapi_extra=rules(
        *POLICY_RULES["x-runbell-rules"],
        rule("since", "before until (or now), and at most 92 days before it"),
    ),
)
def dry_run_policy(
    body: PolicyDoc,
    who: Admin,
    core: CoreDep,
    since: Annotated[
        str | None,
        Query(
            max_length=40,
            description="window start, ISO 8601 with offset",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    until: Annotated[
        str | None,
        Query(
            max_length=40,
            description="window end, ISO 8601 (default: now)",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=dry_run.MAX_TRANSITIONS)] = dry_run.MAX_TRANSITIONS,
) -> Mapping[str, Any]:
    """Replay the tenant's recorded transitions of ``[since, until)`` through the candidate
    policy (the ``PUT /v1/policy`` document) and compare with what was decided: counts
    per decision, attention type and urgency, and the transitions that would change. No
    sends, no writes; ``capped`` says when the window held more than ``limit``."""
    return dry_run.dry_run(
        core,
        who.tenant_id,
        cast(TenantPolicy, body.model_dump()),
        since=_instant(since, "since"),
        until=_instant(until, "until"),
        limit=limit,
    )


def _instant(text: str | None, name: str) -> datetime | None:
    """An ISO 8601 instant with its offset (a bare number or a naive time is refused)."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None or not any(c in text for c in "T "):
        raise ValidationFailed(f"{name} must be an ISO 8601 time with an offset", field=name)
    return value


def _retention_schema(schema: dict[str, Any]) -> None:
    """The tables a tenant may set and each one's bounds (``domain.retention`` checks the
    same): an unknown table, or days under the floor, are 422s naming the table."""
    schema.pop("additionalProperties", None)
    schema["properties"] = {
        table: {
            "anyOf": [
                {
                    "type": "integer",
                    "minimum": retention_rules.floor_days(table),
                    "maximum": retention_rules.MAX_DAYS,
                },
                {"type": "null"},
            ]
        }
        for table in retention_rules.TABLES
        if table not in retention_rules.GLOBAL_ONLY
    }
    schema["additionalProperties"] = False


class RetentionChange(RootModel[dict[str, Integer | None]]):
    """``{table: days}``; ``null`` drops that table's override."""

    model_config = ConfigDict(json_schema_extra=_retention_schema)
    root: dict[str, Integer | None] = Field(max_length=50)


def _retention_view(core: CoreDep, tenant_id: str) -> Mapping[str, Any]:
    return {
        "tables": {
            table: {"days": days, "source": origin}
            for table, (days, origin) in retention.periods(core, tenant_id).items()
        }
    }


@router.get("/retention", responses=problems(401, 403, 503))
def get_retention(who: Admin, core: CoreDep) -> Mapping[str, Any]:
    """Each table's retention in days for this tenant, and whether it is the tenant's own
    (``tenant``) or the server's (``default``)."""
    return _retention_view(core, who.tenant_id)


@router.patch("/retention", responses=problems(401, 403, 413, 422, 503))
def patch_retention(body: RetentionChange, who: Admin, core: CoreDep) -> Mapping[str, Any]:
    """Override some tables' retention (days; ``null`` drops an override). Checked whole
    before anything is stored: an unknown table or a period under its floor is a 422."""
    retention.set_override(core, who.tenant_id, body.root)
    return _retention_view(core, who.tenant_id)
