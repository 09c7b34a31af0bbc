"""What a person's channels did for them: reads behind engagement metrics."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.store import tables as t


def last_delivered_attention(
    conn: Connection, tenant_id: str, user_id: str, channel: str
) -> str | None:
    """The attention type of the most recent notification delivered (accepted) to
    ``user_id`` on ``channel``, or None if that channel never delivered them anything.
    Read when consent is withdrawn (rare): it walks the person's notifications
    (``ix_notifications_inbox``) and each one's deliveries (``uq_delivery_once``)."""
    n, d = t.notifications, t.deliveries
    row = conn.execute(
        sa.select(n.c.attention_type)
        .select_from(n.join(d, d.c.notification_id == n.c.id))
        .where(
            n.c.tenant_id == tenant_id,
            n.c.recipient_user_id == user_id,
            d.c.channel == channel,
            d.c.status == "accepted",
        )
        .order_by(d.c.updated_at.desc())
        .limit(1)
    ).first()
    return None if row is None else str(row[0])
