"""The delivery worker: claim due outbox rows, check them *now*, send, record.

One delivery goes through three short steps, each its own unit of work:

1. **claim** (one statement, many rows): ``status → sending`` with a lease;
2. **prepare** (a read): load the notification, run, membership, consent, quiet hours or
   the webhook endpoint *as they are now* and ask :func:`runbell.domain.dispatch.gate`;
   render the :class:`~runbell.channels.base.Outbound` — neutral texts and an opaque id;
3. **send** outside any transaction, then **record** (a transaction): one attempt row, and
   the next state from the pure retry policy.

A worker killed between 1 and 3 leaves the row ``sending`` with an expired lease; the next
claim takes it and sends it again under the same identity (the delivery id is the
webhook-id, the push Topic source and the email Message-ID), so receivers can dedupe.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import structlog

from runbell import metrics
from runbell.channels.base import (
    Channel,
    DeliveryError,
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    TransientDeliveryError,
)
from runbell.domain.dispatch import DispatchContext, Gate, gate
from runbell.domain.principal import Principal
from runbell.domain.quiet_hours import QuietWindow
from runbell.domain.retry import RetryStrategy
from runbell.flows.attention import (
    NEUTRAL_BODY,
    NEUTRAL_SUMMARY,
    close_notification,
    consented_urgencies,
)
from runbell.flows.context import Runbell
from runbell.flows.policy import policy_for
from runbell.ids import new_id
from runbell.store import accounts, endpoints, outbox, runs
from runbell.store import notifications as notes
from runbell.store import tables as t
from runbell.store.db import OUTBOX_KEY, PendingEvent

log = structlog.get_logger(__name__)


@dataclass
class Prepared:
    gate: Gate
    message: Outbound | None = None
    attention_type: str = "webhook"
    expires_at: datetime | None = None
    created_at: datetime | None = None


@dataclass
class Result:
    outcome: str  # accepted | transient | unknown | permanent
    sent: Sent | None = None
    error: DeliveryError | None = None
    duration_ms: int = 0
    started_at: datetime | None = None


class TokenBucket:
    """Per-tenant outbound rate for tenant webhooks (a webhook is an amplifier)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, time.monotonic()

    async def take(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.rate)


class Worker:
    def __init__(
        self,
        core: Runbell,
        channels: Mapping[str, Channel],
        *,
        worker_id: str | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.core = core
        self.settings = core.settings
        self.channels = dict(channels)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{new_id('w')[-6:]}"
        self.rng = rng or random.Random()
        self.clock = clock or core.db.clock
        self._buckets: dict[str, TokenBucket] = {}

    # --- the loop ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Drain until ``stop``; sleep until a commit queues work (or the poll interval)."""
        log.info("worker.started", worker_id=self.worker_id, channels=sorted(self.channels))
        with self.core.db.hub.listen(OUTBOX_KEY) as listener:
            while not stop.is_set():
                try:
                    claimed = await self.run_once()
                except Exception as exc:
                    # A database outage is logged once by Availability; we poll again.
                    if self.core.db.availability.observe(exc) is None:
                        log.exception("worker.tick_failed")
                    claimed = 0
                if claimed < self.settings.worker_batch:
                    stopper = asyncio.ensure_future(stop.wait())
                    waker = asyncio.ensure_future(listener.wait(self.settings.worker_poll_s))
                    await asyncio.wait({stopper, waker}, return_when=asyncio.FIRST_COMPLETED)
                    stopper.cancel()
                    waker.cancel()
        log.info("worker.stopped", worker_id=self.worker_id)

    async def run_once(self) -> int:
        """Claim one batch of due deliveries and carry each to its next state."""
        rows = await asyncio.to_thread(self._claim)
        if not rows:
            return 0
        limit = asyncio.Semaphore(self.settings.worker_concurrency)

        async def one(row: dict[str, Any]) -> None:
            async with limit:
                try:
                    await self.process(row)
                except Exception as exc:
                    if self.core.db.availability.observe(exc) is not None:
                        # The database went away mid-delivery: nothing to record now. The
                        # row stays claimed; when its lease runs out it is claimed again
                        # and carried on under the same identity.
                        log.info("delivery.interrupted", delivery_id=row["id"])
                        return
                    # Our own failure (a secret that will not open, a bug): recorded as a
                    # failed attempt, so it follows the retry schedule and ends dead
                    # instead of being re-claimed forever without a trace.
                    log.exception("delivery.process_failed", delivery_id=row["id"])
                    await self._record_internal_failure(row, exc)

        await asyncio.gather(*(one(r) for r in rows))
        return len(rows)

    def _claim(self) -> list[dict[str, Any]]:
        with self.core.db.transaction(now=self.clock()) as tx:
            return outbox.claim(
                tx.conn,
                now=tx.now,
                worker_id=self.worker_id,
                lease_s=self.settings.worker_lease_s,
                limit=self.settings.worker_batch,
            )

    async def process(self, row: dict[str, Any]) -> None:
        prepared = await asyncio.to_thread(self._prepare, row)
        if prepared.gate.action != "send" or prepared.message is None:
            await asyncio.to_thread(self._settle_gate, row, prepared.gate)
            return
        channel = self.channels.get(row["channel"])
        if channel is None:
            await asyncio.to_thread(
                self._settle_gate, row, Gate("skip", f"channel {row['channel']} not configured")
            )
            return
        if row["channel"] == "webhook":
            await self._bucket(row["tenant_id"], self.settings.webhook_rate_per_s).take()
            own_rate = prepared.message.target.get("rate_limit_per_s")
            if own_rate:
                await self._bucket(f"endpoint:{row['destination']}", own_rate).take()
        # Waiting for a concurrency slot or the rate limit may have eaten the lease: renew
        # it, and if another worker took the row meanwhile, leave the send to it.
        if not await asyncio.to_thread(self._renew_lease, row["id"]):
            log.info("delivery.lease_lost", delivery_id=row["id"])
            return
        result = await self._send(channel, prepared.message)
        await self._record_after_send(row, prepared, result)

    async def _record_after_send(
        self, row: dict[str, Any], prepared: Prepared, result: Result
    ) -> None:
        """Record what the send did, waiting out a database outage (up to the lease): a
        send that happened must not be repeated because its record could not be written.
        Recording late is safe: ``_record`` only notes the attempt if the row was re-claimed."""
        give_up = time.monotonic() + self.settings.worker_lease_s
        delay = 0.1
        while True:
            try:
                await asyncio.to_thread(self._record, row, prepared, result)
                return
            except Exception as exc:
                if self.core.db.availability.observe(exc) is None or time.monotonic() > give_up:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _renew_lease(self, delivery_id: str) -> bool:
        with self.core.db.transaction(now=self.clock()) as tx:
            return outbox.renew_lease(
                tx.conn, delivery_id, self.worker_id, tx.now, self.settings.worker_lease_s
            )

    async def _record_internal_failure(self, row: dict[str, Any], exc: Exception) -> None:
        error = TransientDeliveryError(f"internal error before sending: {type(exc).__name__}")
        try:
            await asyncio.to_thread(
                self._record,
                row,
                Prepared(Gate("send", "internal failure")),
                Result("transient", None, error, 0, self.clock()),
            )
        except Exception:
            log.exception("delivery.record_failed", delivery_id=row["id"])

    def _bucket(self, key: str, rate: float) -> TokenBucket:
        """Outbound rate per tenant (a webhook is an amplifier a compromised account could
        aim at a third party), and per endpoint when the endpoint sets its own."""
        bucket = self._buckets.get(key)
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[key] = TokenBucket(rate, burst=max(1.0, rate))
        return bucket

    async def _send(self, channel: Channel, msg: Outbound) -> Result:
        started = self.clock()
        t0 = time.monotonic()
        sent: Sent | None = None
        error: DeliveryError | None = None
        try:
            sent = await channel.send(msg)
            outcome = "accepted"
        except TransientDeliveryError as exc:
            outcome, error = "transient", exc
        except DeliveryUnknown as exc:
            outcome, error = "unknown", exc
        except PermanentDeliveryError as exc:
            outcome, error = "permanent", exc
        except Exception as exc:  # a channel bug must not lose the delivery
            log.exception("delivery.channel_crashed", channel=msg.channel)
            outcome = "transient"
            error = TransientDeliveryError(f"channel error: {type(exc).__name__}")
        return Result(outcome, sent, error, int((time.monotonic() - t0) * 1000), started)

    # --- prepare: the checks at dispatch time --------------------------------------

    def _prepare(self, row: dict[str, Any]) -> Prepared:
        now = self.clock()
        with self.core.db.read() as conn:
            if row["channel"] == "webhook":
                return self._prepare_webhook(conn, row, now)
            return self._prepare_person(conn, row, now)

    def _prepare_webhook(self, conn: Any, row: dict[str, Any], now: datetime) -> Prepared:
        try:
            ep = endpoints.get(conn, row["tenant_id"], row["destination"])
        except Exception:
            return Prepared(Gate("cancel", "endpoint deleted"))
        ctx = DispatchContext(
            channel="webhook",
            urgency="normal",
            endpoint_enabled=ep["status"] == "enabled",
            endpoint_wants_event=not ep["event_types"] or row["event_type"] in ep["event_types"],
        )
        decided = gate(ctx, now)
        if decided.action != "send":
            return Prepared(decided, created_at=row["created_at"])
        secrets = [self.core.box.open(s["sealed"]) for s in ep["secrets"] if endpoints.live(s, now)]
        msg = Outbound(
            delivery_id=row["id"],
            tenant_id=row["tenant_id"],
            channel="webhook",
            destination=ep["id"],
            identity=row["id"],
            attempt_no=row["attempt_count"],
            now=now,
            urgency="normal",
            title=row["event_type"] or "",
            body="",
            deep_link=f"{self._base}/runs/{row['run_id']}" if row["run_id"] else self._base,
            run_id=row["run_id"],
            event_type=row["event_type"],
            payload=row["payload"],
            target={
                "url": ep["url"],
                "secrets": secrets,
                "rate_limit_per_s": ep["rate_limit_per_s"],
            },
        )
        return Prepared(decided, msg, created_at=row["created_at"])

    @property
    def _base(self) -> str:
        return self.settings.public_url.rstrip("/")

    def _prepare_person(self, conn: Any, row: dict[str, Any], now: datetime) -> Prepared:
        tenant_id = row["tenant_id"]
        note = conn.execute(
            sa.select(t.notifications).where(
                t.notifications.c.tenant_id == tenant_id,
                t.notifications.c.id == row["notification_id"],
            )
        ).first()
        if note is None:
            return Prepared(Gate("cancel", "notification is gone"))
        n = dict(note._mapping)
        user_id = n["recipient_user_id"]
        role = accounts.membership_role(conn, tenant_id, user_id)
        run = runs.get_run(conn, tenant_id, n["run_id"])
        can_see = role is not None and runs.can_see_run(
            conn,
            Principal(tenant_id=tenant_id, kind="user", role=role, user_id=user_id),
            n["run_id"],
        )
        prefs = conn.execute(
            sa.select(t.preferences).where(
                t.preferences.c.tenant_id == tenant_id, t.preferences.c.user_id == user_id
            )
        ).first()
        consent = (prefs.consent if prefs else None) or {}
        target, exists = self._destination(conn, row, user_id)
        ctx = DispatchContext(
            channel=row["channel"],
            urgency=n["urgency"],
            notification_state=n["state"],
            expires_at=n["expires_at"],
            attention_type=n["attention_type"],
            transition_version=n["transition_version"],
            run_state=None if run is None else run["state"],
            run_version=None if run is None else run["version"],
            is_member=role is not None,
            can_see_run=can_see,
            destination_exists=exists,
            consented_urgencies=consented_urgencies(consent, row["channel"]),
            quiet_windows=tuple(
                QuietWindow.parse(w) for w in ((prefs.quiet_hours if prefs else None) or [])
            ),
            timezone=(prefs.timezone if prefs else None) or "UTC",
            quiet_bypass=policy_for(self.core, conn, tenant_id).quiet_bypass,
        )
        decided = gate(ctx, now)
        prepared = Prepared(
            decided,
            attention_type=n["attention_type"],
            expires_at=n["expires_at"],
            created_at=n["created_at"],
        )
        if decided.action != "send":
            return prepared
        prepared.message = Outbound(
            delivery_id=row["id"],
            tenant_id=tenant_id,
            channel=row["channel"],
            destination=row["destination"],
            identity=row["id"],
            attempt_no=row["attempt_count"],
            now=now,
            urgency=n["urgency"],
            title=NEUTRAL_SUMMARY.get(n["attention_type"], "A run changed"),
            body=NEUTRAL_BODY.get(n["attention_type"], "Open Runbell for details."),
            deep_link=f"{self._base}/n/{n['id']}",
            notification_id=n["id"],
            run_id=n["run_id"],
            collapse_key=f"{tenant_id}:{n['run_id']}",
            expires_at=n["expires_at"],
            target=target,
        )
        return prepared

    def _destination(
        self, conn: Any, row: dict[str, Any], user_id: str
    ) -> tuple[dict[str, Any], bool]:
        """Where the person is reachable *now* (an address may have changed)."""
        channel = row["channel"]
        if channel == "email":
            email = conn.execute(sa.select(t.users.c.email).where(t.users.c.id == user_id)).scalar()
            return {"to": email}, email is not None
        if channel == "webpush":
            sub = conn.execute(
                sa.select(t.push_subscriptions).where(
                    t.push_subscriptions.c.tenant_id == row["tenant_id"],
                    t.push_subscriptions.c.id == row["destination"],
                )
            ).first()
            if sub is None:
                return {}, False
            return {"endpoint": sub.endpoint, "p256dh": sub.p256dh, "auth": sub.auth}, True
        if channel == "chat":
            dest = conn.execute(
                sa.select(t.chat_destinations).where(
                    t.chat_destinations.c.tenant_id == row["tenant_id"],
                    t.chat_destinations.c.id == row["destination"],
                )
            ).first()
            if dest is None:
                return {}, False
            return {"url": self.core.box.open(dest.url_sealed)}, True
        return {}, False

    # --- settle: outcomes that sent nothing ----------------------------------------

    def _settle_gate(self, row: dict[str, Any], decided: Gate) -> None:
        with self.core.db.transaction(now=self.clock()) as tx:
            cur = outbox.lock_claimed(tx.conn, row["id"], row["notification_id"])
            if cur is None or cur["status"] != "sending" or cur["claimed_by"] != self.worker_id:
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
                self._withdraw(tx, row, decided)
        log.info(
            "delivery.not_sent",
            delivery_id=row["id"],
            channel=row["channel"],
            action=decided.action,
            reason=decided.reason,
        )

    def _withdraw(self, tx: Any, row: dict[str, Any], decided: Gate) -> None:
        """The recipient may no longer see this: close it, and scrub stored previews."""
        note = tx.conn.execute(
            sa.select(t.notifications).where(t.notifications.c.id == row["notification_id"])
        ).first()
        if note is None:
            return
        n = dict(note._mapping)
        if decided.close_as:
            close_notification(tx, n, decided.close_as, decided.reason)
        if decided.redact:
            tx.conn.execute(
                sa.update(t.notifications)
                .where(t.notifications.c.id == n["id"])
                .values(reason=None, summary="Notification withdrawn")
            )
            tx.conn.execute(
                sa.update(t.deliveries)
                .where(t.deliveries.c.notification_id == n["id"])
                .values(payload=None)
            )

    # --- record: after a send ------------------------------------------------------

    def _record(self, row: dict[str, Any], prepared: Prepared, result: Result) -> None:
        err = result.error
        channel = row["channel"]
        with self.core.db.transaction(now=self.clock()) as tx:
            cur = outbox.lock_claimed(tx.conn, row["id"], row["notification_id"])
            if cur is None:
                return
            outbox.add_attempt(
                tx.conn,
                {**cur, "attempt_count": row["attempt_count"]},
                started_at=result.started_at or tx.now,
                finished_at=tx.now,
                outcome=result.outcome,
                status_code=(result.sent.status_code if result.sent else err and err.status_code),
                provider_message_id=result.sent.provider_message_id if result.sent else None,
                duration_ms=result.duration_ms,
                error=None if err is None else err.detail[:500],
                response_excerpt=(
                    (result.sent.response_excerpt if result.sent else err and err.response_excerpt)
                    or None
                ),
            )
            if cur["status"] != "sending" or cur["claimed_by"] != self.worker_id:
                # Acknowledged (cancelled) or re-claimed while in flight: the attempt is
                # recorded, nothing is repeated.
                return
            if result.outcome == "accepted":
                self._accepted(tx, row, prepared)
            elif result.outcome == "permanent":
                assert isinstance(err, PermanentDeliveryError)
                self._failed(tx, row, err)
            else:
                self._retry_or_dead(tx, row, cur, prepared, result)
        labels = (prepared.attention_type, channel)
        if result.outcome == "accepted":
            metrics.ACCEPTED.labels(*labels).inc()
            if prepared.created_at is not None:
                metrics.DISPATCH_LATENCY.labels(*labels).observe(
                    max(0.0, (tx.now - prepared.created_at).total_seconds())
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

    def _accepted(self, tx: Any, row: dict[str, Any], prepared: Prepared) -> None:
        outbox.settle(
            tx.conn, row["id"], tx.now, status="accepted", next_attempt_at=None, last_error=None
        )
        if row["notification_id"]:
            tx.conn.execute(
                sa.update(t.notifications)
                .where(
                    t.notifications.c.id == row["notification_id"],
                    t.notifications.c.first_delivered_at.is_(None),
                )
                .values(first_delivered_at=tx.now)
            )
        if row["channel"] == "webhook":
            endpoints.update(tx.conn, row["tenant_id"], row["destination"], tx.now, dead_streak=0)
        if row["channel"] == "webpush":
            tx.conn.execute(
                sa.update(t.push_subscriptions)
                .where(t.push_subscriptions.c.id == row["destination"])
                .values(last_success_at=tx.now)
            )

    def _failed(self, tx: Any, row: dict[str, Any], err: PermanentDeliveryError) -> None:
        outbox.settle(
            tx.conn,
            row["id"],
            tx.now,
            status="failed",
            next_attempt_at=None,
            last_error=err.detail[:500],
        )
        if err.gone and row["channel"] == "webpush":
            # The browser unsubscribed (404/410): forget it, and its other queued sends.
            tx.conn.execute(
                sa.delete(t.push_subscriptions).where(
                    t.push_subscriptions.c.id == row["destination"]
                )
            )
            tx.conn.execute(
                sa.update(t.deliveries)
                .where(
                    t.deliveries.c.channel == "webpush",
                    t.deliveries.c.destination == row["destination"],
                    t.deliveries.c.status.in_(notes.PENDING_DELIVERY),
                )
                .values(status="cancelled", last_error="subscription gone", updated_at=tx.now)
            )
        if err.gone and row["channel"] == "webhook":
            self._disable_endpoint(tx, row, f"endpoint answered {err.status_code or 'gone'}")
        if err.operator_alert:
            self._operator_event(tx, row, "delivery.misconfigured", err.detail)

    def _retry_or_dead(
        self, tx: Any, row: dict[str, Any], cur: dict[str, Any], prepared: Prepared, result: Result
    ) -> None:
        err = result.error
        if row["notification_id"]:
            state = tx.conn.execute(
                sa.select(t.notifications.c.state).where(
                    t.notifications.c.id == row["notification_id"]
                )
            ).scalar()
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
        decision = RetryStrategy.for_channel(row["channel"]).decide(
            attempts=cur["attempt_count"],
            now=tx.now,
            rng=self.rng,
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
        if row["channel"] == "webhook":
            ep = endpoints.get(tx.conn, row["tenant_id"], row["destination"], for_update=True)
            streak = ep["dead_streak"] + 1
            endpoints.update(tx.conn, row["tenant_id"], ep["id"], tx.now, dead_streak=streak)
            if streak >= self.settings.webhook_disable_after_dead and ep["status"] == "enabled":
                self._disable_endpoint(tx, row, f"{streak} deliveries in a row ended dead")

    def _disable_endpoint(self, tx: Any, row: dict[str, Any], reason: str) -> None:
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
        self._operator_event(tx, row, "webhook_endpoint.disabled", reason)
        log.warning("webhook_endpoint.disabled", endpoint_id=row["destination"], reason=reason)

    def _operator_event(self, tx: Any, row: dict[str, Any], kind: str, detail: str) -> None:
        tx.conn.execute(
            t.operator_events.insert().values(
                id=new_id("op"),
                tenant_id=row["tenant_id"],
                kind=kind,
                detail={
                    "delivery_id": row["id"],
                    "channel": row["channel"],
                    "destination": row["destination"],
                    "detail": detail[:500],
                },
                created_at=tx.now,
            )
        )
        metrics.OPERATOR_ALERTS.labels(kind).inc()
