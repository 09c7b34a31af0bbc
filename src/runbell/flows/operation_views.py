"""The operations ledger as callers see it: one operation's view and the ledger's answers, typed.

Apart from :mod:`runbell.flows.operations` (the use cases) so the run page and the API
share one shape without the page importing the ledger's writes.
"""

from __future__ import annotations

from typing import Any, TypedDict

from runbell.domain.operations import allowed_next
from runbell.flows import views
from runbell.store.operations import Operation


class TargetView(TypedDict):
    type: str
    id: str
    version: str | None


class OperationView(TypedDict, total=False):
    """An operation as the API, the feed's snapshot and the run page show it."""

    operation_id: str
    run_id: str
    target: TargetView
    intent: str
    idempotency_key: str | None
    state: str
    allowed_next: list[str]
    epoch: int | None
    evidence: dict[str, Any] | None
    history: list[dict[str, Any]]
    created_at: str | None
    updated_at: str | None
    details: dict[str, Any] | None  # left out where the viewer is another run's
    reports: list[dict[str, Any]]  # findings others reported: [{finding, evidence, actor, at}]
    superseded: dict[str, Any] | None  # the owner's supersede: {reason, actor, at}


def operation_view(op: Operation, *, include_details: bool = True) -> OperationView:
    """An operation as the API shows it to a caller who may see the run."""
    out: OperationView = {
        "operation_id": op.operation_id,
        "run_id": op.run_id,
        "target": {
            "type": op.target_type,
            "id": op.target_id,
            "version": op.target_version,
        },
        "intent": op.intent,
        "idempotency_key": op.idempotency_key,
        "state": op.state,
        "allowed_next": list(allowed_next(op.state)),
        "epoch": op.epoch,
        "evidence": op.evidence,
        "history": op.history or [],
        "reports": op.reports or [],
        "superseded": op.superseded,
        "created_at": views.iso(op.created_at),
        "updated_at": views.iso(op.updated_at),
    }
    if include_details:
        out["details"] = op.details
    return out


class OperationsSummary(TypedDict):
    """A run's ledger in counts (``{"confirmed": 3, "uncertain": 1}``) and in words."""

    counts: dict[str, int]
    text: str


class LedgerSummary(OperationsSummary):
    uncertain: list[str]  # ids of operations that may have landed
    kept: int  # confirmed


class LedgerSnapshot(TypedDict):
    """What a run snapshot adds about its operations."""

    operations: OperationsSummary
    previous_worker_may_still_act: bool
    # Who owns the run's completion (issue 18): {credential_id, worker_id,
    # previous_may_still_act}; credential_id None: no owner recorded.
    completion_owner: dict[str, str | bool | None]


class LedgerState(TypedDict):
    """:class:`LedgerSnapshot` as the ledger's own answers carry it."""

    summary: OperationsSummary
    previous_worker_may_still_act: bool


class Ledger(LedgerState):
    """``GET /v1/runs/{id}/operations``."""

    run_id: str
    operations: list[OperationView]
    outcome: str | None


class DeclaredAnswer(LedgerState):
    """``POST /v1/runs/{id}/operations``."""

    run_id: str
    operations: list[OperationView]
    created: list[str]


class MovedAnswer(LedgerState):
    """``PATCH /v1/runs/{id}/operations/{op}``."""

    operation: OperationView
    changed: bool
    run: views.RunView


class TargetRef(TypedDict):
    type: str
    id: str


# The feed/webhook payload of operation.updated ("from" is a keyword: functional form).
OperationEvent = TypedDict(
    "OperationEvent",
    {
        "run_id": str,
        "operation_id": str,
        "state": str,
        "from": str | None,
        "target": TargetRef,
        "intent": str,
        "epoch": int | None,
    },
)


class ClaimAnswer(TypedDict):
    """``POST /v1/runs/{id}/claim``."""

    run_id: str
    worker_id: str
    epoch: int
    previous_worker_id: str | None
    previous_worker_may_still_act: bool
    owner: dict[str, str | None]  # the completion owner now: credential_id, worker_id
    takeover: bool  # this claim took the run over from another worker or credential
