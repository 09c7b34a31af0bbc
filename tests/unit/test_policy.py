"""The attention policy: deterministic, rules as data, every decision names its rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.errors import ValidationFailed
from runbell.domain.policy import Facts, Policy


@pytest.mark.parametrize(
    ("facts", "kind", "urgency", "rule"),
    [
        (Facts("progress"), "live", None, "progress.live"),
        (
            Facts("input_required", has_expiry=True),
            "push",
            "time_sensitive",
            "input_required.blocking_expiring",
        ),
        (Facts("input_required"), "push", "normal", "input_required.default"),
        (Facts("failed", error_retryable=True), "suppress", None, "failed.self_retrying"),
        (Facts("failed", error_user_action=True), "push", "urgent", "failed.needs_repair"),
        (Facts("failed", data_inconsistent=True), "push", "urgent", "failed.data_inconsistent"),
        (Facts("failed"), "push", "normal", "failed.default"),
        (Facts("needs_review"), "push", "normal", "needs_review.default"),
        (
            Facts("completed", notify_on_complete=True, owner_present=True),
            "inbox",
            "low",
            "completed.owner_present",
        ),
        (Facts("completed", notify_on_complete=True), "push", "normal", "completed.requested"),
        (Facts("completed", duration_s=3600), "push", "normal", "completed.long_running"),
        (Facts("completed", recent_completions=5), "digest", "low", "completed.many_quiet"),
        (Facts("completed"), "inbox", "low", "completed.default"),
        (Facts("stalled"), "push", "normal", "stalled.default"),
        (Facts("cancelled", cancelled_by_owner=True), "inbox", "low", "cancelled.by_owner"),
        (Facts("cancelled"), "push", "normal", "cancelled.default"),
        (Facts("mismatch"), "push", "normal", "mismatch.default"),
    ],
)
def test_default_rules(facts: Facts, kind: str, urgency: str | None, rule: str) -> None:
    """DESIGN §7, rule by rule."""
    decision = Policy.default().decide(facts)
    assert (decision.kind, decision.urgency, decision.rule_id) == (kind, urgency, rule)
    assert decision.inputs["attention"] == facts.attention


@given(
    st.builds(
        Facts,
        attention=st.sampled_from(
            [
                "input_required",
                "failed",
                "completed",
                "needs_review",
                "stalled",
                "cancelled",
                "mismatch",
                "progress",
            ]
        ),
    )
)
def test_decisions_are_deterministic_and_explained(facts: Facts) -> None:
    """Same facts, same decision; progress never pushes (invariant 5)."""
    a, b = Policy.default().decide(facts), Policy.default().decide(facts)
    assert a == b
    assert a.rule_id
    if facts.attention == "progress":
        assert a.kind == "live"


def test_tenant_rules_come_first_and_keep_the_defaults() -> None:
    """A tenant file overrides one case without losing the rest."""
    policy = Policy.from_toml(
        """
        [[rule]]
        id = "acme.completed_urgent"
        when = { attention = "completed" }
        decision = "push"
        urgency = "urgent"
        """,
        base=Policy.default(),
    )
    assert policy.decide(Facts("completed")).rule_id == "acme.completed_urgent"
    assert policy.decide(Facts("failed")).rule_id == "failed.default"


def test_replace_defaults_leaves_a_safe_fallback() -> None:
    """With the defaults replaced, an unmatched transition still lands in the inbox."""
    policy = Policy.from_toml(
        'replace_defaults = true\n[[rule]]\nid = "only"\nwhen = {attention = "failed"}\n'
        'decision = "suppress"\n',
        base=Policy.default(),
    )
    decision = policy.decide(Facts("completed"))
    assert (decision.kind, decision.rule_id) == ("inbox", "builtin.no_rule_matched")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[[rule]]\nid = "x"\ndecision = "shout"\n', "decision"),
        ('[[rule]]\nid = "x"\ndecision = "push"\n', "urgency"),
        ('[[rule]]\nid = "x"\ndecision = "inbox"\nwhen = { colour = "red" }\n', "when"),
        ('[[rule]]\ndecision = "inbox"\n', "id"),
        ('[[rule]]\nid = "x"\ndecision = "inbox"\nwhen = { duration_s = { about = 3 } }\n', "when"),
        ("not toml at all [", "policy"),
    ],
)
def test_bad_rule_files_are_refused_with_the_field(text: str, field: str) -> None:
    """A broken policy file is rejected whole, naming what is wrong."""
    with pytest.raises(ValidationFailed) as err:
        Policy.from_toml(text, base=Policy.default())
    assert err.value.extra["field"] == field
