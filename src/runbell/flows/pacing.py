"""Throttles and scheduled digests: when attention a rule decided is pushed.

Inside the transaction of the transition (``flows.attention``):

- :func:`throttled` counts a throttled rule's push for its recipient and key value in the
  throttle's window (``store.throttles.bump``, one upsert that returns the count) and,
  over the limit, turns it into a ``digest`` or ``inbox`` decision, records why on the
  notification (``inputs.throttled``, shown by its trail), and drops its escalation;
- :func:`digest_window` is the window a digest item waits in: the epoch-aligned
  ``digest_window_s``, or, for ``digest_at``, from the previous scheduled local time to
  the next in the recipient's timezone (``domain.digest_schedule``).

Quiet hours are not decided here: a digest's deliveries are gated at send time like any
other (``flows.delivery_prepare``), so quiet hours keep deferring a scheduled digest.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from runbell.domain import digests as digest_rules
from runbell.domain import notify_throttle
from runbell.domain.errors import ValidationFailed
from runbell.domain.policy import Decision
from runbell.domain.records import Notification, Run
from runbell.flows.context import Core
from runbell.store import destinations, notifications, throttles
from runbell.store.db import Tx


def throttled(tx: Tx, run: Run, note: Notification, decision: Decision) -> Decision | None:
    """The decision a throttled push ends with when it is over its limit (and the
    notification rewritten to say so), or None when it is pushed as decided."""
    throttle = decision.throttle
    if throttle is None or decision.kind != "push":
        return None
    start, end = digest_rules.window_of(tx.now, throttle.window_s)
    hits = throttles.bump(
        tx.conn,
        tenant_id=note["tenant_id"],
        recipient=note["recipient_user_id"],
        rule_id=decision.rule_id,
        throttle_key=throttle.key,
        key_value=notify_throttle.key_value(
            throttle.key,
            run_id=run.run_id,
            agent=run.created_by_credential,
            kind=run.kind,
            attention=note["attention_type"],
        ),
        window_start=start,
        window_end=end,
    )
    if not notify_throttle.over(throttle, hits):
        return None
    inputs: dict[str, Any] = {
        **note["inputs"],
        "throttled": {
            "reason": notify_throttle.reason(throttle),
            "count": hits,
            "limit": throttle.limit,
            "window_s": throttle.window_s,
            "key": throttle.key,
            "then": throttle.then,
            "window_end": end.isoformat(),
        },
    }
    notifications.fold_throttled(tx.conn, note["tenant_id"], note["id"], throttle.then, inputs)
    note["decision"] = throttle.then
    note["inputs"] = inputs
    # Not pushed now, and never later by a ladder: the digest (or the inbox) is where it is.
    return dataclasses.replace(decision, kind=throttle.then, escalation=(), fallback=None)


def digest_window(
    tx: Tx, decision: Decision, tenant_id: str, recipient: str
) -> tuple[datetime, datetime]:
    """``[start, end)`` of the digest an item of ``decision`` waits for."""
    schedule = decision.digest_schedule
    if schedule is None:
        window_s = decision.digest_window_s or digest_rules.DEFAULT_WINDOW_S
        return digest_rules.window_of(tx.now, window_s)
    key = ("timezone", tenant_id, recipient)
    if key not in tx.cache:  # read once per transaction (a batch of signals shares it)
        tx.cache[key] = destinations.timezone_of(tx.conn, tenant_id, recipient)
    try:
        return schedule.window(tx.now, str(tx.cache[key]))
    except ValidationFailed:  # a zone this server's tz database lacks: UTC, never lost
        return schedule.window(tx.now, "UTC")


def prune(core: Core, now: datetime) -> int:
    """Forget throttle counts of windows that closed (a chore of the digest sweep)."""
    with core.db.read() as conn:
        if not throttles.any_closed(conn, now):
            return 0
    with core.db.transaction(now=now) as tx:
        return throttles.prune(tx.conn, now)
