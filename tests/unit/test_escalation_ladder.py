"""Escalation ladders and the stall threshold as policy data (pure: domain.escalation,
domain.policy)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runbell.domain.errors import ValidationFailed
from runbell.domain.escalation import Step, held_back, parse_ladder, schedule
from runbell.domain.policy import DEFAULT_STALL_AFTER_S, Facts, Policy

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_a_ladder_parses_in_order_and_schedules_from_creation() -> None:
    ladder = parse_ladder(
        [{"after_s": 120, "channel": "chat"}, {"after_s": 600, "channel": "email"}], "r"
    )
    assert ladder == (Step(120, "chat"), Step(600, "email"))
    assert schedule(ladder, T0) == [
        (1, Step(120, "chat"), T0 + timedelta(minutes=2)),
        (2, Step(600, "email"), T0 + timedelta(minutes=10)),
    ]
    assert held_back(ladder) == {"chat", "email"}
    assert parse_ladder(None, "r") == () and held_back(()) == frozenset()


@pytest.mark.parametrize(
    "raw",
    [
        "chat",
        [{"after_s": 0, "channel": "chat"}],
        [{"after_s": True, "channel": "chat"}],
        [{"after_s": 1.5, "channel": "chat"}],
        [{"after_s": 8 * 86_400, "channel": "chat"}],
        [{"after_s": 60, "channel": "sms"}],
        [{"after_s": 60}],
        [{"after_s": 60, "channel": "chat", "to": "boss"}],
        [{"after_s": 60, "channel": "chat"}, {"after_s": 60, "channel": "email"}],
        [{"after_s": 60, "channel": "chat"}, {"after_s": 120, "channel": "chat"}],
        [{"after_s": i + 1, "channel": "chat"} for i in range(6)],
    ],
)
def test_a_bad_ladder_is_refused_naming_the_field(raw: Any) -> None:
    with pytest.raises(ValidationFailed) as err:
        parse_ladder(raw, "acme.r")
    assert err.value.extra["field"] == "escalation"
    assert "acme.r" in str(err.value)


def test_the_ladder_is_carried_on_the_decision_of_its_rule() -> None:
    doc = {
        "rules": [
            {
                "id": "acme.failed",
                "when": {"attention": "failed"},
                "decision": "push",
                "urgency": "normal",
                "escalation": [{"after_s": 120, "channel": "chat"}],
            }
        ]
    }
    policy = Policy.from_mapping(doc, base=Policy.default())
    decision = policy.decide(Facts(attention="failed"))
    assert decision.rule_id == "acme.failed"
    assert decision.escalation == (Step(120, "chat"),)
    assert list(decision.as_dict()["escalation"]) == [{"after_s": 120, "channel": "chat"}]
    # No default rule has a ladder (docs/policy.md says why).
    assert all(r.escalation == () for r in Policy.default().rules)


def test_the_stall_threshold_is_policy_data_with_a_default() -> None:
    assert Policy.default().stall_after_s == DEFAULT_STALL_AFTER_S == 900
    assert Policy.from_mapping({"stall_after_seconds": 5}).stall_after_s == 5
    assert Policy.from_mapping({"stall_after_seconds": 0}).stall_after_s == 0
    assert Policy.from_mapping({"stall_after_seconds": None}).stall_after_s == 900
    for bad in (-1, 1.5, True, "60"):
        with pytest.raises(ValidationFailed) as err:
            Policy.from_mapping({"stall_after_seconds": bad})
        assert err.value.extra["field"] == "stall_after_seconds"
    stalled = Policy.default().decide(Facts(attention="stalled"))
    assert (stalled.rule_id, stalled.kind, stalled.urgency) == ("stalled.default", "push", "normal")
