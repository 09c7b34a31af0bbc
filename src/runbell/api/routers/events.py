"""The event feed: cursor pages, long-poll and Server-Sent Events (DESIGN §6, inv. 17).

Cursors are per-tenant sequence numbers, handed out as opaque strings. Feed order equals
commit order (see ``runbell.store.db``), so resuming from a cursor never skips an event.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from runbell.api.deps import Core, Who, principal
from runbell.api.openapi import problems
from runbell.domain.errors import Gone, RunbellError
from runbell.domain.principal import Principal
from runbell.flows import feed
from runbell.flows.context import Runbell

router = APIRouter(prefix="/v1/events", tags=["events"])
PAGE_MAX = 500


async def wait_for_events(
    core: Runbell, who: Principal, after: int, limit: int, wait: float
) -> tuple[list[dict[str, Any]], int]:
    """Events after ``after`` and the resume position; if there are none, sleep until a
    commit wakes us or ``wait`` passes."""
    deadline = time.monotonic() + wait
    with core.db.hub.listen(who.tenant_id) as listener:
        while True:
            events, position = await run_in_threadpool(feed.read, core, who, after, limit)
            remaining = deadline - time.monotonic()
            if events or remaining <= 0:
                return events, position
            after = position
            # Woken by the commit itself; the timeout only covers a lost wake-up.
            await listener.wait(min(remaining, core.settings.feed_fallback_poll_s))


@router.get("", responses=problems(401, 410, 422, 503))
async def list_events(
    who: Who,
    core: Core,
    after: Annotated[str | None, Query(max_length=20)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100,
    wait: Annotated[float, Query(ge=0, le=30)] = 0,
) -> dict[str, Any]:
    """A page of events after ``after``; with ``wait`` a long-poll of up to 30 s."""
    cursor = await run_in_threadpool(feed.resolve_cursor, core, who, after)
    events, next_cursor = await wait_for_events(
        core, who, cursor, limit, min(wait, core.settings.longpoll_max_s)
    )
    return {"events": [feed.event_view(e) for e in events], "next_cursor": str(next_cursor)}


@router.get("/snapshot", responses=problems(401, 503))
def snapshot(who: Who, core: Core) -> dict[str, Any]:
    """Current state to load instead of replaying: active runs, open notifications, head."""
    return feed.snapshot(core, who)


@router.get(
    "/stream",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "the feed as Server-Sent Events (an expired cursor is an "
            "event: cursor_expired, still 200)",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problems(401, 422, 503),
    },
)
async def stream(
    request: Request,
    who: Who,
    core: Core,
    after: Annotated[str | None, Query(max_length=20)] = None,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> EventSourceResponse:
    """The feed as Server-Sent Events. ``Last-Event-ID`` wins over ``?after=``."""
    requested = last_event_id or after or "latest"
    field = "Last-Event-ID" if last_event_id else "after"
    try:
        cursor: int | None = await run_in_threadpool(
            feed.resolve_cursor, core, who, requested, field
        )
        expired: Gone | None = None
    except Gone as exc:
        cursor, expired = None, exc

    async def events() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(retry=3000)
        if expired is not None:
            yield ServerSentEvent(
                event="cursor_expired",
                data=json.dumps({"detail": expired.detail, **expired.extra}, separators=(",", ":")),
            )
            return
        assert cursor is not None
        position = cursor
        recheck_at = time.monotonic() + core.settings.sse_access_recheck_s
        yield ServerSentEvent(id=str(position))  # priming id: resume point even if idle
        if who.user_id:
            core.presence.enter(who.tenant_id, who.user_id)
        try:
            with core.db.hub.listen(who.tenant_id) as listener:
                while True:
                    try:
                        batch, moved_to = await run_in_threadpool(
                            feed.read, core, who, position, PAGE_MAX
                        )
                    except Exception as exc:
                        if core.db.availability.observe(exc) is None:
                            raise
                        # The database is away (logged once per outage): keep the stream
                        # open, keep-alives flowing, and read again from the same position.
                        if await request.is_disconnected():
                            return
                        await listener.wait(core.settings.feed_fallback_poll_s)
                        continue
                    for e in batch:
                        yield ServerSentEvent(
                            id=str(e["seq"]),
                            event=e["type"],
                            data=json.dumps(feed.event_view(e), separators=(",", ":")),
                        )
                    if len(batch) == PAGE_MAX:
                        position = moved_to
                        continue
                    if moved_to != position and (not batch or batch[-1]["seq"] != moved_to):
                        # Only events this viewer may not see: move its Last-Event-ID on
                        # too, so a reconnect does not start from an aging cursor.
                        yield ServerSentEvent(id=str(moved_to))
                    position = moved_to
                    if await request.is_disconnected():
                        return
                    if time.monotonic() >= recheck_at:
                        # A long-lived stream must not outlive revoked or reduced access:
                        # check the credentials again now and then; end the stream if the
                        # caller is gone or no longer the same principal (e.g. demoted).
                        recheck_at = time.monotonic() + core.settings.sse_access_recheck_s
                        try:
                            still = await principal(request)
                        except RunbellError:
                            still = None
                        except Exception as exc:
                            if core.db.availability.observe(exc) is None:
                                raise
                            still = who  # cannot check now; check again next time
                            recheck_at = time.monotonic()
                        if still != who:  # revoked, or the role changed: start over
                            yield ServerSentEvent(event="access_ended", data="{}")
                            return
                    # Woken by the commit itself; the timeout only covers a lost wake-up.
                    await listener.wait(core.settings.feed_fallback_poll_s)
        finally:
            if who.user_id:
                core.presence.leave(who.tenant_id, who.user_id)

    return EventSourceResponse(
        events(),
        ping=int(core.settings.sse_keepalive_s),
        ping_message_factory=lambda: ServerSentEvent(comment="keep-alive"),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
