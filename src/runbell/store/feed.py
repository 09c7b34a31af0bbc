"""Reading the event feed with per-principal visibility, and pruning it by retention.

Visibility is written twice, once as SQL (:func:`_visible`, for pages and catch-up reads)
and once in Python (:func:`visible`, for the stream fan-out, which reads a tenant's new
events once and filters them per subscriber); a test holds the two equal.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.principal import Principal
from runbell.domain.records import FeedEvent
from runbell.store import tables as t
from runbell.store.runs import visible_run_ids


def bounds(conn: Connection, tenant_id: str) -> tuple[int, int]:
    """(head, pruned_through): the newest sequence, and the newest one already deleted."""
    row = conn.execute(
        sa.select(t.tenants.c.feed_seq, t.tenants.c.feed_pruned_through).where(
            t.tenants.c.id == tenant_id
        )
    ).one()
    return int(row[0]), int(row[1])


def _visible(who: Principal) -> sa.ColumnElement[bool]:
    fe = t.feed_events
    if who.kind == "key" and who.limits_runs:  # a scoped runtime credential: its runs
        return sa.and_(fe.c.user_id.is_(None), fe.c.run_id.in_(visible_run_ids(who)))
    if who.kind == "key" and who.role == "runtime":
        return fe.c.user_id.is_(None)
    if who.kind == "key":  # admin keys see everything in their tenant
        return sa.true()
    run_events: sa.ColumnElement[bool] = fe.c.user_id.is_(None)
    if not who.sees_all_runs:
        run_events = sa.and_(run_events, fe.c.run_id.in_(visible_run_ids(who)))
    return sa.or_(fe.c.user_id == who.user_id, run_events)


def visible(
    who: Principal, user_id: str | None, run_id: str | None, run_access: frozenset[str]
) -> bool:
    """:func:`_visible` for one event in Python: ``user_id`` is the event's audience (None:
    a run event) and ``run_access`` the users (at least ``who``, if it is a member who
    does not see every run) allowed to see the event's run."""
    if who.kind == "key" and who.limits_runs:
        # A scoped credential's streams read their pages from the database
        # (runtime.streams: never covered by the shared buffer); here only what the
        # scope decides without a run row.
        assert who.scope is not None
        return (
            user_id is None
            and run_id is not None
            and not who.scope.own_runs
            and who.scope.id_in_scope(run_id)
        )
    if who.kind == "key":
        return user_id is None if who.role == "runtime" else True
    if user_id is not None:
        return user_id == who.user_id
    if who.sees_all_runs:
        return True
    return run_id is not None and who.user_id in run_access


def limited(who: Principal) -> bool:
    """Whether what ``who`` sees of run events depends on ``run_access`` rows."""
    return who.kind == "user" and not who.sees_all_runs


_TAIL = sa.select(
    t.feed_events.c.seq,
    t.feed_events.c.type,
    t.feed_events.c.run_id,
    t.feed_events.c.notification_id,
    t.feed_events.c.user_id,
    t.feed_events.c.data,
    t.feed_events.c.created_at,
).where(
    t.feed_events.c.tenant_id == sa.bindparam("tenant_id"),
    t.feed_events.c.seq > sa.bindparam("after"),
    t.feed_events.c.seq <= sa.bindparam("head"),
)
_HEAD = sa.select(t.tenants.c.feed_seq).where(t.tenants.c.id == sa.bindparam("tenant_id"))


def read_tail(
    conn: Connection, tenant_id: str, after: int | None, limit: int, users: frozenset[str]
) -> tuple[int, list[FeedEvent], dict[str, frozenset[str]]]:
    """Every event of the tenant after ``after`` (whoever may see it), for the stream
    fan-out: ``(head, events, run_access)``. ``after=None`` reads the head only.

    ``run_access`` maps each run id among the events to those of ``users`` allowed to see
    it (read in the same transaction, so it is what the per-subscriber query would see).
    The events are the ones up to the head read first: all committed (see :func:`read`).
    """
    head = int(conn.execute(_HEAD, {"tenant_id": tenant_id}).scalar_one())
    if after is None or head <= after:
        return head, [], {}
    rows = conn.execute(
        _TAIL.order_by(t.feed_events.c.seq).limit(limit),
        {"tenant_id": tenant_id, "after": after, "head": head},
    ).all()
    events = [cast(FeedEvent, dict(r._mapping)) for r in rows]  # the table's columns
    run_ids = {e["run_id"] for e in events if e["run_id"] is not None and e["user_id"] is None}
    access: dict[str, set[str]] = {}
    if users and run_ids:
        ra = t.run_access
        for run_id, user_id in conn.execute(
            sa.select(ra.c.run_id, ra.c.user_id).where(
                ra.c.tenant_id == tenant_id,
                ra.c.user_id.in_(sorted(users)),
                ra.c.run_id.in_(sorted(run_ids)),
            )
        ):
            access.setdefault(run_id, set()).add(user_id)
    return head, events, {k: frozenset(v) for k, v in access.items()}


def read(conn: Connection, who: Principal, after: int, limit: int) -> tuple[list[FeedEvent], int]:
    """Visible events after ``after`` and the position to resume from.

    When the page is not full, the position moves on to the head as it was *before* the
    query, skipping events this principal may not see (so an idle reader's cursor does
    not age out of retention). Events up to that head are all committed — they commit
    together with the counter — so nothing visible can be skipped.
    """
    fe = t.feed_events
    head = conn.execute(
        sa.select(t.tenants.c.feed_seq).where(t.tenants.c.id == who.tenant_id)
    ).scalar_one()
    rows = conn.execute(
        sa.select(
            fe.c.seq, fe.c.type, fe.c.run_id, fe.c.notification_id, fe.c.data, fe.c.created_at
        )
        .where(fe.c.tenant_id == who.tenant_id, fe.c.seq > after, _visible(who))
        .order_by(fe.c.seq)
        .limit(limit)
    ).all()
    events = [cast(FeedEvent, dict(r._mapping)) for r in rows]  # the columns selected
    position = events[-1]["seq"] if events else after
    if len(events) < limit:
        position = max(position, int(head))
    return events, position


def for_notification(conn: Connection, tenant_id: str, notification_id: str) -> list[FeedEvent]:
    fe = t.feed_events
    rows = conn.execute(
        sa.select(fe.c.seq, fe.c.type, fe.c.data, fe.c.created_at)
        .where(fe.c.tenant_id == tenant_id, fe.c.notification_id == notification_id)
        .order_by(fe.c.seq)
    ).all()
    return [cast(FeedEvent, dict(r._mapping)) for r in rows]  # the columns selected


def prune(conn: Connection, tenant_id: str, before: datetime) -> int:
    """Delete events older than ``before`` and remember the newest deleted sequence."""
    fe = t.feed_events
    newest = conn.execute(
        sa.select(sa.func.max(fe.c.seq)).where(
            fe.c.tenant_id == tenant_id, fe.c.created_at < before
        )
    ).scalar()
    if newest is None:
        return 0
    deleted = conn.execute(
        sa.delete(fe).where(fe.c.tenant_id == tenant_id, fe.c.seq <= newest)
    ).rowcount
    conn.execute(
        sa.update(t.tenants)
        .where(t.tenants.c.id == tenant_id, t.tenants.c.feed_pruned_through < newest)
        .values(feed_pruned_through=newest)
    )
    return int(deleted)
