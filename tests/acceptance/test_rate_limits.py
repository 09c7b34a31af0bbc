"""Outbound rate limits hold across `runbell worker` processes (issue 9 §4; DESIGN §2, 14).

The tenant's webhook rate (``RUNBELL_WEBHOOK_RATE_PER_S``) and an endpoint's own
``rate_limit_per_s`` are buckets in the database that every worker takes turns on
(``runbell.store.rate_limits``): two workers together send no more than one limit,
where each used to apply it on its own (twice the setting with two workers).

Only an upper bound is asserted, on what the receiver saw: in every window of ``W``
seconds at most ``burst + rate * (W + slack)`` messages, where the slack covers a send
that left a little after its turn on a loaded machine; never how fast the workers are.
Each worker applying the limit on its own would show about twice that.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from runbell.flows.context import Core
from runbell.signatures import new_secret
from runbell.store import tables as t
from tests.acceptance.receivers import Receiver
from tests.acceptance.test_worker_processes import (
    child_env,
    clean,
    core_for,  # noqa: F401  (a fixture: used by name)
    seed,
    start_workers,
    statuses,
    wait_for,
)
from tests.timeouts import scaled

RATE = 10.0  # per second; burst = one second's worth (the bucket's size)
MESSAGES = 80
WINDOW_S = 2.0
# A send may leave up to this long after its turn when the suite loads both cores (seen: 38
# arrivals in a 2 s window at 0.5 s of slack, under `make test -n 4`). Two workers each
# applying the limit on their own would show about 2 x (10 + 10 x 2) = 60: far above 40.
SLACK_S = 1.0


def most_in_any_window(times: list[float], window: float) -> int:
    """The largest number of arrivals inside any window of ``window`` seconds."""
    times = sorted(times)
    best = start = 0
    for end, at in enumerate(times):
        while at - times[start] > window:
            start += 1
        best = max(best, end - start + 1)
    return best


@pytest.mark.parametrize("limit", ["tenant", "endpoint"])
def test_two_workers_together_keep_one_rate_limit(
    tmp_path: Path,
    db_url: str,
    core_for: Callable[..., Core],  # noqa: F811
    limit: str,
) -> None:
    """Two workers drain a backlog under one limit: the receiver never sees more than
    the limit allows in any window, each message arrives once."""
    if db_url.startswith("sqlite"):
        pytest.skip("several worker processes share PostgreSQL (DESIGN §5 scale-out)")
    core = core_for(db_url)
    secret = new_secret()
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        seeded = seed(core, rx.url, secret, runs=MESSAGES, threads=4)
        tenant_rate = str(RATE) if limit == "tenant" else "100000"
        if limit == "endpoint":
            with core.db.transaction() as tx:
                tx.conn.execute(
                    t.webhook_endpoints.update()
                    .where(t.webhook_endpoints.c.id == seeded.endpoint_id)
                    .values(rate_limit_per_s=RATE)
                )
        # Small claims, so both workers hold part of the backlog at once.
        env = child_env(
            tmp_path, db_url, RUNBELL_WEBHOOK_RATE_PER_S=tenant_rate, RUNBELL_WORKER_BATCH="5"
        )
        workers = start_workers(stack, env, tmp_path, 2)
        wait_for(
            lambda: statuses(core) == {"accepted": MESSAGES},
            f"{MESSAGES} accepted",
            workers,
            timeout=scaled(120),
        )
        assert [w.stop() for w in workers] == [0, 0]
        for w in workers:
            clean(w.output)

    assert rx.ids() == Counter(dict.fromkeys(seeded.delivery_ids, 1)), "each exactly once"
    one, two = (w.accepted_ids() for w in workers)
    assert one and two, f"both workers took part ({len(one)} and {len(two)})"
    allowed = int(RATE + RATE * (WINDOW_S + SLACK_S))  # burst + rate * (window + slack)
    seen = most_in_any_window([a.at for a in rx.arrivals], WINDOW_S)
    assert seen <= allowed, f"{seen} arrivals within {WINDOW_S}s; the limit allows {allowed}"
