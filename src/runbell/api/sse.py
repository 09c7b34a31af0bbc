"""A lean Server-Sent Events response: the stream's own task writes what its iterator
yields, and one waiter on ``receive`` notices the client leaving.

It replaces sse-starlette's per-stream task group (a ping timer, a disconnect poller and a
shutdown watcher for every stream): keep-alives come from the iterator
(``runbell.runtime.streams`` flags them on every stream from one shared ticker), so an idle
stream costs one parked coroutine and no CPU.

:class:`StreamHandoff` (outermost middleware) lets the framework authenticate, validate
and answer errors as for any route, then streams *after* the framework's call chain has
returned: an open stream does not hold FastAPI's and Starlette's frames, exit stacks and
exception wrappers (about a third of a stream's memory) for hours.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from runbell.domain.records import FeedEvent
from runbell.flows.feed import event_view

HANDOFF = "runbell.sse_handoff"  # scope key: where a response leaves itself to be streamed
# What the framework left in the scope for its own use while routing (closed exit stacks,
# route context); nothing of it is needed once the handler has returned.
_FRAMEWORK_KEYS = (
    "fastapi",
    "fastapi_middleware_astack",
    "fastapi_astack",
    "fastapi_inner_astack",
    "fastapi_function_astack",
)


class SseFraming:
    """The feed written as Server-Sent Events (``runbell.runtime.streams.Framing``)."""

    keep_alive = b": keep-alive\r\n\r\n"

    def event(self, row: FeedEvent, /) -> bytes:
        """One feed event as one frame: ``id``, ``event``, one ``data`` line."""
        data = json.dumps(event_view(row), separators=(",", ":"))
        return f"id: {row['seq']}\r\nevent: {row['type']}\r\ndata: {data}\r\n\r\n".encode()

    def position(self, position: int, /) -> bytes:
        """An ``id:``-only frame: moves the client's Last-Event-ID on without an event."""
        return b"id: %d\r\n\r\n" % position


FRAMING = SseFraming()


class DirectWriter:
    """Lets the fan-out write a stream's bytes from its own task
    (``runbell.runtime.streams.Sink``): ``send`` is run at once, and only when it must wait
    for a slow client does the rest become a task that later writes wait for."""

    __slots__ = ("gone", "pending", "send")

    def __init__(self, send: Send, gone: Callable[[], None]) -> None:
        self.send = send
        self.gone = gone  # the client went away mid-write
        self.pending: asyncio.Future[None] | None = None

    def ready(self) -> bool:
        return self.pending is None or self.pending.done()

    def write(self, chunk: bytes, /) -> None:
        step = self.send({"type": "http.response.body", "body": chunk, "more_body": True})
        try:
            waits_for = step.send(None)  # type: ignore[attr-defined]
        except StopIteration:
            return  # written (the usual case: nothing to wait for)
        except Exception:  # never into the fan-out's loop: this stream ends, no other
            self.gone()
            return
        self.pending = asyncio.ensure_future(_finish(step, waits_for, self.gone))

    async def wait(self) -> None:
        """Until an earlier write has gone out (what the stream's own writes wait for)."""
        if self.pending is not None:
            await self.pending
            self.pending = None


async def _finish(step: Any, waits_for: Any, gone: Callable[[], None]) -> None:
    """Drive a started ``send`` to its end, as its own task would have."""
    try:
        while True:
            try:
                if waits_for is None:
                    await asyncio.sleep(0)
                else:
                    # What a task does with a future its coroutine yields: take it over
                    # (still "blocking", it refuses a second await), wait for it.
                    waits_for._asyncio_future_blocking = False
                    await waits_for
            except BaseException as exc:  # cancelled: let the send unwind
                waits_for = step.throw(exc)
            else:
                waits_for = step.send(None)
    except StopIteration:
        return
    except Exception:
        gone()


class StreamHandoff:
    """Runs an :class:`EventStreamResponse` once the app below has returned (see above)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/stream"):
            await self.app(scope, receive, send)
            return
        slot: list[EventStreamResponse] = []
        scope[HANDOFF] = slot
        await self.app(scope, receive, send)
        if slot:
            for key in _FRAMEWORK_KEYS:  # closed exit stacks: nothing to keep for hours
                scope.pop(key, None)
            await slot[0].stream(receive, send)


class EventStreamResponse(Response):
    """``text/event-stream`` written from ``chunks``; ``on_disconnect`` is called when the
    client goes away (so that an iterator waiting for news can end) and again when the
    response is over, however it ended: it must be idempotent. ``direct`` is called with a
    :class:`DirectWriter` once the headers are out, and with None when the response ends:
    what it writes goes out between the chunks, never inside one."""

    media_type = "text/event-stream"

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        *,
        on_disconnect: Callable[[], None],
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,  # FastAPI's OpenAPI reads the default from here
        direct: Callable[[DirectWriter | None], None] | None = None,
    ) -> None:
        self.chunks = chunks
        self.on_disconnect = on_disconnect
        self.direct = direct
        self.status_code = status_code
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        slot = scope.get(HANDOFF)
        if isinstance(slot, list) and not slot:
            slot.append(self)  # StreamHandoff streams it when the framework is done
            return
        await self.stream(receive, send)

    async def stream(self, receive: Receive, send: Send) -> None:
        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(watch())
        watcher.add_done_callback(lambda _: self.on_disconnect())
        writer = DirectWriter(send, self.on_disconnect)
        try:
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            if self.direct is not None:
                self.direct(writer)
            async for chunk in self.chunks:
                if watcher.done():
                    break
                await writer.wait()  # what the fan-out wrote goes first
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            with contextlib.suppress(OSError):  # the client may be gone already
                await writer.wait()
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write (servers that raise instead of dropping)
        finally:
            if self.direct is not None:
                self.direct(None)
            if writer.pending is not None:
                writer.pending.cancel()
            watcher.cancel()
            aclose = getattr(self.chunks, "aclose", None)
            if aclose is not None:
                await aclose()
