"""Notifications: inserted once per recipient, run, version and type; read, closed, redacted.
(Their deliveries are the outbox's: ``store.outbox``.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, RowMapping

from runbell.domain.errors import NotFound
from runbell.domain.records import Attempt, DeliveryAttempts, Notification
from runbell.i18n import N_
from runbell.store import fast, outbox
from runbell.store import tables as t
from runbell.store.db import Tx
from runbell.store.runs import chunks as runs_chunks

# Delivery statuses that will still send something unless stopped.
ACTIONABLE_TYPES = ("input_required",)


NOTIFICATION_COLUMNS = tuple(c.name for c in t.notifications.columns)
_ONCE = ["tenant_id", "recipient_user_id", "run_id", "transition_version", "attention_type"]


def _insert_once_sql(dialect: str) -> fast.Built:
    ins = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(t.notifications)
    return (
        ins.values(
            {c: sa.bindparam(c, type_=t.notifications.c[c].type) for c in NOTIFICATION_COLUMNS}
        )
        .on_conflict_do_nothing(index_elements=_ONCE)
        .returning(t.notifications.c.id)
    )


_INSERT_ONCE = fast.Statement.per_dialect(_insert_once_sql)
# The same row with no ON CONFLICT: a duplicate is an error (``insert_once``'s optimistic way).
_INSERT_NEW = fast.Statement(
    lambda: t.notifications.insert().values(
        {c: sa.bindparam(c, type_=t.notifications.c[c].type) for c in NOTIFICATION_COLUMNS}
    )
)
_EXISTING = fast.Statement(
    lambda: sa.select(t.notifications.c.id).where(
        *(t.notifications.c[c] == sa.bindparam(c) for c in _ONCE)
    )
)


def insert_once(
    conn: Connection, values: Notification, *, new_version: bool = False
) -> tuple[str, bool]:
    """Insert a notification unless its (tenant, recipient, run, version, type) exists.

    Returns (id, created). The unique constraint, not this code, is what guarantees one.

    ``new_version``: the caller moved the run (locked in this transaction) to this version
    itself, so no notification of it can exist but one this very transaction wrote. Then,
    in the writer's optimistic first try on PostgreSQL (``Tx.optimistic``, inside its
    pipeline), the row is sent without waiting for the answer — a round trip per signal
    less — and assumed created. Were it a duplicate after all, the server refuses it, the
    whole try fails and nothing of it happens, and the writer runs the units again with
    ``optimistic`` off: this function then asks, as always.
    """
    row: Mapping[str, Any] = values
    tx = Tx.of(conn)
    if tx is not None and tx.open_notes:  # the batch's copy of the run's open ones is stale
        tx.open_notes.pop((values["tenant_id"], values["run_id"]), None)
    if new_version and tx is not None and tx.optimistic and fast.pipelined(conn):
        _INSERT_NEW.post(conn, **{name: row.get(name) for name in NOTIFICATION_COLUMNS})
        return values["id"], True
    # RETURNING, not rowcount: psycopg reports rowcount -1 for this statement.
    if _INSERT_ONCE.first(conn, **{name: row.get(name) for name in NOTIFICATION_COLUMNS}):
        return values["id"], True
    existing = _EXISTING.first(conn, **{c: row[c] for c in _ONCE})
    assert existing is not None
    return str(existing["id"]), False


def get(conn: Connection, tenant_id: str, notification_id: str) -> Notification:
    row = conn.execute(
        sa.select(t.notifications).where(
            t.notifications.c.tenant_id == tenant_id, t.notifications.c.id == notification_id
        )
    ).first()
    if row is None:
        raise NotFound(f"no notification {notification_id!r}")
    return _row(row._mapping)


def find(conn: Connection, tenant_id: str, notification_id: str) -> Notification | None:
    """The notification, or None when it is gone (the worker settles instead of failing)."""
    row = conn.execute(
        sa.select(t.notifications).where(
            t.notifications.c.tenant_id == tenant_id, t.notifications.c.id == notification_id
        )
    ).first()
    return None if row is None else _row(row._mapping)


def state_of(conn: Connection, tenant_id: str, notification_id: str) -> str | None:
    """Its lifecycle state now (``open`` until closed), or None when it is gone."""
    found = conn.execute(
        sa.select(t.notifications.c.state).where(
            t.notifications.c.tenant_id == tenant_id, t.notifications.c.id == notification_id
        )
    ).scalar()
    return None if found is None else str(found)


def get_many(conn: Connection, tenant_id: str, ids: list[str]) -> list[Notification]:
    if not ids:
        return []
    rows = conn.execute(
        sa.select(t.notifications)
        .where(t.notifications.c.tenant_id == tenant_id, t.notifications.c.id.in_(ids))
        .order_by(t.notifications.c.id)
    ).all()
    return [_row(r._mapping) for r in rows]


def list_for_recipient(
    conn: Connection,
    tenant_id: str,
    user_id: str,
    *,
    states: list[str] | None,
    before: str | None,
    limit: int,
) -> list[Notification]:
    q = sa.select(t.notifications).where(
        t.notifications.c.tenant_id == tenant_id, t.notifications.c.recipient_user_id == user_id
    )
    if states:
        q = q.where(t.notifications.c.state.in_(states))
    if before:
        q = q.where(t.notifications.c.id < before)
    rows = conn.execute(q.order_by(t.notifications.c.id.desc()).limit(limit)).all()
    return [_row(r._mapping) for r in rows]


def for_recipient_on_run(
    conn: Connection, tenant_id: str, user_id: str | None, run_id: str, *, limit: int
) -> list[Notification]:
    """One person's notifications about one run, in every state, newest first."""
    n = t.notifications
    rows = conn.execute(
        sa.select(n)
        .where(n.c.tenant_id == tenant_id, n.c.run_id == run_id, n.c.recipient_user_id == user_id)
        .order_by(n.c.id.desc())
        .limit(limit)
    ).all()
    return [_row(r._mapping) for r in rows]


_OPEN_FOR_RUN = fast.Statement(
    lambda: (
        sa.select(t.notifications)
        .where(
            t.notifications.c.tenant_id == sa.bindparam("tenant_id"),
            t.notifications.c.run_id == sa.bindparam("run_id"),
            t.notifications.c.state == "open",
        )
        .order_by(t.notifications.c.id)
    )
)


def _open_many(n: int) -> fast.Statement:
    found = _OPEN_MANY_BY_SIZE.get(n)
    if found is None:
        c = t.notifications.c
        # One (tenant, run, open) lookup per run: ix_notifications_run_state on both.
        keyed = sa.or_(
            *(
                sa.and_(
                    c.tenant_id == sa.bindparam(f"t{i}", type_=c.tenant_id.type),
                    c.run_id == sa.bindparam(f"r{i}", type_=c.run_id.type),
                    c.state == "open",
                )
                for i in range(n)
            )
        )
        found = _OPEN_MANY_BY_SIZE[n] = fast.Statement(
            lambda: sa.select(t.notifications).where(keyed).order_by(c.id)
        )
    return found


_OPEN_MANY_BY_SIZE: dict[int, fast.Statement] = {}


_OPEN_BATCH_2 = _open_many(2)  # module level: tests/integration/test_fast_seam.py checks it


def read_open_batch(tx: Tx, keys: list[tuple[str, str]]) -> None:
    """The open notifications of every run of a batch, in one statement, for
    :func:`open_for_run` (once per run; any change to a notification drops them)."""
    send_open_batch(tx, keys)()


def send_open_batch(tx: Tx, keys: list[tuple[str, str]]) -> Callable[[], None]:
    """:func:`read_open_batch` sent now, kept when the returned function is called."""
    sent = []
    for chunk in runs_chunks(sorted(set(keys))):
        size = 1
        while size < len(chunk):
            size *= 2
        params = {}
        for n, (tenant_id, run_id) in enumerate(chunk + [chunk[-1]] * (size - len(chunk))):
            params[f"t{n}"], params[f"r{n}"] = tenant_id, run_id
        sent.append((chunk, _open_many(size).send(tx.conn, **params)))

    def keep() -> None:
        for chunk, pending in sent:
            found: dict[tuple[str, str], list[Notification]] = {key: [] for key in chunk}
            for row in pending.rows():
                found[(row["tenant_id"], row["run_id"])].append(cast(Notification, row))
            tx.open_notes.update(found)

    return keep


def _changed(conn: Connection) -> None:
    """A notification is being changed: the batch's copies of open ones may be stale."""
    tx = Tx.of(conn)
    if tx is not None:
        tx.open_notes.clear()


def open_for_run(conn: Connection, tenant_id: str, run_id: str) -> list[Notification]:
    tx = Tx.of(conn)
    if tx is not None and tx.open_notes:
        found = tx.open_notes.pop((tenant_id, run_id), None)
        if found is not None:
            return found
    return cast(list[Notification], _OPEN_FOR_RUN.rows(conn, tenant_id=tenant_id, run_id=run_id))


def close(
    conn: Connection,
    tenant_id: str,
    notification_id: str,
    state: str,
    reason: str,
    now: datetime,
) -> bool:
    """Close an open notification and cancel what it still had queued, in one go."""
    _changed(conn)
    res = conn.execute(
        sa.update(t.notifications)
        .where(
            t.notifications.c.tenant_id == tenant_id,
            t.notifications.c.id == notification_id,
            t.notifications.c.state == "open",
        )
        .values(state=state, closed_at=now, closed_reason=reason)
    )
    if res.rowcount == 0:
        return False
    outbox.cancel_pending(conn, tenant_id, notification_id, now, reason)
    return True


def deliveries_for(
    conn: Connection, tenant_id: str, notification_id: str
) -> list[DeliveryAttempts]:
    """The notification's own deliveries, and the tenant-webhook messages that announced
    it (``notification.created`` / ``.closed``), each with its attempts."""
    outbox.write_deferred(conn)
    dl = t.deliveries
    about_it = [f"notification.created:{notification_id}", f"notification.closed:{notification_id}"]
    rows = conn.execute(
        sa.select(dl)
        .where(
            dl.c.tenant_id == tenant_id,
            sa.or_(
                dl.c.notification_id == notification_id,
                sa.and_(dl.c.channel == "webhook", dl.c.event_key.in_(about_it)),
            ),
        )
        .order_by(dl.c.id)
    ).all()
    out = [cast(DeliveryAttempts, {**r._mapping, "attempts": []}) for r in rows]
    if out:
        attempts = conn.execute(
            sa.select(t.delivery_attempts)
            .where(t.delivery_attempts.c.delivery_id.in_([d["id"] for d in out]))
            .order_by(t.delivery_attempts.c.delivery_id, t.delivery_attempts.c.attempt_no)
        ).all()
        by: dict[str, list[Attempt]] = {}
        for a in attempts:
            by.setdefault(a.delivery_id, []).append(cast(Attempt, dict(a._mapping)))
        for d in out:
            d["attempts"] = by.get(d["id"], [])
    return out


def attempts_for(conn: Connection, delivery_id: str) -> list[Attempt]:
    rows = conn.execute(
        sa.select(t.delivery_attempts)
        .where(t.delivery_attempts.c.delivery_id == delivery_id)
        .order_by(t.delivery_attempts.c.attempt_no, t.delivery_attempts.c.started_at)
    ).all()
    return [cast(Attempt, dict(r._mapping)) for r in rows]


_COUNT_RECENT = fast.Statement(
    lambda: sa.select(sa.func.count().label("n")).select_from(
        sa.select(sa.literal(1))
        .where(
            t.notifications.c.tenant_id == sa.bindparam("tenant_id"),
            t.notifications.c.recipient_user_id == sa.bindparam("user_id"),
            t.notifications.c.attention_type == sa.bindparam("attention_type"),
            t.notifications.c.created_at >= sa.bindparam("since", type_=t.UTCDateTime),
        )
        .limit(sa.bindparam("up_to", type_=sa.Integer))
        .subquery()
    )
)


def count_recent(
    conn: Connection,
    tenant_id: str,
    user_id: str,
    attention_type: str,
    since: datetime,
    *,
    up_to: int,
) -> int:
    """How many such notifications since ``since``, counted up to ``up_to`` at most: the
    cost is bounded by ``up_to`` (index ``ix_notifications_recent``), not by history."""
    if up_to <= 0:
        return 0
    row = _COUNT_RECENT.first(
        conn,
        tenant_id=tenant_id,
        user_id=user_id,
        attention_type=attention_type,
        since=since,
        up_to=up_to,
    )
    assert row is not None
    return int(row["n"])


def mark_seen(conn: Connection, tenant_id: str, notification_id: str, now: datetime) -> None:
    _changed(conn)
    conn.execute(
        sa.update(t.notifications)
        .where(
            t.notifications.c.tenant_id == tenant_id,
            t.notifications.c.id == notification_id,
            t.notifications.c.first_seen_at.is_(None),
        )
        .values(first_seen_at=now)
    )


def mark_delivered(conn: Connection, tenant_id: str, notification_id: str, now: datetime) -> None:
    """Note the first accepted delivery (later ones keep the first time)."""
    _changed(conn)
    conn.execute(
        sa.update(t.notifications)
        .where(
            t.notifications.c.tenant_id == tenant_id,
            t.notifications.c.id == notification_id,
            t.notifications.c.first_delivered_at.is_(None),
        )
        .values(first_delivered_at=now)
    )


WITHDRAWN_SUMMARY = N_("Notification withdrawn")  # worded for each reader (flows.neutral_words)


def open_for_recipient(conn: Connection, tenant_id: str, user_id: str) -> list[Notification]:
    rows = conn.execute(
        sa.select(t.notifications)
        .where(
            t.notifications.c.tenant_id == tenant_id,
            t.notifications.c.recipient_user_id == user_id,
            t.notifications.c.state == "open",
        )
        .order_by(t.notifications.c.id)
    ).all()
    return [_row(r._mapping) for r in rows]


def redact(conn: Connection, tenant_id: str, notification_id: str) -> None:
    """Scrub a notification's stored previews: its recipient may no longer see them."""
    _changed(conn)
    conn.execute(
        sa.update(t.notifications)
        .where(t.notifications.c.tenant_id == tenant_id, t.notifications.c.id == notification_id)
        .values(reason=None, summary=WITHDRAWN_SUMMARY)
    )
    outbox.scrub_payloads(conn, tenant_id, notification_id)


def due_for_expiry(conn: Connection, now: datetime, limit: int) -> list[Notification]:
    n = t.notifications
    rows = conn.execute(
        sa.select(n)
        .where(n.c.state == "open", n.c.expires_at <= now)
        .order_by(n.c.expires_at)
        .limit(limit)
    ).all()
    return [_row(r._mapping) for r in rows]


def _row(mapping: RowMapping) -> Notification:
    return cast(Notification, dict(mapping))  # every column of notifications


def fold_throttled(
    conn: Connection, tenant_id: str, notification_id: str, decision: str, inputs: dict[str, Any]
) -> None:
    """A notification its throttle folded: the decision it ended with and why (its
    ``inputs`` gain ``throttled``, which its trail shows)."""
    _changed(conn)
    n = t.notifications
    conn.execute(
        sa.update(n)
        .where(n.c.tenant_id == tenant_id, n.c.id == notification_id)
        .values(decision=decision, inputs=inputs)
    )
