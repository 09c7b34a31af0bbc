"""Record: settle claimed deliveries — a batch of sends in one transaction.

Two ways a claim ends:

- :func:`settle_gate` — the dispatch-time checks said not to send (defer, skip, cancel):
  no attempt is counted, and a recipient who may no longer see the alert has it closed
  and its stored previews scrubbed (DESIGN §2, 8);
- :func:`record_attempt` — after a send: one attempt row, then accepted, failed, or the
  next state from the pure retry policy (retry with backoff and jitter, or dead), with
  the side effects the channel's answer calls for (a gone push subscription is dropped, a
  410 or repeated exhaustion disables a webhook endpoint with an operator event — §2, 14).

Both settle only a row this worker still holds: one acknowledged (cancelled) or
re-claimed meanwhile is left as it is, so nothing is repeated (§2, 6 and 12). Each locks
the notification before its delivery, the order every other path uses.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from runbell import metrics
from runbell.channels.base import DeliveryError, PermanentDeliveryError, Sent
from runbell.domain.channels import facts_of
from runbell.domain.dispatch import Gate
from runbell.domain.records import Attempt, Delivery
from runbell.domain.retry import RetryStrategy
from runbell.flows import fallback
from runbell.flows.attention import close_notification
from runbell.flows.context import Core
from runbell.flows.delivery_prepare import Prepared
from runbell.store import destinations, endpoints, operator_events, outbox
from runbell.store import notifications as notes
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)


@dataclass
class Result:
    outcome: str  # accepted | transient | unknown | permanent
    sent: Sent | None = None
    error: DeliveryError | None = None
    duration_ms: int = 0
    started_at: datetime | None = None


# --- outcomes that sent nothing ----------------------------------------------------------


def settle_gate(
    core: Core,
    row: Delivery,
    decided: Gate,
    *,
    worker_id: str,
    clock: Callable[[], datetime],
) -> None:
    with core.db.transaction(now=clock()) as tx:
        cur = outbox.lock_claimed(tx.conn, row["id"], row["notification_id"])
        if cur is None or cur["status"] != "sending" or cur["claimed_by"] != worker_id:
            return  # someone else moved it meanwhile (ack, replay, a later claim)
        # Not an attempt: nothing was sent.
        values: dict[str, Any] = {
            "attempt_count": max(0, cur["attempt_count"] - 1),
            "last_error": decided.reason[:500],
        }
        if decided.action == "defer":
            values.update(status="deferred", next_attempt_at=decided.until)
            metrics.DEFERRED_QUIET.labels(row["channel"]).inc()
        elif decided.action == "skip":
            values.update(status="skipped", next_attempt_at=None)
        else:
            values.update(status="cancelled", next_attempt_at=None)
        outbox.settle(tx.conn, row["id"], tx.now, **values)
        if decided.redact or decided.close_as:
            _withdraw(tx, row, decided)
    log.info(
        "delivery.not_sent",
        delivery_id=row["id"],
        channel=row["channel"],
        action=decided.action,
        reason=decided.reason,
    )


def _withdraw(tx: Tx, row: Delivery, decided: Gate) -> None:
    """The recipient may no longer see this: close it, and scrub stored previews."""
    notification_id = row["notification_id"]
    n = None if notification_id is None else notes.find(tx.conn, row["tenant_id"], notification_id)
    if n is None:
        return
    if decided.close_as:
        close_notification(tx, n, decided.close_as, decided.reason)
    if decided.redact:
        notes.redact(tx.conn, n["tenant_id"], n["id"])


# --- after a send ------------------------------------------------------------------------


def record_attempt(
    core: Core,
    row: Delivery,
    prepared: Prepared,
    result: Result,
    *,
    worker_id: str,
    rng: random.Random,
    clock: Callable[[], datetime],
) -> None:
    """Write what one send did (:func:`record_attempts` for a batch of one)."""
    record_attempts(core, [(row, prepared, result)], worker_id=worker_id, rng=rng, clock=clock)


def record_attempts(
    core: Core,
    done: Sequence[tuple[Delivery, Prepared, Result]],
    *,
    worker_id: str,
    rng: random.Random,
    clock: Callable[[], datetime],
) -> None:
    """Write what a batch of sends did, in one transaction: one lock statement per table,
    the attempt rows in one insert, the accepted deliveries in one update; only the rarer
    outcomes (retry, dead, failed) are settled row by row. Safe to call late: a row that
    is no longer ours only gets its attempt noted."""
    if not done:
        return
    with core.db.transaction(now=clock()) as tx:
        current = outbox.lock_claimed_many(
            tx.conn, [(row["id"], row["notification_id"]) for row, _, _ in done]
        )
        attempts: list[Attempt] = []
        ours: list[tuple[Delivery, Delivery, Prepared, Result]] = []
        for row, prepared, result in done:
            cur = current.get(row["id"])
            if cur is None:
                continue
            attempts.append(_attempt(cur, row, result, tx.now))
            # Acknowledged (cancelled) or re-claimed while in flight: the attempt is
            # recorded, nothing is repeated.
            if cur["status"] == "sending" and cur["claimed_by"] == worker_id:
                ours.append((row, cur, prepared, result))
        outbox.add_attempts(tx.conn, attempts)
        accepted = [row for row, _, _, result in ours if result.outcome == "accepted"]
        _accepted(tx, accepted)
        for row, cur, prepared, result in ours:
            if result.outcome == "permanent":
                assert isinstance(result.error, PermanentDeliveryError)
                _failed(tx, row, result.error)
                fallback.after_failure(core, tx, cur, "failed")
            elif result.outcome != "accepted":
                _retry_or_dead(core, tx, row, cur, prepared, result, rng)
    # Only what this worker settled is counted and logged (as each row's own write did).
    for row, _, prepared, result in ours:
        _observe(row, prepared, result, tx.now)


def _attempt(cur: Delivery, row: Delivery, result: Result, now: datetime) -> Attempt:
    err, sent = result.error, result.sent
    return {
        "tenant_id": cur["tenant_id"],
        "delivery_id": cur["id"],
        "attempt_no": row["attempt_count"],
        "started_at": result.started_at or now,
        "finished_at": now,
        "outcome": result.outcome,
        "status_code": sent.status_code if sent else (None if err is None else err.status_code),
        "provider_message_id": sent.provider_message_id if sent else None,
        "duration_ms": result.duration_ms,
        "error": None if err is None else err.detail[:500],
        "response_excerpt": (sent.response_excerpt if sent else err and err.response_excerpt)
        or None,
    }


def _observe(row: Delivery, prepared: Prepared, result: Result, now: datetime) -> None:
    channel = row["channel"]
    labels = (prepared.attention_type, channel)
    metrics.ATTEMPTS.labels(*labels, result.outcome).inc()
    if row["attempt_count"] == 1 and prepared.created_at is not None:
        started = result.started_at or now
        metrics.FIRST_ATTEMPT_LATENCY.labels(*labels).observe(
            max(0.0, (started - prepared.created_at).total_seconds())
        )
    if result.outcome == "accepted":
        metrics.ACCEPTED.labels(*labels).inc()
        if prepared.created_at is not None:
            metrics.DISPATCH_LATENCY.labels(*labels).observe(
                max(0.0, (now - prepared.created_at).total_seconds())
            )
    else:
        metrics.FAILURES.labels(channel, result.outcome).inc()
    log.info(
        "delivery.attempted",
        delivery_id=row["id"],
        channel=channel,
        outcome=result.outcome,
        attempt=row["attempt_count"],
    )


def _accepted(tx: Tx, rows: list[Delivery]) -> None:
    if not rows:
        return
    outbox.settle_many(
        tx.conn,
        [row["id"] for row in rows],
        tx.now,
        status="accepted",
        next_attempt_at=None,
        last_error=None,
    )
    hooks: set[tuple[str, str]] = set()
    for row in rows:
        if row["notification_id"]:
            notes.mark_delivered(tx.conn, row["tenant_id"], row["notification_id"], tx.now)
        if facts_of(row["channel"]).destination == "endpoint":
            hooks.add((row["tenant_id"], row["destination"]))
        else:
            destinations.mark_reached(tx.conn, row["channel"], row["destination"], tx.now)
    endpoints.reset_dead_streak(tx.conn, hooks, tx.now)


def _failed(tx: Tx, row: Delivery, err: PermanentDeliveryError) -> None:
    outbox.settle(
        tx.conn,
        row["id"],
        tx.now,
        status="failed",
        next_attempt_at=None,
        last_error=err.detail[:500],
    )
    gone_means = facts_of(row["channel"]).gone_means if err.gone else "record"
    if gone_means == "forget":
        # E.g. the browser unsubscribed (404/410): forget it, and its other queued sends.
        destinations.forget(tx.conn, row["channel"], row["destination"])
        outbox.cancel_pending_to(
            tx.conn, row["channel"], row["destination"], tx.now, "destination gone"
        )
    if gone_means == "disable":
        _disable_endpoint(tx, row, f"endpoint answered {err.status_code or 'gone'}")
    if err.operator_alert:
        _operator_event(tx, row, "delivery.misconfigured", err.detail)


def _retry_or_dead(
    core: Core,
    tx: Tx,
    row: Delivery,
    cur: Delivery,
    prepared: Prepared,
    result: Result,
    rng: random.Random,
) -> None:
    err = result.error
    if row["notification_id"]:
        state = notes.state_of(tx.conn, row["tenant_id"], row["notification_id"])
        if state != "open":
            outbox.settle(
                tx.conn,
                row["id"],
                tx.now,
                status="cancelled",
                next_attempt_at=None,
                last_error=f"notification {state}",
            )
            return
    decision = RetryStrategy(facts_of(row["channel"]).retry_schedule).decide(
        attempts=cur["attempt_count"],
        now=tx.now,
        rng=rng,
        retry_after_s=getattr(err, "retry_after_s", None),
        expires_at=prepared.expires_at,
    )
    detail = (err.detail if err else "failed")[:500]
    if decision.action == "retry":
        status = "delivery_unknown" if result.outcome == "unknown" else "retry_scheduled"
        outbox.settle(
            tx.conn,
            row["id"],
            tx.now,
            status=status,
            next_attempt_at=decision.at,
            last_error=detail,
        )
        if result.outcome == "unknown":  # past the rule's bound: fall back meanwhile
            fallback.after_failure(core, tx, cur, "unknown")
        return
    outbox.settle(
        tx.conn,
        row["id"],
        tx.now,
        status="dead",
        next_attempt_at=None,
        last_error=f"{detail} — {decision.reason}"[:500],
    )
    metrics.DEAD_LETTERS.labels(row["channel"]).inc()
    fallback.after_failure(core, tx, cur, "dead")
    if facts_of(row["channel"]).destination == "endpoint":
        ep = endpoints.get(tx.conn, row["tenant_id"], row["destination"], for_update=True)
        streak = ep["dead_streak"] + 1
        endpoints.update(tx.conn, row["tenant_id"], ep["id"], tx.now, dead_streak=streak)
        if streak >= core.settings.webhook_disable_after_dead and ep["status"] == "enabled":
            _disable_endpoint(tx, row, f"{streak} deliveries in a row ended dead")


def _disable_endpoint(tx: Tx, row: Delivery, reason: str) -> None:
    ep = endpoints.get(tx.conn, row["tenant_id"], row["destination"], for_update=True)
    if ep["status"] != "enabled":
        return  # several in-flight messages saw the same 410: disable (and alert) once
    endpoints.update(
        tx.conn,
        row["tenant_id"],
        row["destination"],
        tx.now,
        status="disabled",
        disabled_reason=reason[:500],
    )
    tx.emit(
        row["tenant_id"],
        PendingEvent(
            "webhook_endpoint.disabled", {"endpoint_id": row["destination"], "reason": reason}
        ),
    )
    _operator_event(tx, row, "webhook_endpoint.disabled", reason)
    log.warning("webhook_endpoint.disabled", endpoint_id=row["destination"], reason=reason)


def _operator_event(tx: Tx, row: Delivery, kind: str, detail: str) -> None:
    operator_events.add(
        tx.conn,
        row["tenant_id"],
        kind,
        {
            "delivery_id": row["id"],
            "channel": row["channel"],
            "destination": row["destination"],
            "detail": detail[:500],
        },
        tx.now,
    )
    metrics.OPERATOR_ALERTS.labels(kind).inc()
