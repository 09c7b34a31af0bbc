"""Machines that answer (issue 19 item 4): callback URLs and the tenant's switch.

A callback URL's token (``rbc_…``) is shown once; only its hash is stored (as for
delegated tokens, store.delegations). A callback is used at most once: :func:`use` marks
it in the answering transaction, and only while it is unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.ids import new_id, new_token, token_hash
from runbell.store import tables as t

PREFIX = "rbc"
cb = t.callback_urls


@dataclass(frozen=True, slots=True)
class Callback:
    """One callback URL as stored (never its token)."""

    id: str
    tenant_id: str
    input_request_id: str
    run_id: str
    run_version: int
    request_version: int
    decisions: list[str]
    created_by: dict[str, Any] | None
    created_at: datetime
    expires_at: datetime | None
    used_at: datetime | None


_COLUMNS = tuple(getattr(cb.c, f) for f in Callback.__slots__)


def create(
    conn: Connection,
    *,
    tenant_id: str,
    input_request_id: str,
    run_id: str,
    run_version: int,
    request_version: int,
    decisions: list[str],
    created_by: dict[str, Any] | None,
    now: datetime,
    expires_at: datetime | None,
) -> tuple[Callback, str]:
    """A new callback: (its row, its token, shown once)."""
    token = new_token(PREFIX)
    callback = Callback(
        id=new_id("cbk"),
        tenant_id=tenant_id,
        input_request_id=input_request_id,
        run_id=run_id,
        run_version=run_version,
        request_version=request_version,
        decisions=decisions,
        created_by=created_by,
        created_at=now,
        expires_at=expires_at,
        used_at=None,
    )
    conn.execute(
        cb.insert().values(
            **{f: getattr(callback, f) for f in Callback.__slots__}, token_hash=token_hash(token)
        )
    )
    return callback, token


def by_token(conn: Connection, token: str) -> Callback | None:
    """The callback of ``token`` (any tenant: the token is the credential), or None."""
    row = conn.execute(sa.select(*_COLUMNS).where(cb.c.token_hash == token_hash(token))).first()
    return None if row is None else Callback(**row._mapping)


def use(conn: Connection, callback_id: str, now: datetime) -> bool:
    """Mark the callback used; False when it was used already (a concurrent use won)."""
    res = conn.execute(
        sa.update(cb).where(cb.c.id == callback_id, cb.c.used_at.is_(None)).values(used_at=now)
    )
    return bool(res.rowcount)
