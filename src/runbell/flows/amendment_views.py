"""Amendments as callers see them: one amendment's view, typed, and a run's pending ones.

Apart from :mod:`runbell.flows.amendments` (proposing and deciding) so the run snapshot
reads them without importing the writes.
"""

from __future__ import annotations

from typing import Any, TypedDict

from runbell.flows import views
from runbell.store import amendments as store
from runbell.store.amendments import Amendment


class Proposer(TypedDict):
    id: str
    email: str | None


class AmendmentView(TypedDict):
    """An amendment as the API and the run snapshot show it."""

    id: str
    run_id: str
    input_request_id: str
    state: str
    text: str
    changes: dict[str, Any]
    base: dict[str, Any]
    run_version: int
    proposed_by: Proposer
    created_at: str | None
    decided_by: str | None
    decided_at: str | None
    applied_version: int | None


def amendment_view(a: Amendment) -> AmendmentView:
    return {
        "id": a.id,
        "run_id": a.run_id,
        "input_request_id": a.input_request_id,
        "state": a.state,
        "text": a.text,
        "changes": a.changes or {},
        "base": a.base or {},
        "run_version": a.run_version,
        "proposed_by": {"id": a.proposed_by, "email": a.proposed_by_email},
        "created_at": views.iso(a.created_at),
        "decided_by": a.decided_by,
        "decided_at": views.iso(a.decided_at),
        "applied_version": a.applied_version,
    }


def pending_views(conn: Any, tenant_id: str, run_id: str) -> list[AmendmentView]:
    """The run's pending amendments, for the run snapshot."""
    return [amendment_view(a) for a in store.for_run(conn, tenant_id, run_id)]
