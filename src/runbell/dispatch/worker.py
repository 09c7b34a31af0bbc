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

This module is the loop: claiming, concurrency, rate limits, the lease renewal and the
send. Step 2 lives in :mod:`runbell.dispatch.prepare`, settling an outcome (sent or not)
in :mod:`runbell.dispatch.record`.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import structlog

from runbell.channels.base import (
    Channel,
    DeliveryError,
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    TransientDeliveryError,
)
from runbell.dispatch.prepare import Prepared, prepare
from runbell.dispatch.record import Result, record_attempt, settle_gate
from runbell.domain.dispatch import Gate
from runbell.flows.context import Runbell
from runbell.ids import new_id
from runbell.store import outbox
from runbell.store.db import OUTBOX_KEY

log = structlog.get_logger(__name__)


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
    """One delivery worker: ``run`` drains until stopped, ``run_once`` takes one batch,
    ``process`` carries one claimed row through prepare, send and record."""

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

    # --- the steps, in their own modules --------------------------------------------

    def _prepare(self, row: dict[str, Any]) -> Prepared:
        return prepare(self.core, row, self.clock())

    def _settle_gate(self, row: dict[str, Any], decided: Gate) -> None:
        settle_gate(self.core, row, decided, worker_id=self.worker_id, clock=self.clock)

    def _record(self, row: dict[str, Any], prepared: Prepared, result: Result) -> None:
        record_attempt(
            self.core,
            row,
            prepared,
            result,
            worker_id=self.worker_id,
            rng=self.rng,
            clock=self.clock,
        )
