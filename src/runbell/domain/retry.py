"""When to try a delivery again — a pure decision, ``now`` and randomness passed in.

Each channel has a schedule of delays (DESIGN §6 for tenant webhooks: 0 s, 5 s, 5 min,
30 min, 2 h, 5 h, 10 h, 10 h; shorter for push, email and chat, whose value decays fast);
the schedules are here, and each channel's facts name its own
(``runbell.domain.channels``, ``retry_schedule``).
A delay gets ±20 % jitter so that a recovering receiver is not hit by a synchronized
herd; a ``Retry-After`` from the receiver is honoured up to a cap; no retry is ever
scheduled past the notification's expiry; an exhausted schedule means ``dead``.

Example::

    strategy = RetryStrategy(WEBHOOK_SCHEDULE)
    d = strategy.decide(attempts=1, now=now, rng=random.Random(1))
    assert d.action == "retry" and d.at > now
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

WEBHOOK_SCHEDULE: tuple[float, ...] = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)
PUSH_SCHEDULE: tuple[float, ...] = (0, 10, 60, 300, 900)
EMAIL_SCHEDULE: tuple[float, ...] = (0, 30, 120, 600, 1800, 3600)
CHAT_SCHEDULE: tuple[float, ...] = (0, 10, 60, 300, 900)


@dataclass(frozen=True)
class RetryDecision:
    action: Literal["retry", "dead"]
    at: datetime | None
    reason: str


@dataclass(frozen=True)
class RetryStrategy:
    """``schedule[i]`` is the delay before attempt ``i + 1`` (attempt 1 is the first send)."""

    schedule: tuple[float, ...]
    jitter: float = 0.2
    retry_after_cap_s: float = 3600.0

    @property
    def max_attempts(self) -> int:
        return len(self.schedule)

    def decide(
        self,
        *,
        attempts: int,
        now: datetime,
        rng: random.Random,
        retry_after_s: float | None = None,
        expires_at: datetime | None = None,
    ) -> RetryDecision:
        """After ``attempts`` failed tries, when (if ever) to try again."""
        if attempts >= self.max_attempts:
            return RetryDecision("dead", None, f"gave up after {attempts} attempts")
        base = self.schedule[attempts]
        delay = base * (1 + rng.uniform(-self.jitter, self.jitter))
        reason = f"attempt {attempts + 1} of {self.max_attempts} in {delay:.0f}s"
        if retry_after_s is not None and retry_after_s > delay:
            delay = min(retry_after_s, self.retry_after_cap_s)
            reason = f"receiver asked to retry after {retry_after_s:.0f}s (capped at {delay:.0f}s)"
        at = now + timedelta(seconds=delay)
        if expires_at is not None and at >= expires_at:
            return RetryDecision("dead", None, "the notification expires before the next try")
        return RetryDecision("retry", at, reason)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date); None if absent
    or unparsable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())
