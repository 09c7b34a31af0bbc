"""The SDK's retry schedule and what it retries (no server: httpx's MockTransport)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from runbell.client import ConnectionFailed, NotFound, RetryPolicy, Unavailable
from runbell.client._core import retry_after
from tests.sdk import Connect

INVALID = "http://rb.invalid"  # never dialled: the mock transport answers
QUICK = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)


def test_delay_grows_exponentially_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(attempts=10, base_delay=0.5, max_delay=4.0)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (8, 4.0)]:
        delays = {policy.delay(attempt) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1  # jittered, so retrying clients do not stampede together


def test_retry_after_is_honoured_and_capped() -> None:
    policy = RetryPolicy(max_delay=10.0)
    assert policy.delay(1, retry_after=2.0) == 2.0
    assert policy.delay(1, retry_after=120.0) == 10.0
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert retry_after(httpx.Headers({"Retry-After": "5"})) == 5.0
    date = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert retry_after(httpx.Headers({"Retry-After": date}), now) == 7.0
    assert retry_after(httpx.Headers({"Retry-After": "soon"})) is None
    assert retry_after(httpx.Headers({})) is None


def test_connection_errors_retry_with_the_same_event_id_then_fail(sdk: Connect) -> None:
    bodies: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        raise httpx.ConnectError("refused", request=request)

    with (
        sdk(
            "http://rb.invalid", "rbk_x", transport=httpx.MockTransport(handler), retry=QUICK
        ) as rb,
        pytest.raises(ConnectionFailed, match=r"cannot reach Runbell at http://rb\.invalid"),
    ):
        rb.signal("r1", "completed")
    assert len(bodies) == 3
    assert len({b["event_id"] for b in bodies}) == 1


def test_429_and_503_are_retried_and_then_raised_with_the_problem(sdk: Connect) -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Idempotency-Key"))
        return httpx.Response(
            429 if len(seen) % 2 else 503,
            headers={"Retry-After": "0", "Content-Type": "application/problem+json"},
            json={"type": "https://runbell.dev/problems/x", "status": 503, "detail": "busy"},
        )

    with (
        sdk(
            "http://rb.invalid", "rbk_x", transport=httpx.MockTransport(handler), retry=QUICK
        ) as rb,
        pytest.raises(Unavailable) as exc,
    ):
        rb.cancel("r1", reason="stop")
    assert exc.value.detail == "busy"
    assert len(seen) == 3 and seen[0] and len(set(seen)) == 1  # one Idempotency-Key


def test_other_errors_are_not_retried(sdk: Connect) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(
            404, json={"type": "x/not-found", "status": 404, "detail": "no run 'r'"}
        )

    with (
        sdk(
            "http://rb.invalid", "rbk_x", transport=httpx.MockTransport(handler), retry=QUICK
        ) as rb,
        pytest.raises(NotFound, match="no run 'r'"),
    ):
        rb.get_run("r")
    assert len(calls) == 1
