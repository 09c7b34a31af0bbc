"""The pure part of fallback on failure (issue 18 item 10): a rule's ``fallback`` value,
and which pending rung a failed channel falls back to."""

from __future__ import annotations

import pytest

from runbell.domain.errors import ValidationFailed
from runbell.domain.escalation import Fallback, Step, choose_fallback, parse_fallback
from runbell.domain.policy import Facts, Policy

LADDER = (Step(120, "chat"), Step(600, "email"))


def test_fallback_values() -> None:
    assert parse_fallback(None, "r", LADDER) is None
    assert parse_fallback(False, "r", LADDER) is None
    assert parse_fallback(True, "r", LADDER) == Fallback()
    assert parse_fallback({"unknown_after_s": 300}, "r", LADDER) == Fallback(300)
    assert parse_fallback({"unknown_after_s": 300.0}, "r", LADDER) == Fallback(300)


@pytest.mark.parametrize(
    "raw",
    ["yes", 1, {"unknown_after_s": 0}, {"unknown_after_s": True}, {"after_s": 5}, []],
)
def test_bad_fallback_values_are_refused(raw: object) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_fallback(raw, "r", LADDER)
    assert caught.value.extra["field"] == "fallback"


def test_a_fallback_needs_a_ladder() -> None:
    with pytest.raises(ValidationFailed, match="needs an escalation ladder"):
        parse_fallback(True, "r", ())


def test_the_decision_carries_the_rules_fallback() -> None:
    policy = Policy.from_mapping(
        {
            "rules": [
                {
                    "id": "f",
                    "when": {"attention": "failed"},
                    "decision": "push",
                    "urgency": "normal",
                    "escalation": [{"after_s": 600, "channel": "email"}],
                    "fallback": {"unknown_after_s": 60},
                }
            ]
        },
        base=Policy.default(),
    )
    decision = policy.decide(Facts(attention="failed"))
    assert decision.fallback == Fallback(60)
    assert decision.as_dict()["fallback"] == {"unknown_after_s": 60}
    assert Policy.default().decide(Facts(attention="failed")).fallback is None


def test_the_first_usable_rung_on_another_channel_is_chosen() -> None:
    pending = [(2, "email"), (1, "chat")]
    # Chat first in the ladder, but the person has no chat destination: email.
    got = choose_fallback("webpush", "failed", pending, {"email"})
    assert got is not None
    assert (got.step_no, got.channel) == (2, "email")
    assert got.reason == "web push failed permanently; fell back to email"
    got = choose_fallback("webpush", "dead", pending, {"chat", "email"})
    assert got is not None and (got.channel, got.reason) == (
        "chat",
        "web push gave up after its retries; fell back to chat",
    )
    # The failed channel itself is never the fallback; nothing usable: none.
    assert choose_fallback("email", "failed", [(1, "email")], {"email"}) is None
    assert choose_fallback("webpush", "failed", pending, set()) is None
