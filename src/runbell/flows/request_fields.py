"""An input request's body, checked (:func:`checked`): what it asks, how, until when, what
approving lets happen (``action``, with the risks flagged in it), what the person may edit
(``editable``) and whether a callback URL comes with it. Also for callers that skip the
API's schema (the web app, MCP in process). :mod:`runbell.flows.input_requests` opens it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypedDict

from runbell.domain import actions, editable
from runbell.domain.errors import ValidationFailed
from runbell.flows import approvers, machine_answers
from runbell.flows.inputs import RequestBody

KINDS = ("approval", "choice", "text")
MAX_OPTIONS = 50


class RequestFields(TypedDict):
    """An open request's body, checked: what it asks, how, and until when."""

    id: str
    kind: str
    summary: str
    details: dict[str, Any] | None
    options: list[dict[str, str]] | None  # [{id, label}] of a choice
    blocks_work: bool
    expires_at: datetime | None
    approvers: list[str] | None  # as given (ids or emails); resolved against the run
    action: dict[str, Any] | None  # checked (domain.actions), as stored
    risks: list[dict[str, str]] | None  # what the classifier flagged in the action
    editable: dict[str, Any] | None  # {schema, value}, checked (domain.editable)
    callback: list[str] | None  # the decisions a callback URL minted with it may give


def checked(body: RequestBody) -> RequestFields:
    """Validate an open request's body (also for callers that skip the API schema)."""
    request_id = body.get("input_request_id")
    if not isinstance(request_id, str) or not 1 <= len(request_id) <= 200:
        raise ValidationFailed("input_request_id is 1 to 200 characters", field="input_request_id")
    kind = body.get("kind")
    if kind not in KINDS:
        raise ValidationFailed(f"kind must be one of {', '.join(KINDS)}", field="kind")
    summary = body.get("summary")
    if not isinstance(summary, str) or not summary.strip() or len(summary) > 300:
        raise ValidationFailed("summary is 1 to 300 characters", field="summary")
    details = body.get("details")
    if details is not None and not isinstance(details, dict):
        raise ValidationFailed("details must be an object", field="details")
    options: list[dict[str, Any]] = [dict(o) for o in body.get("options") or []]
    if kind == "choice":
        ids = [o.get("id") for o in options]
        if len(options) < 2:
            raise ValidationFailed("a choice needs at least 2 options", field="options")
        if len(set(ids)) != len(ids):
            raise ValidationFailed("option ids must be unique", field="options")
        if len(options) > MAX_OPTIONS:
            raise ValidationFailed(f"at most {MAX_OPTIONS} options", field="options")
        for o in options:
            if not isinstance(o.get("id"), str) or not isinstance(o.get("label"), str):
                raise ValidationFailed("each option is {id, label} strings", field="options")
    elif options:
        raise ValidationFailed(f"options are for kind choice, not {kind}", field="options")
    expires_at = body.get("expires_at")
    if isinstance(expires_at, str):
        try:
            expires_at = datetime.fromisoformat(expires_at)
        except ValueError as exc:
            raise ValidationFailed("expires_at is not a timestamp", field="expires_at") from exc
    if expires_at is not None:
        if not isinstance(expires_at, datetime):
            raise ValidationFailed("expires_at is not a timestamp", field="expires_at")
        if expires_at.tzinfo is None:
            raise ValidationFailed(
                "expires_at must carry a timezone offset (e.g. Z)", field="expires_at"
            )
        expires_at = expires_at.astimezone(UTC)
    # The action, checked, and the risks flagged in it now (kept with it, so the page shows
    # what was flagged when the person was asked). Advice only: nothing is answered
    # because of them.
    action: dict[str, Any] | None = None
    risks: list[dict[str, str]] | None = None
    raw_action = body.get("action")
    if raw_action is not None:
        if isinstance(raw_action, dict):  # a face's model dump names unset fields as None
            raw_action = {k: v for k, v in raw_action.items() if v is not None}
        try:
            checked = actions.parse_action(raw_action)
        except actions.ActionInvalid as exc:
            raise ValidationFailed(str(exc), field=exc.field) from exc
        action = actions.action_json(checked)
        risks = [r.to_json() for r in actions.risks(checked)]
    offered = _editable(body.get("editable"), kind)
    return {
        "id": request_id,
        "kind": kind,
        "summary": summary,
        "details": details,
        "action": action,
        "risks": risks,
        "options": [{"id": o["id"], "label": o["label"]} for o in options] or None,
        "blocks_work": bool(body.get("blocks_work", True)),
        "expires_at": expires_at,
        "approvers": approvers.refs(body.get("approvers")),
        "editable": None if offered is None else offered.as_json(),
        "callback": machine_answers.parse_callback(body.get("callback"), kind),
    }


def _editable(given: object, kind: str) -> editable.Editable | None:
    """A checked ``editable`` (only an approval offers a value to edit), or None."""
    spec = editable.parse_spec(given)
    if spec is None:
        return None
    if kind != "approval":
        raise ValidationFailed(f"editable is for kind approval, not {kind}", field="editable")
    return spec
