"""Digest rules and the policy dry-run, pure (domain.digests, domain.dry_run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain import digests
from runbell.domain.dry_run import Recorded, facts_of, replay
from runbell.domain.errors import ValidationFailed
from runbell.domain.policy import Facts, Policy

AT = datetime(2026, 12, 1, 10, 42, 17, tzinfo=UTC)


def digest_policy(**rule: Any) -> Policy:
    base = {"id": "d", "when": {"attention": "completed"}, "decision": "digest"}
    return Policy.from_mapping({"rules": [{**base, **rule}]}, base=Policy.default())


def test_a_digest_decision_carries_its_key_window_and_size_with_defaults() -> None:
    d = digest_policy(urgency="low").decide(Facts("completed"))
    assert (d.kind, d.urgency, d.digest_key) == ("digest", "low", "completed")
    assert (d.digest_window_s, d.digest_max_items) == (3600, 50)
    d = digest_policy(digest_key="ci", digest_window_s=60, digest_max_items=5).decide(
        Facts("completed")
    )
    assert (d.kind, d.urgency, d.digest_key, d.digest_window_s, d.digest_max_items) == (
        "digest",
        "low",
        "ci",
        60,
        5,
    )


@pytest.mark.parametrize("urgency", ["time_sensitive", "urgent"])
def test_urgent_and_time_sensitive_attention_never_waits_for_a_digest(urgency: str) -> None:
    d = digest_policy(urgency=urgency).decide(Facts("completed"))
    assert (d.kind, d.urgency, d.rule_id) == ("push", urgency, "d")
    assert d.digest_key is None


def test_the_default_many_quiet_rule_digests() -> None:
    d = Policy.default().decide(Facts("completed", recent_completions=3))
    assert (d.kind, d.rule_id, d.digest_window_s, d.digest_max_items) == (
        "digest",
        "completed.many_quiet",
        3600,
        50,
    )


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"digest_key": "has space"}, "digest_key"),
        ({"digest_key": ""}, "digest_key"),
        ({"digest_key": 7}, "digest_key"),
        ({"digest_window_s": 0}, "digest_window_s"),
        ({"digest_window_s": 8 * 24 * 3600}, "digest_window_s"),
        ({"digest_max_items": 0}, "digest_max_items"),
        ({"digest_max_items": 501}, "digest_max_items"),
        ({"digest_max_items": True}, "digest_max_items"),
    ],
)
def test_bad_digest_settings_are_refused_naming_the_field(rule: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        digest_policy(urgency="low", **rule)
    assert caught.value.extra["field"] == field


@given(
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    st.integers(1, 7 * 24 * 3600),
)
def test_windows_are_aligned_and_hold_their_moment(naive: datetime, window_s: int) -> None:
    now = naive.replace(tzinfo=UTC)
    start, end = digests.window_of(now, window_s)
    assert start <= now < end
    assert end - start == timedelta(seconds=window_s)
    assert digests.window_of(start, window_s) == (start, end)  # the same for every process


def test_digest_texts_say_how_many_never_which() -> None:
    assert digests.summary(["completed"] * 12) == "12 runs finished"
    assert digests.summary(["completed"]) == "1 run finished"
    assert digests.summary(["completed", "cancelled"]) == "2 updates on your runs"
    assert digests.highest(["low", "normal", "low"]) == "normal"
    assert digests.run_id_for("completed") == "digest:completed"


def recorded(run_id: str, facts: Facts, policy: Policy) -> Recorded:
    return Recorded(run_id, 2, AT, policy.decide(facts).as_dict())


def test_replay_reports_both_sides_and_what_changes() -> None:
    current = Policy.default()
    rows = [
        recorded("a", Facts("failed"), current),
        recorded("b", Facts("completed"), current),
        recorded("c", Facts("failed", error_user_action=True), current),
        Recorded("d", 1, AT, None),  # a transition that raised no attention
    ]
    candidate = Policy.from_mapping(
        {"rules": [{"id": "q", "when": {"attention": "failed"}, "decision": "suppress"}]},
        base=Policy.default(),
    )
    report = replay(candidate, rows).as_dict()
    assert (report["replayed"], report["skipped_without_attention"], report["changed"]) == (3, 1, 2)
    assert report["by_decision"] == {
        "inbox": {"current": 1, "candidate": 1},
        "push": {"current": 2, "candidate": 0},
        "suppress": {"current": 0, "candidate": 2},
    }
    assert report["by_attention_type"]["failed"] == {"current": 2, "candidate": 2}
    assert report["by_urgency"]["none"] == {"current": 0, "candidate": 2}
    (first, second) = report["changes"]
    assert first["run_id"] == "a"
    assert first["before"] == {"rule_id": "failed.default", "decision": "push", "urgency": "normal"}
    assert first["after"] == {"rule_id": "q", "decision": "suppress", "urgency": None}
    assert second["before"]["rule_id"] == "failed.needs_repair"


def test_replaying_through_the_same_policy_changes_nothing() -> None:
    policy = Policy.default()
    rows = [
        recorded(f"r{i}", facts, policy)
        for i, facts in enumerate(
            [
                Facts("completed", recent_completions=5),
                Facts("completed", duration_s=1000.0),
                Facts("input_required", has_expiry=True),
                Facts("cancelled", cancelled_by_owner=True),
                Facts("progress"),
            ]
        )
    ]
    report = replay(policy, rows)
    assert (report.replayed, report.changed, report.changes) == (5, 0, [])


def test_recorded_inputs_with_unknown_facts_still_replay() -> None:
    facts = facts_of({"attention": "completed", "notify_on_complete": True, "gone_fact": 1})
    assert facts == Facts("completed", notify_on_complete=True)
