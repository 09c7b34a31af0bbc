"""schemathesis hooks for ``test_schemathesis.py`` (loaded with ``SCHEMATHESIS_HOOKS``).

Some rules of the API cannot be said in JSON Schema: they depend on stored state (is
this person a member? was this Idempotency-Key used for another request?), on the
operator's settings or DNS (the SSRF guard), or they compare two values (``since``
before ``until``). The OpenAPI document declares each of them in the operation's
``x-runbell-rules`` (``{field, problem, rule}``); these hooks honour that declaration
and nothing else:

- ``map_case`` makes a *positive* (schema-valid) case also satisfy the state rules it can
  know of: a fresh Idempotency-Key per case, the tenant's member as ``owner`` and in
  ``authority.users`` (``RUNBELL_SCHEMATHESIS_MEMBER``), a new source name, distinct
  option ids, and a ``since`` inside the dry-run window. Negative cases are never
  touched, so no invalid case becomes valid.
- ``filter_failure`` forgives one thing only: a ``positive_data_acceptance`` failure
  (ST202) whose answer is a 422 problem that the operation's ``x-runbell-rules`` declare,
  i.e. the problem ``type`` is the rule's and the ``field`` it names matches the rule's
  (``*`` stands for an index). Every other check, and every other answer of that check
  (another field, status or problem type), still fails the run.
"""

from __future__ import annotations

import fnmatch
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis
from schemathesis.generation import GenerationMode

PROBLEM_BASE = "https://runbell.dev/problems/"
DRY_RUN_MAX = timedelta(days=92)


def declared_rule_answer(operation: dict[str, Any], status: int, body: bytes | str) -> bool:
    """True when a 422 ``body`` is one that ``operation``'s ``x-runbell-rules`` declare."""
    rules = operation.get("x-runbell-rules") or []
    if status != 422 or not rules:
        return False
    try:
        problem = json.loads(body)
    except ValueError:
        return False
    if not isinstance(problem, dict):
        return False
    slug = str(problem.get("type", "")).removeprefix(PROBLEM_BASE)
    field = str(problem.get("field", ""))
    for rule in rules:
        if rule.get("problem") != slug:
            continue
        # The SSRF guard's problem names its rule, not a field: the declared rule is on
        # the operation's URL field.
        if slug == "unsafe-destination" or fnmatch.fnmatchcase(field, rule["field"]):
            return True
    return False


def _positive(case: Any) -> bool:
    meta = getattr(case, "meta", None)
    return meta is not None and meta.generation.mode == GenerationMode.POSITIVE


def _instant(text: Any) -> datetime | None:
    try:
        value = datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return value if value is not None and value.tzinfo is not None else None


@schemathesis.hook
def map_case(ctx: Any, case: Any) -> Any:
    if not _positive(case):
        return case
    headers = case.headers or {}
    if "Idempotency-Key" in headers:
        headers["Idempotency-Key"] = uuid.uuid4().hex
    member = os.environ.get("RUNBELL_SCHEMATHESIS_MEMBER")
    body = case.body
    if member and isinstance(body, dict) and case.operation.path == "/v1/runs/{run_id}":
        if isinstance(body.get("owner"), str):
            body["owner"] = member
        authority = body.get("authority")
        if isinstance(authority, dict) and isinstance(authority.get("users"), list):
            authority["users"] = [member for _ in authority["users"]][:1]
    sources = case.operation.path == "/v1/sources"
    if sources and isinstance(body, dict) and isinstance(body.get("name"), str):
        body["name"] = f"src-{uuid.uuid4().hex[:12]}"
    if isinstance(body, dict) and isinstance(body.get("options"), list):
        ids = [o.get("id") for o in body["options"] if isinstance(o, dict)]
        if len(set(ids)) != len(ids):  # option ids are unique within a request
            for i, option in enumerate(body["options"]):
                option["id"] = f"o{i}"
    query = case.query
    if case.operation.path == "/v1/policy/dry-run" and isinstance(query, dict):
        until = _instant(query.get("until")) or datetime.now(UTC)
        since = _instant(query.get("since"))
        if since is not None and not (until - DRY_RUN_MAX < since < until):
            query["since"] = (until - timedelta(hours=1)).isoformat()
    return case


@schemathesis.hook
def filter_failure(ctx: Any, failure: Any, case: Any, response: Any) -> bool:
    if "positive_data_acceptance" not in getattr(failure, "checks", ()):
        return True
    raw = case.operation.definition.raw
    if not declared_rule_answer(raw, response.status_code, response.content):
        return True
    forgiven = os.environ.get("RUNBELL_SCHEMATHESIS_FORGIVEN")
    if forgiven:  # for review: which declared rules answered, and how often
        with open(forgiven, "a", encoding="utf-8") as out:
            problem = json.loads(response.content)
            out.write(f"{case.operation.label}\t{problem.get('field')}\t{problem['type']}\n")
    return False
