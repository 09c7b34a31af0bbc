"""Delegated tokens (``rbd_…``): minted by a runtime key for a helper, bound to one run.

Only the hash of a token's secret is stored. A token authenticates while it is neither
expired nor revoked and the key that minted it is not revoked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.capabilities import Scope, ordered
from runbell.domain.errors import NotFound
from runbell.domain.principal import Principal
from runbell.ids import new_id, new_token, token_hash
from runbell.store import tables as t

PREFIX = "rbd"


@dataclass(frozen=True, slots=True)
class Delegation:
    """One delegated token as stored (never its secret)."""

    id: str
    tenant_id: str
    key_id: str
    run_id: str
    name: str
    capabilities: list[str]
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None


_COLUMNS = (
    t.delegated_tokens.c.id,
    t.delegated_tokens.c.tenant_id,
    t.delegated_tokens.c.key_id,
    t.delegated_tokens.c.run_id,
    t.delegated_tokens.c.name,
    t.delegated_tokens.c.capabilities,
    t.delegated_tokens.c.created_at,
    t.delegated_tokens.c.expires_at,
    t.delegated_tokens.c.revoked_at,
)


def _of(row: Any) -> Delegation:
    return Delegation(**row._mapping)


def create(
    conn: Connection,
    *,
    tenant_id: str,
    key_id: str,
    run_id: str,
    name: str,
    capabilities: frozenset[str],
    now: datetime,
    expires_at: datetime,
) -> tuple[Delegation, str]:
    """A new token: (its row, its secret, shown once)."""
    secret = new_token(PREFIX)
    delegation = Delegation(
        id=new_id("dlg"),
        tenant_id=tenant_id,
        key_id=key_id,
        run_id=run_id,
        name=name,
        capabilities=ordered(capabilities),
        created_at=now,
        expires_at=expires_at,
        revoked_at=None,
    )
    conn.execute(
        t.delegated_tokens.insert().values(
            **{f: getattr(delegation, f) for f in Delegation.__slots__},
            token_hash=token_hash(secret),
        )
    )
    return delegation, secret


def get(conn: Connection, tenant_id: str, delegation_id: str) -> Delegation:
    row = conn.execute(
        sa.select(*_COLUMNS).where(
            t.delegated_tokens.c.tenant_id == tenant_id, t.delegated_tokens.c.id == delegation_id
        )
    ).first()
    if row is None:
        raise NotFound(f"no delegated token {delegation_id!r}")
    return _of(row)


def for_run(conn: Connection, tenant_id: str, run_id: str) -> list[Delegation]:
    rows = conn.execute(
        sa.select(*_COLUMNS)
        .where(t.delegated_tokens.c.tenant_id == tenant_id, t.delegated_tokens.c.run_id == run_id)
        .order_by(t.delegated_tokens.c.created_at, t.delegated_tokens.c.id)
    ).all()
    return [_of(r) for r in rows]


def revoke(conn: Connection, tenant_id: str, delegation_id: str, now: datetime) -> None:
    conn.execute(
        sa.update(t.delegated_tokens)
        .where(
            t.delegated_tokens.c.tenant_id == tenant_id,
            t.delegated_tokens.c.id == delegation_id,
            t.delegated_tokens.c.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )


def authenticate(conn: Connection, token: str, now: datetime) -> Principal | None:
    """The principal of a live delegated token (its key's runtime identity, limited to
    the token's run and to the capabilities both the token and its key hold), or None."""
    found = authenticate_until(conn, token, now)
    return None if found is None else found[0]


def authenticate_until(
    conn: Connection, token: str, now: datetime
) -> tuple[Principal, datetime] | None:
    """:func:`authenticate` and the token's expiry."""
    d, k = t.delegated_tokens, t.api_keys
    row = conn.execute(
        sa.select(
            d.c.id,
            d.c.tenant_id,
            d.c.key_id,
            d.c.run_id,
            d.c.capabilities,
            d.c.expires_at,
            k.c.role,
            k.c.source_id,
            k.c.capabilities.label("key_capabilities"),
        )
        .join(k, sa.and_(k.c.id == d.c.key_id, k.c.tenant_id == d.c.tenant_id))
        .where(
            d.c.token_hash == token_hash(token),
            d.c.revoked_at.is_(None),
            k.c.revoked_at.is_(None),
        )
    ).first()
    if row is None or row.expires_at <= now:
        return None
    held = frozenset(row.capabilities or [])
    if row.key_capabilities is not None:  # never wider than the key is now
        held &= frozenset(row.key_capabilities)
    delegated = Principal(
        tenant_id=row.tenant_id,
        kind="key",
        role="runtime",
        key_id=row.key_id,
        source_id=row.source_id,
        token_id=row.id,
        scope=Scope(capabilities=held, bound_run=row.run_id),
    )
    return delegated, row.expires_at
