"""Changes of a run's completion owner (``owner_changes``): a claim naming the first
worker, or a takeover, with who did it and whether the previous owner may still act. The
owner itself lives on the run row (``store.runs.set_worker``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.store import tables as t

_OC = t.owner_changes


class OwnerChange(TypedDict):
    """One row of ``owner_changes``."""

    tenant_id: str
    run_id: str
    seq: int
    kind: str  # claim | takeover
    from_credential_id: str | None
    from_worker_id: str | None
    to_credential_id: str | None
    to_worker_id: str
    epoch: int
    previous_may_still_act: bool
    reason: str | None
    actor: dict[str, Any] | None
    at: datetime


def add(conn: Connection, change: OwnerChange) -> None:
    conn.execute(_OC.insert().values(**change))


def next_seq(conn: Connection, tenant_id: str, run_id: str) -> int:
    found = conn.execute(
        sa.select(sa.func.max(_OC.c.seq)).where(
            _OC.c.tenant_id == tenant_id, _OC.c.run_id == run_id
        )
    ).scalar()
    return 1 if found is None else int(found) + 1


def for_run(conn: Connection, tenant_id: str, run_id: str) -> list[OwnerChange]:
    """The run's owner changes, oldest first."""
    rows = conn.execute(
        sa.select(_OC)
        .where(_OC.c.tenant_id == tenant_id, _OC.c.run_id == run_id)
        .order_by(_OC.c.seq)
    ).all()
    return [cast(OwnerChange, dict(r._mapping)) for r in rows]
