"""Provider payload mappers: OpenAI response events and the generic Runbell shape."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.errors import ValidationFailed
from runbell.ingress.mappers import (
    MAPPERS,
    MAX_ID,
    RUN_STATES,
    MappedSignal,
    map_generic,
    map_openai,
)

CREATED = 1_750_000_000
WEBHOOK_ID = "wh_685342e6c53c8190a1be43f081506c52"


def openai_event(event_type: str, **overrides):
    event = {
        "id": "evt_685343a1381c819085d44c354e1b330e",
        "object": "event",
        "type": event_type,
        "created_at": CREATED,
        "data": {"id": "resp_abc123"},
    }
    event.update(overrides)
    return event


@pytest.mark.parametrize(
    ("event_type", "state", "reason", "effects_verified"),
    [
        ("response.completed", "completed", None, None),
        ("response.failed", "failed", None, None),
        ("response.cancelled", "cancelled", None, None),
        # It stopped early: finished with less than asked, a review (never a success).
        ("response.incomplete", "completed", "incomplete", False),
    ],
)
def test_openai_response_events(event_type, state, reason, effects_verified):
    assert map_openai(openai_event(event_type), WEBHOOK_ID) == [
        MappedSignal(
            run_id="resp_abc123",
            state=state,
            event_id=WEBHOOK_ID,
            sequence=None,
            at=datetime.fromtimestamp(CREATED, tz=UTC),
            reason=reason,
            error=None,
            effects_verified=effects_verified,
        )
    ]


def test_openai_dedupe_key_is_the_webhook_id_not_the_body_id():
    (signal,) = map_openai(openai_event("response.completed"), WEBHOOK_ID)
    assert signal.event_id == WEBHOOK_ID
    assert signal.at is not None and signal.at.tzinfo is not None


@pytest.mark.parametrize(
    "event_type",
    [
        "batch.completed",
        "batch.failed",
        "fine_tuning.job.succeeded",
        "fine_tuning.job.failed",
        "eval.run.succeeded",
        "eval.run.failed",
        "realtime.call.incoming",
        "response.created",
        "something.new.from.openai",
    ],
)
def test_openai_other_event_types_are_ignored(event_type):
    assert map_openai(openai_event(event_type), WEBHOOK_ID) == []


def test_openai_ignored_types_are_not_validated():
    # Nothing is read from them, so an unfamiliar body shape must not fail the request.
    assert map_openai({"type": "batch.completed", "data": "whatever"}, WEBHOOK_ID) == []


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([], "body"),
        ("response.completed", "body"),
        (None, "body"),
        ({"created_at": CREATED, "data": {"id": "resp_1"}}, "type"),
        (openai_event("response.completed", type=7), "type"),
        (openai_event("response.completed", type=""), "type"),
        (openai_event("response.completed", data=None), "data"),
        (openai_event("response.completed", data=["resp_1"]), "data"),
        (openai_event("response.completed", data={}), "data.id"),
        (openai_event("response.completed", data={"id": 12}), "data.id"),
        (openai_event("response.completed", data={"id": "  "}), "data.id"),
        (openai_event("response.failed", created_at="yesterday"), "created_at"),
        (openai_event("response.failed", created_at=True), "created_at"),
        (openai_event("response.failed", created_at=10**20), "created_at"),
        ({"type": "response.cancelled", "data": {"id": "resp_1"}}, "created_at"),
    ],
)
def test_openai_malformed_payload_names_the_field(payload, field):
    with pytest.raises(ValidationFailed) as info:
        map_openai(payload, WEBHOOK_ID)
    assert info.value.extra["field"] == field
    assert info.value.status == 422


def test_generic_without_event_id_uses_the_webhook_id():
    assert map_generic({"run_id": "run-7", "state": "working"}, "msg_9") == [
        MappedSignal(run_id="run-7", state="working", event_id="msg_9")
    ]


def test_generic_with_all_fields():
    payload = {
        "run_id": "run-7",
        "state": "failed",
        "event_id": "evt-42",
        "sequence": 12,
        "at": "2025-06-01T14:00:00+02:00",
        "reason": "tests failed",
        "error": {"code": "E_TEST", "message": "3 failures"},
        "extra": "ignored",
    }
    assert map_generic(payload, "msg_9") == [
        MappedSignal(
            run_id="run-7",
            state="failed",
            event_id="evt-42",
            sequence=12,
            at=datetime(2025, 6, 1, 12, 0, tzinfo=UTC),
            reason="tests failed",
            error={"code": "E_TEST", "message": "3 failures"},
        )
    ]


def test_generic_accepts_z_suffix_and_unix_seconds():
    (iso,) = map_generic({"run_id": "r", "state": "queued", "at": "2025-06-01T12:00:00Z"}, "m")
    (unix,) = map_generic({"run_id": "r", "state": "queued", "at": 1748779200}, "m")
    assert iso.at == unix.at == datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def test_generic_null_optionals_are_absent():
    payload = {
        "run_id": "r",
        "state": "completed",
        "event_id": None,
        "sequence": None,
        "at": None,
        "reason": None,
        "error": None,
    }
    assert map_generic(payload, "m") == [MappedSignal(run_id="r", state="completed", event_id="m")]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (["run_id"], "body"),
        ({"state": "completed"}, "run_id"),
        ({"run_id": 5, "state": "completed"}, "run_id"),
        ({"run_id": "", "state": "completed"}, "run_id"),
        ({"run_id": "r"}, "state"),
        ({"run_id": "r", "state": "done"}, "state"),
        ({"run_id": "r", "state": "COMPLETED"}, "state"),
        ({"run_id": "r", "state": ["completed"]}, "state"),
        ({"run_id": "r", "state": "completed", "event_id": 3}, "event_id"),
        ({"run_id": "r", "state": "completed", "event_id": ""}, "event_id"),
        ({"run_id": "r", "state": "completed", "sequence": "3"}, "sequence"),
        ({"run_id": "r", "state": "completed", "sequence": 1.5}, "sequence"),
        ({"run_id": "r", "state": "completed", "sequence": True}, "sequence"),
        ({"run_id": "r", "state": "completed", "sequence": -1}, "sequence"),
        ({"run_id": "r", "state": "completed", "at": "soon"}, "at"),
        ({"run_id": "r", "state": "completed", "at": "2025-06-01T12:00:00"}, "at"),
        ({"run_id": "r", "state": "completed", "at": {"ts": 1}}, "at"),
        ({"run_id": "r", "state": "completed", "at": False}, "at"),
        ({"run_id": "r", "state": "completed", "at": float("nan")}, "at"),
        ({"run_id": "r", "state": "completed", "reason": 404}, "reason"),
        ({"run_id": "r", "state": "completed", "error": "boom"}, "error"),
    ],
)
def test_generic_malformed_payload_names_the_field(payload, field):
    with pytest.raises(ValidationFailed) as info:
        map_generic(payload, "msg_1")
    assert info.value.extra["field"] == field


def test_generic_state_error_lists_the_valid_states():
    with pytest.raises(ValidationFailed, match="input_required") as info:
        map_generic({"run_id": "r", "state": "running"}, "m")
    assert "'running'" in info.value.detail


def test_missing_webhook_id_is_refused_rather_than_undeduplicable():
    with pytest.raises(ValidationFailed):
        map_generic({"run_id": "r", "state": "completed"}, "")
    with pytest.raises(ValidationFailed):
        map_openai(openai_event("response.completed"), "")


def test_mapper_registry():
    assert {"generic": map_generic, "openai": map_openai} == MAPPERS


@given(
    # Within the API's limits (longer ids are refused: the test below).
    run_id=st.text(min_size=1, max_size=MAX_ID).filter(str.strip),
    state=st.sampled_from(sorted(RUN_STATES)),
    sequence=st.none() | st.integers(min_value=0, max_value=2**63 - 1),
    event_id=st.none() | st.text(min_size=1, max_size=MAX_ID).filter(str.strip),
)
def test_generic_round_trip(run_id, state, sequence, event_id):
    payload = {"run_id": run_id, "state": state, "sequence": sequence, "event_id": event_id}
    (signal,) = map_generic(payload, "fallback")
    assert (signal.run_id, signal.state, signal.sequence) == (run_id, state, sequence)
    assert signal.event_id == (event_id if event_id is not None else "fallback")


def test_generic_sequence_beyond_64_bits_names_the_field() -> None:
    """A sequence the database cannot store is a 422 on `sequence`, never a 500."""
    with pytest.raises(ValidationFailed) as err:
        map_generic({"run_id": "r", "state": "working", "sequence": 2**63}, "msg_1")
    assert err.value.extra["field"] == "sequence"


def test_generic_ids_and_texts_keep_the_api_limits() -> None:
    """A provider cannot store what the API would refuse: long ids and reasons are 422."""
    with pytest.raises(ValidationFailed) as err:
        map_generic({"run_id": "r", "state": "working", "event_id": "e" * 201}, "msg_1")
    assert err.value.extra["field"] == "event_id"
    with pytest.raises(ValidationFailed) as err:
        map_generic({"run_id": "r", "state": "failed", "reason": "x" * 501}, "msg_1")
    assert err.value.extra["field"] == "reason"


@pytest.mark.parametrize(
    ("error", "field"),
    [
        ({"retryable": "no"}, "error.retryable"),  # bool("no") would have been True
        ({"user_action_required": 1}, "error.user_action_required"),
        ({"code": 7}, "error.code"),
        ({"message": "x" * 2001}, "error.message"),
        (["not", "an", "object"], "error"),
    ],
)
def test_a_webhook_error_is_checked_as_the_api_checks_it(error: object, field: str) -> None:
    with pytest.raises(ValidationFailed) as err:
        map_generic({"run_id": "r", "state": "failed", "error": error}, "msg_1")
    assert err.value.extra["field"] == field


def test_a_webhook_error_keeps_the_keys_it_brings() -> None:
    error = {"code": "E1", "retryable": True, "hint": "rebase first"}
    (signal,) = map_generic({"run_id": "r", "state": "failed", "error": error}, "msg_1")
    assert signal.error == error
