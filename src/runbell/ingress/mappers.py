"""Turn a verified provider webhook payload into zero or more run signals.

A provider webhook (``POST /v1/sources/{source_id}/webhook``, DESIGN §6) arrives in
the provider's own shape. Each source names a mapper that translates that shape into
:class:`MappedSignal` values, which then go through the same dedupe, reconciliation
and state machine as signals posted by a runtime. Mappers are pure functions: no I/O,
no clock, so they are trivially testable and a retried delivery maps identically.

Mappers return a *list* because one provider event may concern zero runs (an event
type Runbell does not track is ignored, not an error — providers send every event
type an endpoint is subscribed to) or, for future providers, several runs.

Malformed payloads raise :class:`ValidationFailed` with ``field`` naming the offending
field (dotted for nested ones, e.g. ``data.id``) so the 422 tells the integrator what
to fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from runbell.domain import limits
from runbell.domain.errors import ValidationFailed
from runbell.domain.records import ReportedError
from runbell.domain.runs import MAX_SEQUENCE, STATE_NAMES

__all__ = [
    "MAPPERS",
    "OPENAI_EVENT_STATES",
    "RUN_STATES",
    "MappedSignal",
    "Mapper",
    "map_generic",
    "map_openai",
]

# The API's limits for the same fields (ids are stored in 200-character columns).
MAX_ID = 200
MAX_TEXT = 500

#: Every run state (DESIGN §3), from the domain state machine.
RUN_STATES: frozenset[str] = frozenset(STATE_NAMES)

#: OpenAI ``response.*`` webhook event type → (Runbell state, reason, effects_verified).
#: ``response.incomplete`` means the response stopped early (e.g. token limit or
#: content filter): it finished, with less than was asked, so it is ``completed`` with
#: ``effects_verified=False`` (a ``needs_review`` alert, never a success) and reason
#: ``incomplete`` — the same thing the ``openai_responses`` reader reads for that status,
#: so the claim and the reader agree.
OPENAI_EVENT_STATES: dict[str, tuple[str, str | None, bool | None]] = {
    "response.completed": ("completed", None, None),
    "response.failed": ("failed", None, None),
    "response.cancelled": ("cancelled", None, None),
    "response.incomplete": ("completed", "incomplete", False),
}


@dataclass(frozen=True)
class MappedSignal:
    """One advisory signal for one run, as a provider reported it.

    ``event_id`` is the dedupe key of the inbound event (unique per source); ``at`` is
    when the provider says the transition happened, always timezone-aware (UTC).
    """

    run_id: str
    state: str
    event_id: str
    sequence: int | None = None
    at: datetime | None = None
    reason: str | None = None
    error: ReportedError | None = None
    effects_verified: bool | None = None


Mapper = Callable[[Any, str], list[MappedSignal]]


def map_generic(payload: Any, webhook_id: str) -> list[MappedSignal]:
    """Map Runbell's own generic webhook shape to one signal.

    Shape: ``{run_id, state, event_id?, sequence?, at?, reason?, error?}`` — the same
    fields as ``POST /v1/runs/{run_id}/signals`` plus ``run_id``, so a runtime that can
    only emit signed webhooks reports exactly what an API client would. ``event_id``
    defaults to the ``webhook-id`` header, which senders keep stable across retries.
    ``at`` is an ISO 8601 timestamp with an offset (or ``Z``), or Unix seconds; a naive
    timestamp is refused because its meaning depends on the sender's machine. Unknown
    extra fields are ignored so senders can add their own.
    """
    body = _require_object(payload, "body")
    run_id = _require_text(body, "run_id")
    state = _require_text(body, "state")
    if state not in RUN_STATES:
        raise ValidationFailed(
            f"state must be one of {', '.join(sorted(RUN_STATES))}; got {_short(state)}",
            field="state",
        )
    event_id = _optional_text(body, "event_id") or _webhook_id(webhook_id)
    sequence = _optional_sequence(body, "sequence")
    at = _optional_instant(body, "at")
    reason = _optional_str(body, "reason")
    error = run_error(body.get("error"))
    return [
        MappedSignal(
            run_id=run_id,
            state=state,
            event_id=event_id,
            sequence=sequence,
            at=at,
            reason=reason,
            error=error,
        )
    ]


def map_openai(payload: Any, webhook_id: str) -> list[MappedSignal]:
    """Map an OpenAI platform webhook event to a signal for the response it concerns.

    Handled: ``response.completed`` → completed, ``response.failed`` → failed,
    ``response.cancelled`` → cancelled, ``response.incomplete`` → completed with
    ``effects_verified=False`` (needs review) and reason ``incomplete``. The run id is
    ``data.id`` (the ``resp_…`` id, which the runtime must use as its Runbell ``run_id``
    for background responses); ``at`` is ``created_at``.

    The dedupe key is the ``webhook-id`` header, which OpenAI documents as the
    idempotency key and keeps stable across redeliveries — not the body's ``id``.

    Ignored (returns ``[]``, answered 2xx so OpenAI does not retry): every other type,
    e.g. ``batch.*``, ``fine_tuning.job.*``, ``eval.run.*``, ``realtime.call.*`` and any
    type OpenAI adds later. An endpoint subscribed to those should not fail. Their
    bodies are not validated, since nothing is read from them.

    The events are thin (no output, no error detail): they say *that* the response
    changed, and the source's state reader confirms *what* it is now.
    """
    body = _require_object(payload, "body")
    event_type = _require_text(body, "type")
    mapped = OPENAI_EVENT_STATES.get(event_type)
    if mapped is None:
        return []
    state, reason, effects_verified = mapped
    data = body.get("data")
    if not isinstance(data, dict):
        raise ValidationFailed("data must be an object", field="data")
    run_id = _require_text(data, "id", prefix="data.")
    created_at = body.get("created_at")
    if isinstance(created_at, bool) or not isinstance(created_at, int):
        raise ValidationFailed("created_at must be Unix seconds (an integer)", field="created_at")
    return [
        MappedSignal(
            run_id=run_id,
            state=state,
            event_id=_webhook_id(webhook_id),
            at=_from_unix(created_at, "created_at"),
            reason=reason,
            effects_verified=effects_verified,
        )
    ]


MAPPERS: dict[str, Mapper] = {"generic": map_generic, "openai": map_openai}


def _require_object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationFailed("payload must be a JSON object", field=field)
    return value


def _require_text(obj: dict[str, Any], name: str, *, prefix: str = "") -> str:
    field = prefix + name
    if name not in obj or obj[name] is None:
        raise ValidationFailed(f"{field} is required", field=field)
    value = obj[name]
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", field=field)
    if not value.strip():
        raise ValidationFailed(f"{field} must not be empty", field=field)
    if len(value) > MAX_ID:
        raise ValidationFailed(f"{field} is at most {MAX_ID} characters", field=field)
    return value


def _optional_text(obj: dict[str, Any], name: str) -> str | None:
    if obj.get(name) is None:
        return None
    return _require_text(obj, name)


def _optional_str(obj: dict[str, Any], name: str) -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise ValidationFailed(f"{name} must be a string", field=name)
    if value is not None and len(value) > MAX_TEXT:
        raise ValidationFailed(f"{name} is at most {MAX_TEXT} characters", field=name)
    return value


def _optional_sequence(obj: dict[str, Any], name: str) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    # bool is an int subclass; ``true`` is never a meaningful sequence number.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(f"{name} must be an integer", field=name)
    if value < 0:
        raise ValidationFailed(f"{name} must not be negative", field=name)
    if value > MAX_SEQUENCE:
        raise ValidationFailed(f"{name} must fit in 64 bits", field=name)
    return value


def _optional_instant(obj: dict[str, Any], name: str) -> datetime | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValidationFailed(f"{name} must be an ISO 8601 timestamp", field=name)
    if isinstance(value, int | float):
        return _from_unix(value, name)
    if not isinstance(value, str):
        raise ValidationFailed(f"{name} must be an ISO 8601 timestamp", field=name)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValidationFailed(f"{name} is not an ISO 8601 timestamp", field=name) from exc
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValidationFailed(
            f"{name} must include a UTC offset (e.g. 'Z' or '+02:00')", field=name
        )
    return parsed.astimezone(UTC)


def _from_unix(value: float, field: str) -> datetime:
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValidationFailed(f"{field} is out of range", field=field) from exc


def _webhook_id(webhook_id: str) -> str:
    # The verified ``webhook-id`` header; signature verification guarantees it is
    # present, but a caller bug passing "" must not create an undeduplicable event.
    if not isinstance(webhook_id, str) or not webhook_id.strip():
        raise ValidationFailed("webhook-id header is required", field="webhook-id")
    if len(webhook_id) > MAX_ID:
        raise ValidationFailed(f"webhook-id is at most {MAX_ID} characters", field="webhook-id")
    return webhook_id


def _short(value: str, limit: int = 64) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")


def run_error(value: object) -> ReportedError | None:
    """A signal's ``error`` as the API's schema takes it: an object whose flags are
    booleans and whose code and message are short strings (other keys ride along)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationFailed("error must be an object", field="error")
    for name in ("retryable", "user_action_required", "data_inconsistent"):
        if not isinstance(value.get(name, False), bool):
            raise ValidationFailed(f"error.{name} must be true or false", field=f"error.{name}")
    for name, limit in (("code", limits.ERROR_CODE), ("message", limits.ERROR_MESSAGE)):
        text = value.get(name)
        if text is not None and (not isinstance(text, str) or len(text) > limit):
            raise ValidationFailed(
                f"error.{name} is a string of at most {limit} characters", field=f"error.{name}"
            )
    return cast(ReportedError, value)  # checked above, key by key
