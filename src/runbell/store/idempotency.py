"""Idempotency-Key records: (tenant, principal, key) → the request's hash and its answer.

A record is claimed (inserted) at the start of the transaction that acts, and settled
with the answer at its end, so the answer exists exactly when the action committed. The
primary key makes a concurrent claim of the same key wait for the first transaction and
then fail, which the caller turns into a replay.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.records import IdempotencyRecord
from runbell.store import tables as t

k = t.idempotency_keys
CLAIMED = 0  # status_code of a record whose transaction has not finished


def get(conn: Connection, tenant_id: str, principal: str, key: str) -> IdempotencyRecord | None:
    row = conn.execute(
        sa.select(k).where(k.c.tenant_id == tenant_id, k.c.principal == principal, k.c.key == key)
    ).first()
    return None if row is None else cast(IdempotencyRecord, dict(row._mapping))


def claim(
    conn: Connection, tenant_id: str, principal: str, key: str, request_hash: str, now: datetime
) -> None:
    """Insert the record; raises IntegrityError when the key is taken (even uncommitted)."""
    conn.execute(
        k.insert().values(
            tenant_id=tenant_id,
            principal=principal,
            key=key,
            request_hash=request_hash,
            status_code=CLAIMED,
            response={},
            created_at=now,
        )
    )


def settle(
    conn: Connection,
    tenant_id: str,
    principal: str,
    key: str,
    status_code: int,
    response: dict[str, Any],
) -> None:
    conn.execute(
        sa.update(k)
        .where(k.c.tenant_id == tenant_id, k.c.principal == principal, k.c.key == key)
        .values(status_code=status_code, response=response)
    )
