"""The event feed as a client reads it: where a cursor points, a page of events after it,
the head, and the snapshot to load instead of replaying.

Invariants kept here (DESIGN §2):

- 17: a reader resumes from its cursor and receives every event after it, in commit
  order, or an explicit 410 (``oldest_available_cursor``, ``head_cursor``,
  ``snapshot_url``) when the cursor is older than retention — never a silent gap. A
  cursor ahead of the head is refused (it is not from this feed).
- 8 and tenant isolation: a principal sees only the events it may see (a runtime key no
  person's own events, a person only runs they may see and their own notifications);
  the position still moves past the others, so an idle cursor does not age out.

The long-poll and the Server-Sent Events stream (``runbell.api.routers.events``) are
HTTP and stay in the face; every database read they do is one of these. The streams share
one read per commit per tenant (:func:`subscribe`, ``runbell.runtime.streams``), filtered
per subscriber with the same visibility as the page query.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TypedDict

from runbell.domain import capabilities
from runbell.domain.errors import Gone, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import FeedEvent
from runbell.flows import views
from runbell.flows.context import Core
from runbell.runtime.streams import Framing, Streams, Subscriber
from runbell.store import feed, runs
from runbell.store import notifications as notes

SNAPSHOT_URL = "/v1/events/snapshot"
SNAPSHOT_MAX = 200
ACTIVE = ("queued", "working", "input_required", "stopping")  # the snapshot's runs


class EventView(TypedDict):
    """A feed event as the API and the stream show it."""

    id: str  # its cursor
    type: str
    run_id: str | None
    notification_id: str | None
    at: str | None
    data: dict[str, Any]


class FeedSnapshot(TypedDict):
    """``GET /v1/events/snapshot``."""

    head_cursor: str
    runs: list[views.RunView]
    notifications: list[views.NotificationView]
    truncated: bool


def event_view(e: FeedEvent) -> EventView:
    """A feed event as the API and the stream show it (its cursor is ``id``)."""
    return {
        "id": str(e["seq"]),
        "type": e["type"],
        "run_id": e.get("run_id"),
        "notification_id": e.get("notification_id"),
        "at": views.iso(e["created_at"]),
        "data": e["data"],
    }


def streams(core: Core, framing: Framing) -> Streams:
    """The stream fan-out of this process on the running event loop (one wire format per
    process: the face that opens the first stream names it)."""
    loop = asyncio.get_running_loop()
    found: Streams | None = core.hub.per_loop.get(loop)
    if found is None:
        s = core.settings
        found = core.hub.per_loop[loop] = Streams(
            core.db,
            core.hub,
            framing,
            keepalive_s=s.sse_keepalive_s,
            recheck_s=s.sse_access_recheck_s,
            fallback_s=s.feed_fallback_poll_s,
        )
    return found


def subscribe(core: Core, who: Principal, position: int, framing: Framing) -> Subscriber:
    """A live stream of what ``who`` may see after ``position`` (a resolved cursor), written
    in ``framing``: the events of each commit are read once and rendered once for all of
    the tenant's streams. Close it."""
    who.require(capabilities.READ)
    return streams(core, framing).subscribe(who, position)


def end_streams(core: Core) -> None:
    """End every open stream of this process (server shutdown): each closes cleanly with
    its last id sent, and the client resumes elsewhere. Safe from a signal handler."""
    for loop, found in list(core.hub.per_loop.items()):
        with contextlib.suppress(RuntimeError):  # that loop is closed already
            loop.call_soon_threadsafe(found.close)


def resolve_cursor(core: Core, who: Principal, after: str | None, field: str = "after") -> int:
    """The numeric position to read after (``earliest``, ``latest`` or a cursor); 422
    naming ``field`` for something else, 410 if it fell out of retention. A runtime
    credential needs ``runs.read`` (403 naming it)."""
    who.require(capabilities.READ)
    with core.db.read() as conn:
        head, pruned = feed.bounds(conn, who.tenant_id)
    if after is None or after == "earliest":
        return pruned
    if after == "latest":
        return head
    if not after.isdigit() or len(after) > 19:
        raise ValidationFailed(f"{field} must be a cursor, 'earliest' or 'latest'", field=field)
    cursor = int(after)
    if cursor > head:
        raise ValidationFailed(
            "cursor is ahead of this feed's head; it is not from this feed", field=field
        )
    if cursor < pruned:
        raise _expired(head, pruned)
    return cursor


def _expired(head: int, pruned: int) -> Gone:
    return Gone(
        "the cursor is older than the feed's retention; load the snapshot and "
        "resume from its head_cursor",
        oldest_available_cursor=str(pruned),
        head_cursor=str(head),
        snapshot_url=SNAPSHOT_URL,
    )


def read(core: Core, who: Principal, after: int, limit: int) -> tuple[list[FeedEvent], int]:
    """Up to ``limit`` events ``who`` may see after ``after`` (as stored: ``seq``,
    ``type``, …; :func:`event_view` shows one), and the position to resume from.

    Retention is checked again *after* the rows are read: a prune batch that committed
    between :func:`resolve_cursor` and this read (deleting events this reader still
    needed) makes it a 410, never a silent gap."""
    who.require(capabilities.READ)
    with core.db.read() as conn:
        events, position = feed.read(conn, who, after, limit)
        head, pruned = feed.bounds(conn, who.tenant_id)
    if after < pruned:
        raise _expired(head, pruned)
    return events, position


def head_cursor(core: Core, who: Principal) -> int:
    """The newest position of the caller's tenant feed."""
    with core.db.read() as conn:
        head, _ = feed.bounds(conn, who.tenant_id)
    return head


def snapshot(core: Core, who: Principal) -> FeedSnapshot:
    """Current state to load instead of replaying: the head cursor, the active runs the
    caller may see and a person's open notifications (``truncated`` past 200 of either)."""
    who.require(capabilities.READ)
    with core.db.read() as conn:
        head, _ = feed.bounds(conn, who.tenant_id)
        active = runs.list_runs(conn, who, states=list(ACTIVE), after=None, limit=SNAPSHOT_MAX + 1)
        open_notes = (
            notes.list_for_recipient(
                conn,
                who.tenant_id,
                who.user_id,
                states=["open"],
                before=None,
                limit=SNAPSHOT_MAX + 1,
            )
            if who.user_id
            else []
        )
    return {
        "head_cursor": str(head),
        "runs": [views.run_view(r) for r in active[:SNAPSHOT_MAX]],
        "notifications": [views.notification_view(n) for n in open_notes[:SNAPSHOT_MAX]],
        # More than fit: page on with GET /v1/runs?state=… and GET /v1/notifications.
        "truncated": len(active) > SNAPSHOT_MAX or len(open_notes) > SNAPSHOT_MAX,
    }
