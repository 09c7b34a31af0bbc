"""Names of credentials, for pages and the trace: API keys and delegated tokens by id
(read only; :mod:`runbell.store.accounts` and :mod:`runbell.store.delegations` write
them). Never a secret or a hash."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.store import tables as t


def credential_names(conn: Connection, tenant_id: str, ids: Iterable[str]) -> dict[str, str]:
    """``{credential id: name}`` for the tenant's API keys and delegated tokens among
    ``ids`` that have a name (at most 50 looked up; the trace names credentials by it)."""
    wanted = sorted(set(ids))[:50]
    if not wanted:
        return {}
    out: dict[str, str] = {}
    for table in (t.api_keys, t.delegated_tokens):
        rows = conn.execute(
            sa.select(table.c.id, table.c.name).where(
                table.c.tenant_id == tenant_id, table.c.id.in_(wanted), table.c.name.is_not(None)
            )
        ).all()
        out.update({str(i): str(n) for i, n in rows if n})
    return out


def key_names(conn: Connection, tenant_id: str, key_ids: set[str]) -> dict[str, str | None]:
    """The names of some of the tenant's API keys (never a secret or a hash), by id."""
    if not key_ids:
        return {}
    k = t.api_keys
    rows = conn.execute(
        sa.select(k.c.id, k.c.name).where(k.c.tenant_id == tenant_id, k.c.id.in_(sorted(key_ids)))
    ).all()
    return {str(r.id): r.name for r in rows}
