"""The event feed: cursor pages, long-poll and Server-Sent Events (DESIGN §6, inv. 17).

Cursors are per-tenant sequence numbers, handed out as opaque strings. Feed order equals
commit order (see ``runbell.store.db``), so resuming from a cursor never skips an event.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from starlette.concurrency import run_in_threadpool

from runbell.api.deps import CLIENT_HEADER, SESSION_COOKIE, CoreDep, Who, principal
from runbell.api.openapi import problems, rule, rules
from runbell.api.sse import FRAMING, DirectWriter, EventStreamResponse
from runbell.domain.errors import Gone, RunbellError
from runbell.domain.principal import Principal
from runbell.domain.records import FeedEvent
from runbell.flows import feed
from runbell.flows.context import Core

router = APIRouter(prefix="/v1/events", tags=["events"])
PAGE_MAX = 500
#: ``earliest``, ``latest`` or a cursor (``next_cursor``, a ``Last-Event-ID``).
CURSOR_PATTERN = r"^(earliest|latest|[0-9]{1,19})$"
CURSOR_RULE = rule(
    "after",
    "a cursor must come from this feed: one ahead of the feed's head is refused "
    "(one older than its retention is a 410)",
)


async def wait_for_events(
    core: Core, who: Principal, after: int, limit: int, wait: float
) -> tuple[list[FeedEvent], int]:
    """Events after ``after`` and the resume position; if there are none, sleep until a
    commit wakes us or ``wait`` passes."""
    deadline = time.monotonic() + wait
    with core.hub.listen(who.tenant_id) as listener:
        while True:
            events, position = await run_in_threadpool(feed.read, core, who, after, limit)
            remaining = deadline - time.monotonic()
            if events or remaining <= 0:
                return events, position
            after = position
            # Woken by the commit itself; the timeout only covers a lost wake-up.
            await listener.wait(min(remaining, core.settings.feed_fallback_poll_s))


@router.get("", responses=problems(401, 403, 410, 422, 503), openapi_extra=rules(CURSOR_RULE))
async def list_events(
    who: Who,
    core: CoreDep,
    after: Annotated[str | None, Query(min_length=1, max_length=20, pattern=CURSOR_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100,
    wait: Annotated[float, Query(ge=0, le=30)] = 0,
) -> Mapping[str, Any]:
    """A page of events after ``after``; with ``wait`` a long-poll of up to 30 s."""
    cursor = await run_in_threadpool(feed.resolve_cursor, core, who, after)
    # A person's app waiting on the feed (the SDK with as_app=True) is watching while it
    # waits, as an open stream of the web app is; nothing else counts (issue 18 item 9).
    watching = who.watches and wait > 0
    if watching:
        core.presence.enter(who.tenant_id, str(who.user_id))
    try:
        events, next_cursor = await wait_for_events(
            core, who, cursor, limit, min(wait, core.settings.longpoll_max_s)
        )
    finally:
        if watching:
            core.presence.leave(who.tenant_id, str(who.user_id))
    return {"events": [feed.event_view(e) for e in events], "next_cursor": str(next_cursor)}


@router.get("/snapshot", responses=problems(401, 403, 503))
def snapshot(who: Who, core: CoreDep) -> Mapping[str, Any]:
    """Current state to load instead of replaying: active runs, open notifications, head."""
    return feed.snapshot(core, who)


class SharedRecheck:
    """Credentials re-checked at most once per interval, however many streams share them
    (10,000 streams on one runtime key cost one look-up, not 10,000)."""

    def __init__(self) -> None:
        self._checked: dict[str, tuple[float, asyncio.Future[Principal | None]]] = {}

    async def check(self, request: Request, who: Principal, interval: float) -> bool | None:
        """True if the caller is still ``who``, False if not, None if it cannot be told
        now (the database is away)."""
        key = hashlib.sha256(
            (request.headers.get("authorization") or "").encode()
            + b"\0"
            + (request.cookies.get(SESSION_COOKIE) or "").encode()
            + b"\0"
            + (request.headers.get(CLIENT_HEADER) or "").encode()
        ).hexdigest()
        now = time.monotonic()
        hit = self._checked.get(key)
        if hit is None or now - hit[0] >= interval / 2:
            if len(self._checked) > 1024:
                self._checked = {
                    k: v for k, v in self._checked.items() if now - v[0] < 2 * interval
                }
            future: asyncio.Future[Principal | None] = asyncio.ensure_future(
                self._principal(request)
            )
            hit = self._checked[key] = (now, future)
        try:
            still = await asyncio.shield(hit[1])
        except Exception as exc:
            self._checked.pop(key, None)
            if request.app.state.core.db.availability.observe(exc) is None:
                raise
            return None
        return still == who

    @staticmethod
    async def _principal(request: Request) -> Principal | None:
        try:
            return await principal(request)
        except RunbellError:
            return None


_rechecks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedRecheck] = (
    weakref.WeakKeyDictionary()
)


def _recheck() -> SharedRecheck:
    loop = asyncio.get_running_loop()
    found = _rechecks.get(loop)
    if found is None:
        found = _rechecks[loop] = SharedRecheck()
    return found


RETRY = b"retry: 3000\r\n\r\n"


@router.get(
    "/stream",
    response_class=EventStreamResponse,
    responses={
        200: {
            "description": "the feed as Server-Sent Events (an expired cursor is an "
            "event: cursor_expired, still 200)",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problems(401, 403, 422, 503),
    },
    openapi_extra=rules(CURSOR_RULE, {**CURSOR_RULE, "field": "Last-Event-ID"}),
)
async def stream(
    request: Request,
    who: Who,
    core: CoreDep,
    after: Annotated[str | None, Query(min_length=1, max_length=20, pattern=CURSOR_PATTERN)] = None,
    last_event_id: Annotated[
        str | None, Header(min_length=1, max_length=20, pattern=CURSOR_PATTERN)
    ] = None,
) -> EventStreamResponse:
    """The feed as Server-Sent Events. ``Last-Event-ID`` wins over ``?after=``."""
    requested = last_event_id or after or "latest"
    field = "Last-Event-ID" if last_event_id else "after"
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    try:
        cursor = await run_in_threadpool(feed.resolve_cursor, core, who, requested, field)
    except Gone as exc:
        body = json.dumps({"detail": exc.detail, **exc.extra}, separators=(",", ":"))

        async def expired() -> AsyncIterator[bytes]:
            yield RETRY + f"event: cursor_expired\r\ndata: {body}\r\n\r\n".encode()

        return EventStreamResponse(expired(), on_disconnect=lambda: None, headers=headers)

    sub = feed.subscribe(core, who, cursor, FRAMING)

    async def chunks() -> AsyncIterator[bytes]:
        # The priming id is the resume point even if nothing ever arrives.
        yield RETRY + FRAMING.position(cursor)
        # Only a person's app counts as watching (the web app's pages, a client that says
        # it is one): a script or a runtime streaming with a person's token does not hold
        # back that person's pushes (issue 18 item 9).
        watching = who.watches
        if watching:
            core.presence.enter(who.tenant_id, str(who.user_id))
        try:
            while (chunk := await sub.next()) is not None:
                if chunk:
                    yield chunk
                if sub.recheck_due:
                    # A long-lived stream must not outlive revoked or reduced access: check
                    # the credentials again now and then; end the stream if the caller is
                    # gone or no longer the same principal (e.g. demoted).
                    sub.recheck_due = False
                    same = await _recheck().check(request, who, core.settings.sse_access_recheck_s)
                    if same is False:  # None: cannot check now; check again next time
                        yield b"event: access_ended\r\ndata: {}\r\n\r\n"
                        return
        finally:
            sub.close()
            if watching:
                core.presence.leave(who.tenant_id, str(who.user_id))

    def direct(writer: DirectWriter | None) -> None:
        sub.sink = writer  # the fan-out writes to this stream itself while it is idle

    return EventStreamResponse(chunks(), on_disconnect=sub.close, headers=headers, direct=direct)
