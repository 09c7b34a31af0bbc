"""Pure delivery decisions: the dispatch-time gate, the retry schedule, quiet hours."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.dispatch import DispatchContext, gate
from runbell.domain.errors import ValidationFailed
from runbell.domain.quiet_hours import QuietWindow, quiet_until
from runbell.domain.retry import WEBHOOK_SCHEDULE, RetryStrategy, parse_retry_after

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday
NIGHT = [QuietWindow.parse({"start": "22:00", "end": "07:00"})]


def person(**kw: object) -> DispatchContext:
    base: dict[str, object] = {
        "channel": "email",
        "urgency": "normal",
        "notification_state": "open",
        "attention_type": "completed",
        "transition_version": 2,
        "run_state": "completed",
        "run_version": 2,
    }
    base.update(kw)
    return DispatchContext(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ctx", "action", "close_as"),
    [
        (person(), "send", None),
        (person(notification_state="acknowledged"), "cancel", None),
        (person(notification_state=None), "cancel", None),
        (person(is_member=False), "cancel", "revoked"),
        (person(can_see_run=False), "cancel", "revoked"),
        (person(expires_at=NOW), "cancel", "expired"),
        (person(attention_type="input_required", run_state="working"), "cancel", None),
        (
            person(attention_type="input_required", run_state="input_required", run_version=3),
            "cancel",
            None,
        ),
        (person(destination_exists=False), "cancel", None),
        (person(urgency="low"), "skip", None),  # email default consent starts at normal
        (person(consented_urgencies=()), "skip", None),
        (DispatchContext(channel="webhook", urgency="normal"), "send", None),
        (
            DispatchContext(channel="webhook", urgency="normal", endpoint_enabled=False),
            "cancel",
            None,
        ),
        (
            DispatchContext(channel="webhook", urgency="normal", endpoint_wants_event=False),
            "cancel",
            None,
        ),
    ],
)
def test_gate_decides_from_the_situation_now(
    ctx: DispatchContext, action: str, close_as: str | None
) -> None:
    """Acknowledged, revoked, expired, stale or unconsented alerts never go out."""
    decided = gate(ctx, NOW)
    assert (decided.action, decided.close_as) == (action, close_as)
    assert decided.redact == (close_as == "revoked")


def test_quiet_hours_defer_to_the_window_end_and_only_a_tenant_rule_bypasses() -> None:
    """Invariant 7: deferred, not dropped; a chosen urgency passes only by tenant rule."""
    at_night = datetime(2026, 3, 2, 23, 30, tzinfo=UTC)
    ctx = person(urgency="urgent", quiet_windows=NIGHT, timezone="UTC")
    decided = gate(ctx, at_night)
    assert decided.action == "defer"
    assert decided.until == datetime(2026, 3, 3, 7, 0, tzinfo=UTC)
    bypass = person(urgency="urgent", quiet_windows=NIGHT, quiet_bypass=frozenset({"urgent"}))
    assert gate(bypass, at_night).action == "send"
    assert gate(person(quiet_windows=NIGHT), NOW).action == "send"  # noon is not quiet


def test_quiet_hours_follow_the_persons_timezone() -> None:
    """22:00-07:00 in Berlin is 21:00-06:00 UTC in winter."""
    assert quiet_until(datetime(2026, 1, 5, 21, 30, tzinfo=UTC), NIGHT, "Europe/Berlin") == (
        datetime(2026, 1, 6, 6, 0, tzinfo=UTC)
    )
    assert quiet_until(datetime(2026, 1, 5, 20, 30, tzinfo=UTC), NIGHT, "Europe/Berlin") is None


def test_quiet_window_on_chosen_days_only() -> None:
    """A window with days applies only on the days it starts."""
    weekend = [QuietWindow.parse({"start": "00:00", "end": "23:59", "days": [5, 6]})]
    assert quiet_until(NOW, weekend, "UTC") is None  # Monday
    assert quiet_until(NOW + timedelta(days=5), weekend, "UTC") is not None  # Saturday


@pytest.mark.parametrize(
    "raw",
    [
        {"start": "25:00", "end": "07:00"},
        {"start": "22:00"},
        {"start": "x", "end": "y"},
        {"start": "22:00", "end": "22:00"},
        {"start": "22:00", "end": "07:00", "days": [7]},
    ],
)
def test_bad_quiet_windows_are_refused(raw: dict[str, object]) -> None:
    """A window that cannot be read is a 422-style error, not a silent no-op."""
    with pytest.raises(ValidationFailed):
        QuietWindow.parse(raw)


@given(st.integers(0, len(WEBHOOK_SCHEDULE) - 1), st.integers(0, 2**32))
def test_retry_delays_stay_within_jitter(attempts: int, seed: int) -> None:
    """±20 % around the documented schedule, never earlier than now."""
    decision = RetryStrategy(WEBHOOK_SCHEDULE).decide(
        attempts=attempts, now=NOW, rng=random.Random(seed)
    )
    assert decision.action == "retry" and decision.at is not None
    delay = (decision.at - NOW).total_seconds()
    base = WEBHOOK_SCHEDULE[attempts]
    assert base * 0.8 - 1e-6 <= delay <= base * 1.2 + 1e-6


def test_retries_end_dead_and_never_past_expiry() -> None:
    """Exhausted → dead; a retry that would land after the notification expires → dead."""
    strategy = RetryStrategy(WEBHOOK_SCHEDULE)
    rng = random.Random(0)
    assert strategy.decide(attempts=len(WEBHOOK_SCHEDULE), now=NOW, rng=rng).action == "dead"
    soon = strategy.decide(attempts=3, now=NOW, rng=rng, expires_at=NOW + timedelta(seconds=60))
    assert soon.action == "dead"


def test_retry_after_is_honoured_up_to_a_cap() -> None:
    """A receiver asking for 2 minutes waits 2 minutes; asking for a week waits the cap."""
    strategy = RetryStrategy(WEBHOOK_SCHEDULE)
    d = strategy.decide(attempts=1, now=NOW, rng=random.Random(0), retry_after_s=120)
    assert d.at == NOW + timedelta(seconds=120)
    capped = strategy.decide(attempts=1, now=NOW, rng=random.Random(0), retry_after_s=7 * 86400)
    assert capped.at == NOW + timedelta(seconds=strategy.retry_after_cap_s)
    assert parse_retry_after("120", NOW) == 120
    assert parse_retry_after("Mon, 02 Mar 2026 12:01:00 GMT", NOW) == 60
    assert parse_retry_after("soon", NOW) is None
