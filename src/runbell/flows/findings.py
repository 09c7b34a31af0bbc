"""Findings: what someone other than a run's completion owner found about one of its
operations (a conflict, a receipt, a lookup), put on the ledger as a report — never as a
state change (issue 18 item 2).

One unit of work: the run row locked first, then the operation row.

Invariants kept here (DESIGN §2):

- 15 and the owner rule: a finding changes no operation state, no run state, no outcome
  and raises no notification; only the completion owner decides (``flows.ownership``).
  The owner (or a person) reads it on the ledger and the run page and settles the
  operation, or not.
- 11: the finding and its evidence stay in the ledger and its authenticated views; the
  feed and webhooks never carry them.
- 8 (trace): every finding names who reported it (credential id and kind, worker id,
  person); never a secret.
"""

from __future__ import annotations

from typing import Any, TypedDict

import structlog

from runbell.domain import capabilities
from runbell.domain.errors import Conflict, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.flows import ownership, views
from runbell.flows.context import Core
from runbell.flows.inputs import FindingBody
from runbell.flows.operation_views import OperationView, operation_view
from runbell.store import operations as ledger
from runbell.store import runs

log = structlog.get_logger(__name__)

#: What a finding may say the operation's effect is ("evidence": only evidence, no claim).
FINDINGS = ("confirmed", "absent", "conflict", "failed", "uncertain", "evidence")
#: Findings kept per operation: a helper cannot grow a row without bound.
MAX_FINDINGS = 100


class Finding(TypedDict, total=False):
    """One finding as the ledger keeps it (``reports`` of the operation)."""

    finding: str
    actor: dict[str, str]
    at: str | None
    evidence: dict[str, Any]


class FindingAnswer(TypedDict):
    operation: OperationView
    finding: Finding


def report(
    core: Core, who: Principal, run_id: str, operation_id: str, body: FindingBody
) -> FindingAnswer:
    """Attach a finding to the operation (any credential or person who may see the run).
    404 for a run the caller may not see or an unknown operation; 409 when the operation
    holds :data:`MAX_FINDINGS` already."""
    who.require(capabilities.REPORT)  # a finding is a report, never a decision
    finding = body.get("finding")
    if finding not in FINDINGS:
        raise ValidationFailed(f"finding must be one of {', '.join(FINDINGS)}", field="finding")
    evidence = body.get("evidence")
    if evidence is not None and not isinstance(evidence, dict):
        raise ValidationFailed("evidence must be an object", field="evidence")
    worker = body.get("worker_id")
    worker_id = ownership.checked_id(worker, "worker_id") if worker is not None else None

    with core.db.transaction() as tx:
        run = runs.get_run(tx.conn, who.tenant_id, run_id, for_update=True)
        if run is None or not runs.can_see_run(tx.conn, who, run_id):
            raise NotFound(f"no run {run_id!r}")
        op = ledger.get(tx.conn, who.tenant_id, run_id, operation_id)
        if op is None:
            raise NotFound(f"no operation {operation_id!r} in run {run_id!r}")
        found = list(op.reports or [])
        if len(found) >= MAX_FINDINGS:
            raise Conflict(
                f"operation {operation_id!r} holds {MAX_FINDINGS} findings already",
                current={"operation": operation_view(op)},
            )
        entry: Finding = {
            "finding": str(finding),
            "actor": ownership.actor_of(who, worker_id),
            "at": views.iso(tx.now),
        }
        if evidence is not None:
            entry["evidence"] = evidence
        step: dict[str, Any] = {"state": op.state, "from": op.state, "at": entry["at"]}
        step.update({"epoch": op.epoch, "action": "finding", "finding": finding})
        step["actor"] = entry["actor"]
        op = ledger.set_trace(
            tx.conn,
            op,
            history=[*(op.history or []), step],
            updated_at=tx.now,
            reports=[*found, dict(entry)],
        )
        log.info("operation.finding", run_id=run_id, finding=finding)
        return {"operation": operation_view(op), "finding": entry}
