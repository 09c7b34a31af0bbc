"""The pure parts of throttles and scheduled digests (issue 19 item 5)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runbell.domain.digest_schedule import DigestSchedule
from runbell.domain.errors import ValidationFailed
from runbell.domain.notify_throttle import Throttle, key_value, over, parse_throttle, reason, span
from runbell.domain.policy import Facts, Policy

BERLIN = "Europe/Berlin"


def test_a_throttle_parses_with_defaults_and_refuses_what_it_cannot_count() -> None:
    assert parse_throttle(None, "r") is None
    assert parse_throttle({"limit": 5}, "r") == Throttle(5, 3600, "run", "digest")
    assert parse_throttle(
        {"limit": 2.0, "window_s": 60.0, "key": "agent", "then": "inbox"}, "r"
    ) == (Throttle(2, 60, "agent", "inbox"))
    for bad, field in (
        ([], "throttle"),
        ({"limit": 0}, "throttle.limit"),
        ({"limit": True}, "throttle.limit"),
        ({"limit": 1001}, "throttle.limit"),
        ({"limit": 1, "window_s": 8 * 86400}, "throttle.window_s"),
        ({"limit": 1, "key": "moon"}, "throttle.key"),
        ({"limit": 1, "then": "sms"}, "throttle.then"),
        ({"limit": 1, "every": 1}, "throttle"),
    ):
        with pytest.raises(ValidationFailed) as err:
            parse_throttle(bad, "r")
        assert err.value.extra["field"] == field


def test_key_values_and_the_reason_a_trail_gives() -> None:
    args = {"run_id": "r1", "agent": None, "kind": "ci", "attention": "failed"}
    assert [
        key_value(k, **args) for k in ("run", "agent", "kind", "attention_type", "recipient")
    ] == [
        "r1",
        "-",
        "ci",
        "failed",
        "-",
    ]
    assert [span(s) for s in (3600, 900, 86400, 172800, 90)] == [
        "1 h",
        "15 min",
        "1 day",
        "2 days",
        "90 s",
    ]
    t = Throttle(5)
    assert not over(t, 5) and over(t, 6)
    assert reason(t) == "throttled: 5 in this 1 h window for this run; folded into the digest"
    assert reason(Throttle(1, 60, "recipient", "inbox")) == (
        "throttled: 1 in this 1 min window for this person; kept in the inbox only"
    )


def test_a_throttled_push_carries_its_rule_digest_settings_and_only_pushes_throttle() -> None:
    doc = {
        "rules": [
            {
                "id": "a",
                "when": {"attention": "failed"},
                "decision": "push",
                "urgency": "normal",
                "throttle": {"limit": 3},
                "digest_key": "fails",
                "digest_at": "08:30",
            },
            {
                "id": "b",
                "when": {"attention": "completed"},
                "decision": "digest",
                "urgency": "urgent",
                "throttle": {"limit": 3},
            },
        ]
    }
    policy = Policy.from_mapping(doc, base=Policy.default())
    d = policy.decide(Facts(attention="failed"))
    assert (d.kind, d.throttle, d.digest_key) == ("push", Throttle(3), "fails")
    assert d.as_dict()["digest_schedule"] == {"at": "08:30", "days": None}
    urgent = policy.decide(Facts(attention="completed"))  # an urgent digest is a push
    assert (urgent.kind, urgent.throttle) == ("push", Throttle(3))
    assert Policy.default().decide(Facts(attention="failed")).throttle is None
    with pytest.raises(ValidationFailed):
        Policy.from_mapping({"rules": [{"id": "c", "decision": "live", "throttle": {"limit": 1}}]})


@pytest.mark.parametrize(
    ("now", "start", "end"),
    [
        # The day before the spring change: 09:00 CET is 08:00 UTC.
        (
            datetime(2026, 3, 28, 12, 0, tzinfo=UTC),
            datetime(2026, 3, 28, 8, 0, tzinfo=UTC),
            datetime(2026, 3, 29, 7, 0, tzinfo=UTC),
        ),
        # The day of it and after: 09:00 CEST is 07:00 UTC.
        (
            datetime(2026, 3, 29, 7, 0, tzinfo=UTC),
            datetime(2026, 3, 29, 7, 0, tzinfo=UTC),
            datetime(2026, 3, 30, 7, 0, tzinfo=UTC),
        ),
        # Autumn: 25 October 2026 goes back to CET.
        (
            datetime(2026, 10, 24, 20, 0, tzinfo=UTC),
            datetime(2026, 10, 24, 7, 0, tzinfo=UTC),
            datetime(2026, 10, 25, 8, 0, tzinfo=UTC),
        ),
        # Just before 09:00: the window started yesterday.
        (
            datetime(2026, 1, 5, 7, 59, tzinfo=UTC),
            datetime(2026, 1, 4, 8, 0, tzinfo=UTC),
            datetime(2026, 1, 5, 8, 0, tzinfo=UTC),
        ),
    ],
)
def test_a_daily_schedule_windows_run_from_one_local_nine_to_the_next(
    now: datetime, start: datetime, end: datetime
) -> None:
    assert DigestSchedule.parse("09:00", None, "r").window(now, BERLIN) == (start, end)


def test_weekdays_and_a_time_a_dst_change_skips() -> None:
    mondays = DigestSchedule.parse("9:00", [0], "r")
    wednesday = datetime(2026, 1, 7, 12, 0, tzinfo=UTC)
    start, end = mondays.window(wednesday, "UTC")
    assert (start, end) == (
        datetime(2026, 1, 5, 9, 0, tzinfo=UTC),
        datetime(2026, 1, 12, 9, 0, tzinfo=UTC),
    )
    # 02:30 does not exist in Berlin on 29 March 2026: read with the winter offset (01:30 UTC).
    night = DigestSchedule.parse("02:30", None, "r")
    _, end = night.window(datetime(2026, 3, 28, 12, 0, tzinfo=UTC), BERLIN)
    assert end == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    for at, days, field in (
        ("9", None, "digest_at"),
        (900, None, "digest_at"),
        ("09:00", [], "digest_days"),
        ("09:00", [True], "digest_days"),
        ("09:00", "mon", "digest_days"),
    ):
        with pytest.raises(ValidationFailed) as err:
            DigestSchedule.parse(at, days, "r")
        assert err.value.extra["field"] == field


def test_every_toml_rule_in_docs_policy_is_a_valid_policy() -> None:
    """docs/policy.md's ```toml examples are files, never run by the docs test: each is
    parsed and validated here as `runbell tenant policy` would (its sh block stores one)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text()
    blocks = re.findall(r"^```toml\n(.*?)^```", text, flags=re.S | re.M)
    assert len(blocks) >= 6
    for block in blocks:
        Policy.from_toml(block, base=Policy.default())
    # The throttle and schedule examples say what the prose says they do.
    assert any("throttle = {" in b for b in blocks) and any("digest_at" in b for b in blocks)
