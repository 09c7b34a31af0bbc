"""The pure rate-limit planner (runbell.domain.rate): send times from one timestamp per
bucket, and rows given back when the limit has no room for them soon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.rate import Limit, schedule

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_burst_goes_at_once_then_one_per_interval() -> None:
    limit = Limit("tenant:t", rate=2.0, burst=2.0)
    plan = schedule({}, [(f"d{i}", [limit]) for i in range(4)], NOW, horizon_s=10.0)
    offsets = [(plan.send_at[f"d{i}"] - NOW).total_seconds() for i in range(4)]
    assert offsets == [0.0, 0.0, 0.5, 1.0]
    assert plan.state == {"tenant:t": NOW + timedelta(seconds=2.0)}
    assert plan.given_back == []


def test_rows_beyond_the_horizon_are_given_back_in_their_order_and_pace() -> None:
    limit = Limit("tenant:t", rate=2.0, burst=1.0)
    plan = schedule({}, [(f"d{i}", [limit]) for i in range(4)], NOW, horizon_s=0.6)
    assert sorted(plan.send_at) == ["d0", "d1"]
    assert plan.given_back == [
        ("d2", NOW + timedelta(seconds=1.0)),
        ("d3", NOW + timedelta(seconds=1.5)),
    ]
    # Only what was kept moved the bucket on.
    assert plan.state == {"tenant:t": NOW + timedelta(seconds=1.0)}


def test_a_row_waits_for_the_strictest_of_its_limits() -> None:
    tenant = Limit("tenant:t", rate=100.0, burst=100.0)
    endpoint = Limit("endpoint:e", rate=1.0, burst=1.0)
    state = {"endpoint:e": NOW + timedelta(seconds=0.5)}
    plan = schedule(state, [("d0", [tenant, endpoint]), ("d1", [tenant])], NOW, horizon_s=1.0)
    assert plan.send_at == {"d0": NOW + timedelta(seconds=0.5), "d1": NOW}


def test_a_bucket_time_from_a_clock_far_ahead_does_not_hold_the_limit_shut() -> None:
    limit = Limit("tenant:t", rate=2.0, burst=2.0)
    plan = schedule({"tenant:t": NOW + timedelta(days=3)}, [("d0", [limit])], NOW, 1.0)
    assert plan.send_at == {"d0": NOW}


@given(
    st.lists(st.floats(min_value=0, max_value=5), min_size=1, max_size=60),
    st.floats(min_value=0.5, max_value=20),
    st.integers(min_value=1, max_value=10),
)
def test_no_window_ever_holds_more_than_burst_plus_rate_times_its_length(
    claims_at: list[float], rate: float, burst: int
) -> None:
    """Claims at any times (several workers, one after another on the shared bucket):
    the planned sends never exceed the limit in any window."""
    limit = Limit("k", rate=rate, burst=float(burst))
    state: dict[str, datetime | None] = {}
    sends: list[float] = []
    for i, at in enumerate(sorted(claims_at)):
        now = NOW + timedelta(seconds=at)
        plan = schedule(state, [(f"d{i}", [limit])], now, horizon_s=1.0)
        state.update(plan.state)
        sends += [(t - NOW).total_seconds() for t in plan.send_at.values()]
    sends.sort()
    for start in sends:
        for window in (0.5, 1.0, 2.0):
            inside = sum(1 for s in sends if start <= s <= start + window + 1e-9)
            assert inside <= burst + rate * window + 1e-6
