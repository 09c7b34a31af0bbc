"""The delivery worker: claim due outbox rows, check them *now*, send, record.

A delivery goes through four steps; the first and the last are shared by a batch:

1. **claim** (one transaction per batch, :mod:`runbell.flows.delivery_claim`): ``status →
   sending`` with a lease, the batch's webhook endpoints read, the sends planned against
   the rate limits every worker shares;
2. **prepare** (:mod:`runbell.flows.delivery_prepare`): the gate
   (:func:`runbell.domain.dispatch.gate`) on the state of things *now* — for webhooks
   from the endpoints read at the claim, for person channels one read each — and the
   :class:`~runbell.channels.base.Outbound`, neutral texts and an opaque id;
3. **send** outside any transaction, up to ``worker_concurrency`` at once;
4. **record** (:mod:`runbell.flows.delivery_record`): the results of the sends that finished
   together, in one transaction (group commit, :class:`Recorder`).

A worker killed between 1 and 4 leaves the rows ``sending`` with a lease that runs out;
the next claim takes them and sends them again under the same identity (the delivery id
is the webhook-id, the push Topic source and the email Message-ID), so receivers can
dedupe: at least once, never under a new id.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
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
from runbell.dispatch.wiring import build_channels
from runbell.domain.dispatch import Gate
from runbell.domain.records import Delivery
from runbell.flows.context import Core
from runbell.flows.delivery_claim import ClaimBatch, Claimed, claim_batch, renew_lease
from runbell.flows.delivery_prepare import Prepared, prepare
from runbell.flows.delivery_record import Result, record_attempts, settle_gate
from runbell.ids import new_id

log = structlog.get_logger(__name__)


Done = tuple[Delivery, Prepared, Result]


class Recorder:
    """Group commit for results: every send that finishes while a write is running goes
    into the next one, so a busy worker writes many results per transaction and an idle
    one writes each result at once (no waiting for a batch to fill)."""

    def __init__(self, write: Callable[[list[Done]], Awaitable[None]]) -> None:
        self._write = write
        self._pending: list[tuple[Done, asyncio.Future[None]]] = []
        self._flusher: asyncio.Future[None] | None = None

    async def record(self, done: Done) -> None:
        """Returns once the result is written (``write`` never raises)."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((done, fut))
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush())
        await fut

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await self._write([d for d, _ in batch])
                finally:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_result(None)
        finally:
            self._flusher = None


class Worker:
    """One delivery worker: ``run`` drains until stopped (a pipeline: claims, sends and
    result writes overlap), ``run_once`` takes one batch and writes its results in one
    transaction."""

    def __init__(
        self,
        core: Core,
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
        self._opened: dict[str, str] = {}  # unsealed endpoint secrets, by sealed text
        self._sending = asyncio.Semaphore(self.settings.worker_concurrency)
        self._recorder = Recorder(self._record_after_send)

    # --- the loop ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Drain until ``stop``; sleep until a commit queues work (or the poll interval).

        At most ``worker_batch`` rows are held at a time (claimed, not yet recorded); a
        new claim takes the room the finished ones left, without waiting for the slowest
        send of the previous claim."""
        log.info("worker.started", worker_id=self.worker_id, channels=sorted(self.channels))
        active: set[asyncio.Future[None]] = set()
        freed = asyncio.Event()
        batch = self.settings.worker_batch
        with self.core.hub.listen_outbox() as listener:
            while not stop.is_set():
                room = batch - len(active)
                if active and room < max(1, batch // 4):
                    # Nearly full: wait for room (or stop) rather than claim a few rows.
                    freed.clear()
                    await _first(stop.wait(), freed.wait())
                    continue
                try:
                    got = await asyncio.to_thread(self._claim, room)
                except Exception as exc:
                    # A database outage is logged once by Availability; we poll again.
                    if self.core.db.availability.observe(exc) is None:
                        log.exception("worker.tick_failed")
                    got = ClaimBatch([])
                for c in got.claimed:
                    task = asyncio.ensure_future(self._deliver(c))
                    active.add(task)
                    task.add_done_callback(active.discard)
                    task.add_done_callback(lambda _: freed.set())
                if got.claimed and len(got.claimed) >= room:
                    continue  # there may be more: claim again as soon as there is room
                # Nothing more is due: sleep until a commit queues work, a row given back
                # for the rate limits is due again, or the poll interval.
                wait = self.settings.worker_poll_s
                if got.next_due is not None:
                    wait = min(wait, max(0.01, (got.next_due - self.clock()).total_seconds()))
                await _first(stop.wait(), listener.wait(wait))
            if active:
                await asyncio.wait(active)
        log.info("worker.stopped", worker_id=self.worker_id)

    async def run_once(self) -> int:
        """Claim one batch of due deliveries, carry each to its next state, and write the
        results of the sends in one transaction."""
        got = await asyncio.to_thread(self._claim, self.settings.worker_batch)
        if not got.claimed:
            return 0
        sent = await asyncio.gather(*(self._carry(c) for c in got.claimed))
        await self._record_after_send([d for d in sent if d is not None])
        return len(got.claimed)

    async def send_now(self, delivery_id: str) -> bool:
        """Carry one queued delivery to its next state now, through the same steps as
        every other (claim, prepare, send, record), building its channel if this worker
        has none for it: for a process without a worker loop that has just queued
        something a person is waiting for (the sign-in email of ``runbell api``). False
        when it was not due, or another worker claimed it first (it sends it then)."""
        got = await asyncio.to_thread(self._claim, 1, delivery_id)
        if not got.claimed:
            return False
        missing = {c.row["channel"] for c in got.claimed} - set(self.channels)
        if missing:
            self.channels.update(await asyncio.to_thread(build_channels, self.core, only=missing))
        sent = await asyncio.gather(*(self._carry(c) for c in got.claimed))
        await self._record_after_send([d for d in sent if d is not None])
        return True

    def _claim(self, limit: int, only: str | None = None) -> ClaimBatch:
        return claim_batch(
            self.core,
            worker_id=self.worker_id,
            limit=limit,
            now=self.clock(),
            opened=self._opened,
            only=only,
        )

    async def _deliver(self, c: Claimed) -> None:
        done = await self._carry(c)
        if done is not None:
            await self._recorder.record(done)

    async def _carry(self, c: Claimed) -> Done | None:
        """Check, wait for the rate limits' turn, send; the result to record, or None
        when there is nothing to record (not sent, or already settled)."""
        row = c.row
        try:
            return await self._check_and_send(c)
        except Exception as exc:
            if self.core.db.availability.observe(exc) is not None:
                # The database went away mid-delivery: nothing to record now. The row
                # stays claimed; when its lease runs out it is claimed again and carried
                # on under the same identity.
                log.info("delivery.interrupted", delivery_id=row["id"])
                return None
            # Our own failure (a secret that will not open, a bug): recorded as a failed
            # attempt, so it follows the retry schedule and ends dead instead of being
            # re-claimed forever without a trace.
            log.exception("delivery.process_failed", delivery_id=row["id"])
            await self._record_internal_failure(row, exc)
            return None

    async def _check_and_send(self, c: Claimed) -> Done | None:
        row = c.row
        if c.error is not None:
            raise c.error
        prepared = c.prepared
        if prepared is None:
            prepared = await asyncio.to_thread(self._prepare, row)
        if prepared.gate.action != "send" or prepared.message is None:
            await asyncio.to_thread(self._settle_gate, row, prepared.gate)
            return None
        channel = self.channels.get(row["channel"])
        if channel is None:
            await asyncio.to_thread(
                self._settle_gate, row, Gate("skip", f"channel {row['channel']} not configured")
            )
            return None
        # The send time the shared rate limits gave this row at its claim.
        delay = c.send_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        async with self._sending:
            # The claim's lease covers a prompt send; a row that waited long (a slow
            # receiver ahead of it) renews it first, and if another worker took the row
            # meanwhile, leaves the send to it.
            if time.monotonic() > c.fresh_until and not await asyncio.to_thread(
                self._renew_lease, row["id"]
            ):
                log.info("delivery.lease_lost", delivery_id=row["id"])
                return None
            result = await self._send(channel, prepared.message)
        return row, prepared, result

    async def _record_after_send(self, done: list[Done]) -> None:
        """Record what the sends did, in one transaction, waiting out a database outage
        (up to the lease): a send that happened must not be repeated because its record
        could not be written. Recording late is safe: a row that was re-claimed meanwhile
        only gets its attempt noted. A batch that fails otherwise is written row by row,
        so one bad row cannot keep the others from being recorded. Never raises."""
        if not done:
            return
        give_up = time.monotonic() + self.settings.worker_lease_s
        delay = 0.1
        while True:
            try:
                await asyncio.to_thread(self._record, done)
                return
            except Exception as exc:
                outage = self.core.db.availability.observe(exc) is not None
                if outage and time.monotonic() <= give_up:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                if len(done) > 1 and not outage:
                    for one in done:
                        await self._record_after_send([one])
                    return
                for row, _, _ in done:
                    if outage:
                        log.info("delivery.interrupted", delivery_id=row["id"])
                    else:
                        log.exception("delivery.process_failed", delivery_id=row["id"])
                        await self._record_internal_failure(row, exc)
                return

    def _renew_lease(self, delivery_id: str) -> bool:
        return renew_lease(self.core, delivery_id, worker_id=self.worker_id, now=self.clock())

    async def _record_internal_failure(self, row: Delivery, exc: Exception) -> None:
        error = TransientDeliveryError(f"internal error before sending: {type(exc).__name__}")
        done = (
            row,
            Prepared(Gate("send", "internal failure")),
            Result("transient", None, error, 0, self.clock()),
        )
        try:
            await asyncio.to_thread(self._record, [done])
        except Exception:
            log.exception("delivery.record_failed", delivery_id=row["id"])

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

    def _prepare(self, row: Delivery) -> Prepared:
        return prepare(self.core, row, self.clock())

    def _settle_gate(self, row: Delivery, decided: Gate) -> None:
        settle_gate(self.core, row, decided, worker_id=self.worker_id, clock=self.clock)

    def _record(self, done: list[Done]) -> None:
        record_attempts(self.core, done, worker_id=self.worker_id, rng=self.rng, clock=self.clock)


async def _first(*waits: Awaitable[Any]) -> None:
    """Wait until the first of ``waits`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
