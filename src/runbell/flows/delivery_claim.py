"""Claim: take a batch of due deliveries in one short transaction, with what sending needs.

One transaction per batch, whatever its size:

1. the claim itself, one statement (``FOR UPDATE SKIP LOCKED`` on PostgreSQL): the rows
   go to ``sending`` under a lease that covers the send, so no renewal is needed on the
   way (:attr:`Claimed.fresh_until` says until when);
2. the webhook endpoints of the batch, one read: the dispatch-time checks for a webhook
   (:func:`runbell.flows.delivery_prepare.prepare_webhook`) need nothing else;
3. the outbound rate limits (per tenant, per endpoint), shared by every worker through
   :mod:`runbell.store.rate_limits`: each row gets its send time, and a row the limits
   have no room for soon is given back unsent, due again when they will
   (:func:`runbell.domain.rate.schedule`).

Person-channel rows (push, email, chat) are checked later, one read each, by
:func:`runbell.flows.delivery_prepare.prepare`: they are few per notification, and their checks
read the person's state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runbell.domain.channels import FACTS
from runbell.domain.rate import Limit, schedule
from runbell.domain.records import Delivery
from runbell.flows.context import Core
from runbell.flows.delivery_prepare import Prepared, prepare_webhook
from runbell.store import endpoints, outbox, rate_limits


@dataclass
class Claimed:
    """One claimed row, with its webhook already prepared (``None`` for person channels),
    the monotonic time until which the claim's lease still covers a send, and the
    monotonic time its rate limits let it go (0: at once)."""

    row: Delivery
    prepared: Prepared | None
    fresh_until: float
    send_at: float = 0.0
    # Preparing the webhook failed (a secret that will not open, a bug): the worker
    # records it as a failed attempt, like any failure of its own.
    error: Exception | None = None


@dataclass
class ClaimBatch:
    claimed: list[Claimed]
    # The earliest time a row given back for the rate limits is due again (None: none).
    next_due: datetime | None = None


def claim_batch(
    core: Core,
    *,
    worker_id: str,
    limit: int,
    now: datetime,
    opened: dict[str, str] | None = None,
    only: str | None = None,
) -> ClaimBatch:
    """Claim up to ``limit`` due deliveries (``only``: that one, when it is due and no
    other worker holds it), with what sending them needs."""
    s = core.settings
    # Before the transaction: the lease runs from its clock reading, never from later.
    t0 = time.monotonic()
    with core.db.transaction(now=now) as tx:
        rows = outbox.claim(
            tx.conn,
            now=tx.now,
            worker_id=worker_id,
            lease_s=s.worker_lease_s,
            limit=limit,
            only=only,
        )
        if not rows:
            return ClaimBatch([])
        hooks = {(r["tenant_id"], r["destination"]) for r in rows if _to_endpoint(r["channel"])}
        eps = endpoints.get_many(tx.conn, hooks)
        wants = [_limits(core, r, eps) for r in rows]
        horizon = rate_horizon(s.worker_lease_s, s.outbound_timeout_s)
        slots, given_back, next_due = {}, [], None
        if any(wants):
            keys = {lim.key for lims in wants for lim in lims}
            state = rate_limits.lock(tx.conn, keys, tx.now)
            plan = schedule(
                state,
                [(r["id"], lims) for r, lims in zip(rows, wants, strict=True)],
                tx.now,
                horizon,
            )
            rate_limits.store(tx.conn, plan.state, tx.now)
            slots, given_back = plan.send_at, plan.given_back
            by_id = {r["id"]: r for r in rows}
            outbox.release(tx.conn, [(by_id[i], at) for i, at in given_back], tx.now)
            next_due = min((at for _, at in given_back), default=None)
        now_claimed = tx.now
    fresh_until = t0 + lease_cover(s.worker_lease_s, s.outbound_timeout_s)
    back = {delivery_id for delivery_id, _ in given_back}
    claimed = []
    for row in rows:
        if row["id"] in back:
            continue
        prepared, error = None, None
        if _to_endpoint(row["channel"]):
            ep = eps.get((row["tenant_id"], row["destination"]))
            try:
                prepared = prepare_webhook(core, ep, row, now_claimed, opened)
            except Exception as exc:  # one bad row must not take its batch down
                error = exc
        at = slots.get(row["id"])
        send_at = 0.0 if at is None else t0 + max(0.0, (at - now_claimed).total_seconds())
        claimed.append(Claimed(row, prepared, fresh_until, send_at, error))
    return ClaimBatch(claimed, next_due)


def _to_endpoint(channel: str) -> bool:
    """A row on ``channel`` goes to a tenant's endpoint (a webhook): prepared here, from
    the batch's read."""
    facts = FACTS.get(channel)
    return facts is not None and facts.destination == "endpoint"


def _limits(core: Core, row: Delivery, eps: dict[tuple[str, str], Any]) -> list[Limit]:
    """The outbound limits a row counts against, by its channel's ``rate_limit_scope``:
    for a webhook its tenant's, and its endpoint's own when it sets one (a webhook is an
    amplifier a compromised account could aim at a third party). Person channels have
    none."""
    facts = FACTS.get(row["channel"])
    scope = facts.rate_limit_scope if facts is not None else ()
    found = []
    if "tenant" in scope:
        rate = core.settings.webhook_rate_per_s
        found.append(Limit(f"tenant:{row['tenant_id']}", rate, max(1.0, rate)))
    if "endpoint" in scope:
        ep = eps.get((row["tenant_id"], row["destination"]))
        own = ep["rate_limit_per_s"] if ep else None
        if own:
            found.append(Limit(f"endpoint:{row['destination']}", own, max(1.0, own)))
    return found


def renew_lease(core: Core, delivery_id: str, *, worker_id: str, now: datetime) -> bool:
    """Extend this worker's lease on a row still being sent (a send that outlives the
    claim's cover); False when the lease was lost and the row is someone else's now."""
    with core.db.transaction(now=now) as tx:
        return outbox.renew_lease(
            tx.conn, delivery_id, worker_id, tx.now, core.settings.worker_lease_s
        )


def lease_cover(lease_s: float, timeout_s: float) -> float:
    """How long after its claim a row can still be sent without renewing the lease: the
    send (up to the timeout) must end before the lease does, with a margin."""
    return max(0.0, lease_s - timeout_s - min(1.0, 0.1 * lease_s))


def rate_horizon(lease_s: float, timeout_s: float) -> float:
    """How far ahead a claimed row may be given a send time; later ones are given back."""
    return min(1.0, lease_cover(lease_s, timeout_s))
