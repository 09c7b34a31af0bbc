"""In-process wake-ups for long-polls, SSE streams and workers when feed events commit.

:class:`Hub` is thread-safe: the committing thread calls :meth:`Hub.publish`, waiting
coroutines (on any event loop) wake at once. Between processes, ``runbell.runtime.wakeup``
carries the same wake-ups over PostgreSQL LISTEN/NOTIFY. Waiters still re-check on a slow
timer, so a lost wake-up costs latency, never an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import weakref
from collections import defaultdict
from typing import Any

OUTBOX_KEY = "*outbox"  # a hub channel no tenant id can collide with


class Hub:
    def __init__(self) -> None:
        self._outbox_ticks = itertools.count(1)
        self._lock = threading.Lock()
        self._heads: dict[str, int] = {}
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = (
            defaultdict(set)
        )
        self.remote_publish: queue.SimpleQueue[tuple[str, int]] | None = None
        # Per event loop: the stream fan-out (``runbell.runtime.streams.Streams``) there.
        self.per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )

    def head(self, tenant_id: str) -> int | None:
        return self._heads.get(tenant_id)

    def committed(self, heads: dict[str, int], wake_outbox: bool) -> None:
        """A commit of this process (``Database.after_commit``): wake the waiters of every
        feed it moved, and the workers when it made deliveries due."""
        for tenant_id, head in heads.items():
            self.publish(tenant_id, head)
        if wake_outbox:
            self.publish(OUTBOX_KEY, next(self._outbox_ticks))

    def publish(self, tenant_id: str, seq: int, *, local: bool = True) -> None:
        with self._lock:
            if seq > self._heads.get(tenant_id, -1):
                self._heads[tenant_id] = seq
            waiters = list(self._waiters.get(tenant_id, ()))
        for loop, ev in waiters:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(ev.set)
        if local and self.remote_publish is not None:
            self.remote_publish.put((tenant_id, seq))

    def listen(self, tenant_id: str) -> Listener:
        """Register interest *before* reading, so a commit between the read and the wait
        still wakes us (no lost wake-up window)."""
        return Listener(self, tenant_id)

    def listen_outbox(self) -> Listener:
        """A listener woken when a commit of this process (or, over the bridge, of a peer)
        made deliveries due: what the workers wait on."""
        return Listener(self, OUTBOX_KEY)

    def _add(self, tenant_id: str, key: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._lock:
            self._waiters[tenant_id].add(key)

    def _remove(self, tenant_id: str, key: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._lock:
            self._waiters[tenant_id].discard(key)
            if not self._waiters[tenant_id]:
                del self._waiters[tenant_id]

    def waiter_count(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._waiters.values())


class Listener:
    """A registered waiter for one tenant's commits; use as a context manager."""

    def __init__(self, hub: Hub, tenant_id: str) -> None:
        self.hub = hub
        self.tenant_id = tenant_id
        self.event = asyncio.Event()
        self._key = (asyncio.get_running_loop(), self.event)

    def __enter__(self) -> Listener:
        self.hub._add(self.tenant_id, self._key)
        return self

    def __exit__(self, *exc: object) -> None:
        self.hub._remove(self.tenant_id, self._key)

    async def wait(self, timeout: float) -> bool:
        """True if a commit arrived since registration (or arrives within ``timeout``)."""
        try:
            async with asyncio.timeout(timeout):
                await self.event.wait()
        except TimeoutError:
            return False
        self.event.clear()
        return True
