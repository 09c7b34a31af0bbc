"""Run links: the conversations, messages, tickets… a run is linked to (``run_links``).

A run's links are replaced as a whole when its runtime sends them (``PUT /v1/runs/{id}``
with ``links``); :func:`linked_runs` is the subquery behind ``GET /v1/runs?link=kind:id``
(``ix_run_links_target``: one indexed lookup, whatever the tenant's history).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.jobs import RunLink
from runbell.store import tables as t

_L = t.run_links


def replace_links(
    conn: Connection, tenant_id: str, run_id: str, links: list[RunLink], now: datetime
) -> None:
    """The run's links become ``links`` (in that order)."""
    conn.execute(sa.delete(_L).where(_L.c.tenant_id == tenant_id, _L.c.run_id == run_id))
    if links:
        conn.execute(
            _L.insert(),
            [
                {
                    "tenant_id": tenant_id,
                    "run_id": run_id,
                    "kind": link["kind"],
                    "link_id": link["id"],
                    "url": link["url"],
                    "position": n,
                    "created_at": now,
                }
                for n, link in enumerate(links)
            ],
        )


def links_of(conn: Connection, tenant_id: str, run_id: str) -> list[RunLink]:
    rows = conn.execute(
        sa.select(_L.c.kind, _L.c.link_id, _L.c.url)
        .where(_L.c.tenant_id == tenant_id, _L.c.run_id == run_id)
        .order_by(_L.c.position)
    ).all()
    return [{"kind": r.kind, "id": r.link_id, "url": r.url} for r in rows]


def linked_runs(tenant_id: str, kind: str, link_id: str) -> sa.Select[Any]:
    """Subquery: the ids of the tenant's runs linked to ``kind:link_id``."""
    return sa.select(_L.c.run_id).where(
        _L.c.tenant_id == tenant_id, _L.c.kind == kind, _L.c.link_id == link_id
    )
