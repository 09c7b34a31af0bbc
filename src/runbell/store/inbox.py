"""Reads of one person's inbox: filtered, without what an open digest folds, and the
digests' members. (Notifications are written by ``store.notifications`` only.)

A digest folds the notifications its items point at (``digest_items.notification_id``,
claimed by ``digest_items.digest_id``); while the digest's own notification is open, the
inbox lists the digest and hides them (index ``ix_digest_items_notification``).
"""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.records import Notification
from runbell.store import tables as t

_N = t.notifications
_I = t.digest_items
_D = t.digests


def _folded_by_open_digest(n: sa.Table) -> sa.Exists:
    """``n``'s row is an item of a digest whose notification is still open."""
    dn = _N.alias("digest_note")
    return sa.exists(
        sa.select(sa.literal(1))
        .select_from(
            _I.join(_D, sa.and_(_D.c.tenant_id == _I.c.tenant_id, _D.c.id == _I.c.digest_id)).join(
                dn, sa.and_(dn.c.tenant_id == _D.c.tenant_id, dn.c.id == _D.c.notification_id)
            )
        )
        .where(
            _I.c.tenant_id == n.c.tenant_id,
            _I.c.notification_id == n.c.id,
            dn.c.state == "open",
        )
    )


def select(
    conn: Connection,
    tenant_id: str,
    user_id: str,
    *,
    states: list[str] | None = None,
    types: tuple[str, ...] | None = None,
    run_id: str | None = None,
    subject_type: str | None = None,
    subject_id: str | None = None,
    before: str | None = None,
    up_to: str | None = None,
    fold: bool = False,
    limit: int,
) -> list[Notification]:
    """The person's notifications, newest first: in ``states``, of attention ``types``,
    about ``run_id`` or about runs of a subject (its type, its id, or both), older than
    ``before``, no newer than ``up_to``, without those an open digest folds when ``fold``."""
    q = sa.select(_N).where(_N.c.tenant_id == tenant_id, _N.c.recipient_user_id == user_id)
    if states:
        q = q.where(_N.c.state.in_(states))
    if types is not None:
        q = q.where(_N.c.attention_type.in_(types))
    if run_id is not None:
        q = q.where(_N.c.run_id == run_id)
    if subject_type is not None or subject_id is not None:
        r = t.runs
        match = [r.c.tenant_id == _N.c.tenant_id, r.c.run_id == _N.c.run_id]
        if subject_type is not None:
            match.append(r.c.subject["type"].as_string() == subject_type)
        if subject_id is not None:
            match.append(r.c.subject["id"].as_string() == subject_id)
        q = q.where(sa.exists(sa.select(sa.literal(1)).where(*match)))
    if before is not None:
        q = q.where(_N.c.id < before)
    if up_to is not None:
        q = q.where(_N.c.id <= up_to)
    if fold:
        q = q.where(~_folded_by_open_digest(_N))
    rows = conn.execute(q.order_by(_N.c.id.desc()).limit(limit)).all()
    return [cast(Notification, dict(r._mapping)) for r in rows]  # every column


def folded_by(conn: Connection, tenant_id: str, digest_note_ids: list[str]) -> dict[str, list[str]]:
    """The notifications each digest notification folds (its items' own notifications),
    oldest first."""
    if not digest_note_ids:
        return {}
    rows = conn.execute(
        sa.select(_D.c.notification_id.label("digest"), _I.c.notification_id.label("item"))
        .select_from(
            _D.join(_I, sa.and_(_I.c.tenant_id == _D.c.tenant_id, _I.c.digest_id == _D.c.id))
        )
        .where(
            _D.c.tenant_id == tenant_id,
            _D.c.notification_id.in_(digest_note_ids),
            _I.c.notification_id.is_not(None),
        )
        .order_by(_I.c.created_at, _I.c.id)
    )
    out: dict[str, list[str]] = {d: [] for d in digest_note_ids}
    for row in rows:
        out[row.digest].append(row.item)
    return out
