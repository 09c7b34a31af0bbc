"""Outbound rate limits as send times: a token bucket kept as one timestamp per limit.

Each limit (a tenant's webhook rate, an endpoint's own) is a *generic cell rate
algorithm* bucket: its whole state is the theoretical arrival time ``tat`` of the next
message. A message may go at ``tat - (burst - 1) / rate`` at the earliest; sending it
moves ``tat`` on by ``1 / rate``. In any window of ``w`` seconds at most
``burst + w * rate`` messages go out, however many workers share the state (they take
turns on it in the claim transaction, :mod:`runbell.store.rate_limits`).

:func:`schedule` gives each claimed row its send time under every limit it counts
against; a row whose time is further ahead than the horizon is given back instead, due
again at the time it would have had. A bucket time further ahead than any plan could
have put it (a clock that ran ahead wrote it) is forgotten.

Example::

    limit = Limit("tenant:t1", rate=2.0, burst=2.0)
    plan = schedule({}, [("d1", [limit]), ("d2", [limit]), ("d3", [limit])], now, 0.0)
    assert list(plan.send_at) == ["d1", "d2"] and plan.given_back[0][0] == "d3"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Limit:
    key: str
    rate: float  # messages per second, > 0
    burst: float  # messages that may go at once, >= 1

    def earliest(self, tat: datetime | None, now: datetime) -> datetime:
        if tat is None:
            return now
        return max(now, tat - timedelta(seconds=(max(1.0, self.burst) - 1) / self.rate))

    def after(self, tat: datetime | None, at: datetime) -> datetime:
        base = at if tat is None else max(tat, at)
        return base + timedelta(seconds=1 / self.rate)


@dataclass
class SendPlan:
    state: dict[str, datetime]  # the new ``tat`` of every limit that was used
    send_at: dict[str, datetime] = field(default_factory=dict)
    given_back: list[tuple[str, datetime]] = field(default_factory=list)


def schedule(
    state: Mapping[str, datetime | None],
    rows: Sequence[tuple[str, Sequence[Limit]]],
    now: datetime,
    horizon_s: float,
) -> SendPlan:
    """Send times for ``rows`` (``(id, limits)``, in claim order) from the buckets'
    ``state``. Rows with no limits are not mentioned in the plan (they go at once)."""
    state = _sane(state, rows, now, horizon_s)
    real: dict[str, datetime | None] = dict(state)
    # What the buckets would hold had every row been kept: a row given back is due at
    # the time it would have had, so a backlog comes back in the order and pace it can go.
    shadow: dict[str, datetime | None] = dict(state)
    horizon = now + timedelta(seconds=horizon_s)
    plan = SendPlan(state={})
    for row_id, limits in rows:
        if not limits:
            continue
        at = max(lim.earliest(real.get(lim.key), now) for lim in limits)
        if at <= horizon:
            for lim in limits:
                real[lim.key] = lim.after(real.get(lim.key), at)
                shadow[lim.key] = lim.after(shadow.get(lim.key), at)
            plan.send_at[row_id] = at
            continue
        due = max(lim.earliest(shadow.get(lim.key), now) for lim in limits)
        for lim in limits:
            shadow[lim.key] = lim.after(shadow.get(lim.key), due)
        plan.given_back.append((row_id, due))
    plan.state = {k: v for k, v in real.items() if v is not None and v != state.get(k)}
    return plan


def _sane(
    state: Mapping[str, datetime | None],
    rows: Sequence[tuple[str, Sequence[Limit]]],
    now: datetime,
    horizon_s: float,
) -> dict[str, datetime | None]:
    """Forget a bucket time further ahead than any plan could have put it: it was written
    by a clock that ran ahead (another host's, a test's), and would hold the limit shut
    until this clock caught up."""
    sane = dict(state)
    for _, limits in rows:
        for lim in limits:
            tat = sane.get(lim.key)
            ahead = horizon_s + (lim.burst + 1) / lim.rate + 1.0
            if tat is not None and tat > now + timedelta(seconds=ahead):
                sane[lim.key] = None
    return sane
