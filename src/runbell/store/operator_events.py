"""Operational events: problems an operator must fix (a disabled webhook endpoint, a
misconfigured destination), kept per tenant apart from the feed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from runbell.ids import new_id
from runbell.store import tables as t


def add(conn: Connection, tenant_id: str, kind: str, detail: dict[str, Any], now: datetime) -> str:
    """Record one event (``kind`` is a dotted name, ``detail`` holds ids, never secrets)."""
    event_id = new_id("op")
    conn.execute(
        t.operator_events.insert().values(
            id=event_id, tenant_id=tenant_id, kind=kind, detail=detail, created_at=now
        )
    )
    return event_id
