"""Server-Sent Event fan-out: one database read per commit, whatever the number of streams.

One :class:`Streams` per process and event loop holds every open stream. Per tenant with
streams, one :class:`Tail` task waits for the tenant's commits (the
:class:`~runbell.runtime.hub.Hub` wake-up, local or over LISTEN/NOTIFY, and a slow fallback
timer), reads the new events once — all of them, on one dedicated thread, not the API's
thread pool — renders each event's frame once (in the face's :class:`Framing`), keeps
them in a bounded buffer, and wakes the tenant's subscribers. Each
:class:`Subscriber` takes from the buffer what its principal may see
(:func:`runbell.store.feed.visible`, the Python twin of the per-subscriber query) and
moves its position to the tenant's head.

A subscriber whose position is not covered by the buffer (an old cursor, a slow client
that fell behind, or a member whose run access the buffered batch did not read) reads its
own pages from the database (:func:`runbell.store.feed.read`, exactly the old query) on a
separate small pool until it is covered again: memory stays bounded by the buffer, never
by a per-subscriber queue, and nothing is skipped.

One ticker task per :class:`Streams` flags keep-alives and credential re-checks on every
stream at once; no stream owns a timer, and an idle stream costs no CPU. The ticker keeps
running while the database is away, so keep-alives flow through an outage.
"""

# size: the fan-out and the subscriber it writes to are one concept: the direct write
# (Subscriber.push_now, issue 21) shares the subscriber's position, buffer and parked state
# with the tail that calls it, and splitting them would expose that state across modules.

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from runbell.domain.principal import Principal
from runbell.domain.records import FeedEvent
from runbell.runtime.hub import Hub
from runbell.store import feed
from runbell.store.db import Database

log = structlog.get_logger(__name__)

PAGE = 500  # events per database read (tail and catch-up)
BUFFER_EVENTS = 2_000  # events kept per tenant for subscribers that are a little behind
# The fan-out (a commit, a keep-alive round) gives the event loop back after this much
# time: going through every stream at once queues all their writes ahead of any request
# that arrives meanwhile (a commit to 1,000 streams is milliseconds of socket writes); a
# request waits about this long per turn of the loop it needs.
SLICE_S = 0.001


class Framing(Protocol):
    """How events are written on the wire (``runbell.api.sse`` gives Server-Sent Events):
    the fan-out renders each event once and hands the bytes on, never knowing the format."""

    keep_alive: bytes

    def event(self, row: FeedEvent, /) -> bytes:
        """One feed event (a ``feed_events`` row) as its frame."""
        ...

    def position(self, position: int, /) -> bytes:
        """A frame that moves the client's resume position on without an event."""
        ...


class Sink(Protocol):
    """Where the fan-out may write a stream's bytes itself (the face's response gives it):
    waking the stream's own task to write them costs several times the write."""

    def ready(self) -> bool:
        """Whether a write now goes out in order (no earlier write still waiting)."""
        ...

    def write(self, chunk: bytes, /) -> None:
        """Write ``chunk`` now; if the client is slow it finishes later, in order."""
        ...


@dataclass(frozen=True, slots=True)
class StreamEvent:
    seq: int
    user_id: str | None
    run_id: str | None
    frame: bytes  # rendered once, written to every stream that may see it
    run_access: frozenset[str]  # the batch's checked users allowed to see the run


@dataclass(slots=True)
class EventBatch:
    """Events (after, head] of one tenant, as one read found them."""

    after: int
    head: int
    events: tuple[StreamEvent, ...]
    checked: frozenset[str]  # members whose run access was read with this batch
    run_events: bool  # any event of a run (not addressed to one person)
    users: frozenset[str]  # the people the other events are addressed to
    by_audience: dict[str, bytes] = field(default_factory=dict)  # keys' chunks


class Streams:
    """Every open stream of one process and event loop (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        hub: Hub,
        framing: Framing,
        *,
        keepalive_s: float,
        recheck_s: float,
        fallback_s: float,
        buffer_events: int = BUFFER_EVENTS,
    ) -> None:
        self.db = db
        self.hub = hub
        self.framing = framing
        self.keepalive_s = keepalive_s
        self.recheck_s = recheck_s
        self.fallback_s = fallback_s
        self.buffer_events = buffer_events
        self.tails: dict[str, Tail] = {}
        self.subscribers: set[Subscriber] = set()
        # The tails' reads, one at a time, off the API's thread pool; catch-up reads
        # apart, so a reconnecting crowd does not delay the live tail. Made with the first
        # stream, let go with the last.
        self.tail_reader: ThreadPoolExecutor | None = None
        self.page_reader: ThreadPoolExecutor | None = None
        self.reads = 0  # tail reads done (for tests and metrics)
        self._ticker: asyncio.Task[None] | None = None

    def subscribe(self, who: Principal, position: int) -> Subscriber:
        """A stream for ``who`` reading after ``position``; close it when done."""
        if self.tail_reader is None or self.page_reader is None:
            self.tail_reader = ThreadPoolExecutor(1, thread_name_prefix="runbell-feed-tail")
            self.page_reader = ThreadPoolExecutor(2, thread_name_prefix="runbell-feed-pages")
        tail = self.tails.get(who.tenant_id)
        if tail is None:
            tail = self.tails[who.tenant_id] = Tail(self, who.tenant_id)
        sub = Subscriber(self, tail, who, position)
        tail.add(sub)
        self.subscribers.add(sub)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        return sub

    def _drop(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        tail = sub.tail
        tail.remove(sub)
        if not tail.subscribers and self.tails.get(tail.tenant_id) is tail:
            del self.tails[tail.tenant_id]
            tail.stop()
        if not self.subscribers:
            if self._ticker is not None:
                self._ticker.cancel()
                self._ticker = None
            for pool in (self.tail_reader, self.page_reader):
                if pool is not None:
                    pool.shutdown(wait=False)  # a read in flight finishes on its own
            self.tail_reader = self.page_reader = None

    async def _tick(self) -> None:
        """Flag keep-alives and re-checks on every stream at once (one timer in all)."""
        now = time.monotonic()
        next_keepalive, next_recheck = now + self.keepalive_s, now + self.recheck_s
        while self.subscribers:
            await asyncio.sleep(max(0.0, min(next_keepalive, next_recheck) - time.monotonic()))
            now = time.monotonic()
            keepalive, recheck = now >= next_keepalive, now >= next_recheck
            if keepalive:
                next_keepalive = now + self.keepalive_s
            if recheck:
                next_recheck = now + self.recheck_s
            started = time.perf_counter()
            for sub in list(self.subscribers):
                sub.keepalive_due |= keepalive
                sub.recheck_due |= recheck
                if recheck or not sub.push_now():
                    sub.wake()
                if time.perf_counter() - started >= SLICE_S:
                    await asyncio.sleep(0)  # let requests in between (see SLICE_S)
                    started = time.perf_counter()

    def close(self) -> None:
        """End every stream (server shutdown); they answer None from :meth:`Subscriber.next`."""
        for sub in list(self.subscribers):
            sub.end()


class Tail:
    """One tenant's live feed: one read per wake-up, fanned out to its subscribers."""

    def __init__(self, streams: Streams, tenant_id: str) -> None:
        self.streams = streams
        self.tenant_id = tenant_id
        self.head = -1  # read through here; -1 until the first read
        self.base = -1  # the buffer holds every event after this position
        self.batches: deque[EventBatch] = deque()
        self.buffered = 0
        self.subscribers: set[Subscriber] = set()
        self.members: dict[str, int] = {}  # limited members subscribed: run access to read
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, sub: Subscriber) -> None:
        self.subscribers.add(sub)
        if sub.limited and sub.who.user_id:
            self.members[sub.who.user_id] = self.members.get(sub.who.user_id, 0) + 1

    def remove(self, sub: Subscriber) -> None:
        if sub not in self.subscribers:
            return
        self.subscribers.discard(sub)
        if sub.limited and sub.who.user_id:
            left = self.members.get(sub.who.user_id, 1) - 1
            if left:
                self.members[sub.who.user_id] = left
            else:
                self.members.pop(sub.who.user_id, None)

    def stop(self) -> None:
        self._task.cancel()

    async def _run(self) -> None:
        db = self.streams.db
        loop = asyncio.get_running_loop()
        failing = False
        # Registered before the first read: a commit after it always wakes us.
        with self.streams.hub.listen(self.tenant_id) as listener:
            while self.subscribers:
                users = frozenset(self.members)
                after = None if self.head < 0 else self.head
                try:
                    head, rows, access = await loop.run_in_executor(
                        self.streams.tail_reader, self._read, after, users
                    )
                except Exception as exc:
                    if db.availability.observe(exc) is None:
                        log.exception("feed.tail_read_failed", tenant_id=self.tenant_id)
                    failing = True
                    await listener.wait(self.streams.fallback_s)
                    continue
                try:
                    full = self._append(head, rows, access, users)
                except Exception:  # a bug, not an outage: keep the tail alive, say so
                    log.exception("feed.tail_append_failed", tenant_id=self.tenant_id)
                    await listener.wait(self.streams.fallback_s)
                    continue
                if failing or full is not None:
                    batch = self.batches[-1] if full is not None and self.batches else None
                    started = time.perf_counter()
                    for sub in list(self.subscribers):
                        # Streams that can see nothing of it only move on: no wake-up,
                        # no write (the id rides on the next keep-alive). Idle streams
                        # are written here; the others' tasks are woken to catch up.
                        if failing or batch is None or not sub.skip(batch):
                            if failing or not sub.push_now():
                                sub.wake()
                            if time.perf_counter() - started >= SLICE_S:
                                await asyncio.sleep(0)  # see SLICE_S
                                started = time.perf_counter()
                    failing = False
                if not full:
                    # Woken by the commit itself; the timeout only covers a lost wake-up.
                    await listener.wait(self.streams.fallback_s)

    def _read(
        self, after: int | None, users: frozenset[str]
    ) -> tuple[int, list[FeedEvent], dict[str, frozenset[str]]]:
        self.streams.reads += 1
        with self.streams.db.read() as conn:
            return feed.read_tail(conn, self.tenant_id, after, PAGE, users)

    def _append(
        self,
        head: int,
        rows: list[FeedEvent],
        access: dict[str, frozenset[str]],
        users: frozenset[str],
    ) -> bool | None:
        """Buffer what was read; True if the page was full (read again at once), False if
        it moved the head, None if nothing changed."""
        if self.head < 0:
            self.head = self.base = head
            return False
        if head <= self.head:
            return None
        render = self.streams.framing.event
        events = tuple(
            StreamEvent(
                seq=int(r["seq"]),
                user_id=r["user_id"],
                run_id=r["run_id"],
                frame=render(r),
                run_access=access.get(r["run_id"] or "", frozenset()),  # (no run: none)
            )
            for r in rows
        )
        full = len(rows) >= PAGE
        moved_to = events[-1].seq if full else head
        batch = EventBatch(
            self.head,
            moved_to,
            events,
            users,
            run_events=any(e.user_id is None for e in events),
            users=frozenset(e.user_id for e in events if e.user_id is not None),
        )
        self.batches.append(batch)
        self.buffered += len(events)
        self.head = moved_to
        while self.buffered > self.streams.buffer_events and len(self.batches) > 1:
            self.buffered -= len(self.batches.popleft().events)
            self.base = self.batches[0].after
        return full

    def covers(self, sub: Subscriber) -> bool:
        """Whether the buffer holds everything ``sub`` needs after its position."""
        if sub.position < self.base:
            return False
        if sub.scoped_key:
            return False  # a scoped credential reads its own page (store.feed._visible)
        if not sub.limited:
            return True
        user_id = sub.who.user_id
        for batch in reversed(self.batches):
            if batch.head <= sub.position:
                break
            if user_id not in batch.checked:
                return False
        return True


class Subscriber:
    """One open stream: its principal, its position, and what woke it."""

    def __init__(self, streams: Streams, tail: Tail, who: Principal, position: int) -> None:
        self.streams = streams
        self.tail = tail
        self.who = who
        self.position = position
        self.limited = feed.limited(who)
        self.scoped_key = who.kind == "key" and who.limits_runs
        # Keys see the same events whoever holds them: their chunks are built once.
        self.audience = f"{who.role}-key" if who.kind == "key" and not who.limits_runs else None
        # A bare future while waiting, not an asyncio.Event (a deque and more per stream).
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        self.keepalive_due = False
        self.recheck_due = False
        self.ended = False
        self.reading = False  # a catch-up read is in flight
        self.id_pending = False  # moved past unseen events; the id is not sent yet
        self.sink: Sink | None = None  # set by the face while the fan-out may write itself

    def skip(self, batch: EventBatch) -> bool:
        """Move past ``batch`` without a wake-up if it surely holds nothing for us."""
        if self.reading or self.position != batch.after or batch.run_events:
            return False
        if self.who.kind == "key" and self.who.role != "runtime":
            return False  # admin keys see every event
        if self.who.user_id is not None and self.who.user_id in batch.users:
            return False
        self.position = batch.head
        self.id_pending = True
        return True

    def wake(self) -> None:
        """Something may be new: :meth:`next` looks again."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def push_now(self) -> bool:
        """Write what is new for this stream (buffered events, or a due keep-alive) from the
        caller's task, without waking the stream's own; False if only that task can (it is
        busy, behind the buffer, ended, or has a re-check due): then :meth:`wake` it.

        Only while the task waits in :meth:`next`: it then writes nothing itself, so the
        bytes of the two never interleave, and the position it reads next is already moved
        on."""
        sink, waiter = self.sink, self._waiter
        if (
            sink is None
            or waiter is None
            or waiter.done()
            or self._woken
            or self.ended
            or self.recheck_due
            or not sink.ready()
        ):
            return False
        tail = self.tail
        chunk = b""
        if tail.head >= 0 and self.position < tail.head:
            if not tail.covers(self):
                return False  # a database read: the task's work
            chunk = self._from_buffer()
        if self.keepalive_due:
            self.keepalive_due = False
            if self.id_pending and not chunk:
                chunk = self.streams.framing.position(self.position)
            chunk += self.streams.framing.keep_alive
        if chunk:
            self.id_pending = False  # every chunk ends at the current position
            sink.write(chunk)
        return True

    def end(self) -> None:
        """Make :meth:`next` answer None (client gone, access ended, shutdown)."""
        self.ended = True
        self.wake()

    def close(self) -> None:
        """End and forget this stream (idempotent)."""
        self.end()
        self.streams._drop(self)

    async def next(self) -> bytes | None:
        """The next bytes to write: events, an ``id:`` frame, a keep-alive, or ``b""`` when
        a credential re-check is due (see :attr:`recheck_due`); None once ended."""
        while not self.ended:
            self._woken = False
            try:
                chunk = await self._pending()
            except Exception as exc:
                if self.streams.db.availability.observe(exc) is None:
                    raise
                chunk = b""  # the database is away: read again on the next wake-up
            if chunk:
                self.id_pending = False  # every chunk ends at the current position
                return chunk
            if self.keepalive_due:
                self.keepalive_due = False
                if self.id_pending:
                    self.id_pending = False
                    return (
                        self.streams.framing.position(self.position)
                        + self.streams.framing.keep_alive
                    )
                return self.streams.framing.keep_alive
            if self.recheck_due:
                return b""
            if not self._woken:
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
        return None

    async def _pending(self) -> bytes:
        tail = self.tail
        if tail.head < 0 or self.position >= tail.head:
            return b""
        if tail.covers(self):
            return self._from_buffer()
        return await self._from_database()

    def _from_buffer(self) -> bytes:
        tail, position = self.tail, self.position
        newer: list[EventBatch] = []
        for batch in reversed(tail.batches):  # newest first: usually only one is new
            if batch.head <= position:
                break
            newer.append(batch)
        if len(newer) == 1 and self.audience is not None and newer[0].after == position:
            # The usual case: one batch since this stream's last write, the same bytes for
            # every stream of this audience (keys see what their role sees).
            batch = newer[0]
            chunk = batch.by_audience.get(self.audience)
            if chunk is None:
                chunk = batch.by_audience[self.audience] = self._chunk(newer, position)
        else:
            newer.reverse()
            chunk = self._chunk(newer, position)
        self.position = tail.head
        if not chunk:
            # Only events this viewer may not see: its Last-Event-ID moves on with the
            # next keep-alive (so a reconnect does not start from an aging cursor).
            self.id_pending = True
        return chunk

    def _chunk(self, batches: list[EventBatch], position: int) -> bytes:
        """The frames of ``batches`` (oldest first, the first covering ``position``) that
        this stream may see, ending at the last batch's head; b"" if none."""
        parts: list[bytes] = []
        last = position  # the newest event shown
        for batch in batches:
            frames, shown_to = _shown(batch.events, self.who, position)
            if frames:
                parts.append(frames)
                last = shown_to
            position = batch.head
        if not parts:
            return b""
        if last != position:
            parts.append(self.streams.framing.position(position))
        return b"".join(parts)

    async def _from_database(self) -> bytes:
        loop = asyncio.get_running_loop()
        self.reading = True
        try:
            rows, moved_to = await loop.run_in_executor(
                self.streams.page_reader, self._read_page, self.position
            )
        finally:
            self.reading = False
        if self.ended:
            return b""
        render = self.streams.framing.event
        parts = [render(r) for r in rows]
        if moved_to != self.position and (not rows or int(rows[-1]["seq"]) != moved_to):
            parts.append(self.streams.framing.position(moved_to))
        self.position = moved_to
        return b"".join(parts)

    def _read_page(self, after: int) -> tuple[list[FeedEvent], int]:
        with self.streams.db.read() as conn:
            return feed.read(conn, self.who, after, PAGE)


def _shown(events: tuple[StreamEvent, ...], who: Principal, after: int) -> tuple[bytes, int]:
    """The frames of ``events`` after ``after`` that ``who`` may see, and the last one's
    sequence (``after`` if none)."""
    frames = []
    last = after
    for e in events:
        if e.seq > after and feed.visible(who, e.user_id, e.run_id, e.run_access):
            frames.append(e.frame)
            last = e.seq
    return b"".join(frames), last
