"""Digest items (attention waiting for a digest) and the digests that were sent.

Exactly once: a digest's identity (tenant, recipient, key, window start, part) is unique
(``uq_digest_once``), and the items it lists are claimed (``digest_id`` set where it was
NULL) in the transaction that inserts it; a flusher that loses either race rolls back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from runbell.domain.records import DigestGroup
from runbell.store import fast
from runbell.store import tables as t
from runbell.store.db import Tx

_I = t.digest_items
_D = t.digests


def _insert(conn: Connection, table: sa.Table) -> Any:
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


ITEM_COLUMNS = tuple(c.name for c in _I.columns)


def _add_item_sql(dialect: str) -> fast.Built:
    ins = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_I)
    return (
        ins.values({c: sa.bindparam(c, type_=_I.c[c].type) for c in ITEM_COLUMNS})
        .on_conflict_do_nothing()
        .returning(_I.c.id)
    )


# On the write path of every digested transition: compiled once per dialect.
_ADD_ITEM = fast.Statement.per_dialect(_add_item_sql)


def _defer_item_sql(dialect: str) -> fast.Built:
    ins = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_I)
    return ins.values(
        {c: sa.bindparam(c, type_=_I.c[c].type) for c in ITEM_COLUMNS}
    ).on_conflict_do_nothing()


_DEFER_ITEM = fast.Statement.per_dialect(_defer_item_sql)


def defer_item(tx: Tx, row: dict[str, Any]) -> None:
    """:func:`add_item` when ``tx`` ends, with the other units' items of the batch in one
    ``executemany`` (nothing in a signal's transaction reads digest items back)."""
    tx.defer(_DEFER_ITEM, {c: row.get(c) for c in ITEM_COLUMNS})


def add_item(conn: Connection, row: dict[str, Any]) -> bool:
    """Collect one item; a second for the same transition and type is a no-op."""
    return _ADD_ITEM.first(conn, **{c: row.get(c) for c in ITEM_COLUMNS}) is not None


def due_groups(conn: Connection, now: datetime, limit: int) -> list[DigestGroup]:
    """Unclaimed items' groups whose window has closed or that reached their maximum size.

    Reads only unclaimed items (``ix_digest_items_due``), however many were ever sent."""
    count = sa.func.count().label("items")
    rows = conn.execute(
        sa.select(
            _I.c.tenant_id,
            _I.c.recipient_user_id,
            _I.c.digest_key,
            _I.c.window_start,
            count,
            sa.func.min(_I.c.closes_at).label("closes_at"),
            sa.func.min(_I.c.max_items).label("max_items"),
        )
        .where(_I.c.digest_id.is_(None))
        .group_by(_I.c.tenant_id, _I.c.recipient_user_id, _I.c.digest_key, _I.c.window_start)
        .having(sa.or_(sa.func.min(_I.c.closes_at) <= now, count >= sa.func.min(_I.c.max_items)))
        .order_by(sa.func.min(_I.c.closes_at))
        .limit(limit)
    )
    return [cast(DigestGroup, dict(r._mapping)) for r in rows]  # the columns selected


def unclaimed(
    conn: Connection, group: DigestGroup, limit: int, *, lock: bool = False
) -> list[dict[str, Any]]:
    """The group's unclaimed items, oldest first, up to ``limit``."""
    stmt = (
        sa.select(_I)
        .where(
            _I.c.tenant_id == group["tenant_id"],
            _I.c.recipient_user_id == group["recipient_user_id"],
            _I.c.digest_key == group["digest_key"],
            _I.c.window_start == group["window_start"],
            _I.c.digest_id.is_(None),
        )
        .order_by(_I.c.created_at, _I.c.id)
        .limit(limit)
    )
    if lock and conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    return [dict(r._mapping) for r in conn.execute(stmt)]


def parts_sent(conn: Connection, group: DigestGroup) -> int:
    """How many digests this window has sent already (a full one sends early)."""
    return int(
        conn.execute(
            sa.select(sa.func.count())
            .select_from(_D)
            .where(
                _D.c.tenant_id == group["tenant_id"],
                _D.c.recipient_user_id == group["recipient_user_id"],
                _D.c.digest_key == group["digest_key"],
                _D.c.window_start == group["window_start"],
            )
        ).scalar_one()
    )


def next_ordinal(conn: Connection, tenant_id: str, recipient: str, key: str) -> int:
    """One past the recipient's last digest of ``key``: the digest notification's
    ``transition_version`` (unique per tenant, recipient, synthetic run id and type)."""
    last = conn.execute(
        sa.select(sa.func.max(_D.c.ordinal)).where(
            _D.c.tenant_id == tenant_id,
            _D.c.recipient_user_id == recipient,
            _D.c.digest_key == key,
        )
    ).scalar()
    return int(last or 0) + 1


def insert_digest(conn: Connection, row: dict[str, Any]) -> bool:
    """Insert the digest unless its identity exists (another flusher made it)."""
    stmt = _insert(conn, _D).values(row).on_conflict_do_nothing().returning(_D.c.id)
    return conn.execute(stmt).first() is not None


def claim(conn: Connection, tenant_id: str, digest_id: str, item_ids: list[str]) -> int:
    """Mark the items as listed by ``digest_id``; returns how many were still unclaimed."""
    result = conn.execute(
        sa.update(_I)
        .where(_I.c.tenant_id == tenant_id, _I.c.id.in_(item_ids), _I.c.digest_id.is_(None))
        .values(digest_id=digest_id)
    )
    return int(result.rowcount)


def for_notification(
    conn: Connection, tenant_id: str, notification_id: str
) -> dict[str, Any] | None:
    row = conn.execute(
        sa.select(_D).where(_D.c.tenant_id == tenant_id, _D.c.notification_id == notification_id)
    ).first()
    return None if row is None else dict(row._mapping)


def items_of(conn: Connection, tenant_id: str, digest_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        sa.select(_I)
        .where(_I.c.tenant_id == tenant_id, _I.c.digest_id == digest_id)
        .order_by(_I.c.created_at, _I.c.id)
    )
    return [dict(r._mapping) for r in rows]


def drop(conn: Connection, tenant_id: str, item_ids: list[str]) -> int:
    """Forget unclaimed items (their recipient is no longer a member: nobody to tell)."""
    result = conn.execute(
        sa.delete(_I).where(
            _I.c.tenant_id == tenant_id, _I.c.id.in_(item_ids), _I.c.digest_id.is_(None)
        )
    )
    return int(result.rowcount)
