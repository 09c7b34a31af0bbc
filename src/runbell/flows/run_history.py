"""A run's per-step trace: every transition, operation change, finding, owner change,
answer and amendment, oldest first, each naming who or what caused it (issue 18 item 8).

Read-only, one read transaction, after the same access check as ``GET /v1/runs/{id}``.

Invariants kept here (DESIGN §2):

- 8: access is checked now (404 for a run the caller may not see, or another tenant's).
- 11: what a step shows is what the run's authenticated views show already; an actor is
  ``{kind, credential_id?, user_id?, role?, worker_id?, source_id?}`` — ids, never a
  secret (no key, token, hash or sealed value is ever stored in one).
- A step written before the trace existed has ``actor: null`` (not recorded), never a
  guess.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict

from runbell.domain.principal import Principal
from runbell.flows import views
from runbell.flows.context import Core
from runbell.flows.runs import get_run
from runbell.store import amendments, history, operations, ownership, runs
from runbell.store.operations import Operation

#: Steps at the same instant, in the order they happen inside one unit of work.
_ORDER = {"owner_change": 0, "operation": 1, "transition": 2, "amendment": 3, "answer": 4}


class TraceStep(TypedDict, total=False):
    """One step of the trace. ``kind`` says which of the other keys it carries."""

    at: str | None
    kind: str  # transition | operation | owner_change | answer | amendment
    actor: dict[str, Any] | None
    # transition
    version: int
    transition: str  # create | state | update | request | cancel | amend | review | …
    from_state: str | None
    to_state: str
    reason: str | None
    source_id: str | None
    # operation
    operation_id: str
    action: str  # declared | moved | finding | superseded
    state: str
    finding: str
    # owner_change
    change: str  # claim | takeover
    previous: dict[str, str | None]
    owner: dict[str, str | None]
    epoch: int
    previous_may_still_act: bool
    # answer / amendment
    input_request_id: str
    purpose: str
    decision: str
    user_id: str | None
    edited: bool  # an approval of an edited value (issue 19 item 3)
    amendment_id: str


class History(TypedDict):
    """``GET /v1/runs/{id}/history``."""

    run_id: str
    steps: list[TraceStep]


def run_history(core: Core, who: Principal, run_id: str) -> History:
    """The run's trace, oldest first. 404 when ``who`` may not see the run."""
    get_run(core, who, run_id)  # the access check, as GET /v1/runs/{id}
    tenant_id = who.tenant_id
    timed: list[tuple[datetime, int, int, TraceStep]] = []

    def add(at: datetime, step: TraceStep) -> None:
        step["at"] = views.iso(at)
        timed.append((at, _ORDER[step["kind"]], len(timed), step))

    with core.db.read() as conn:
        for tr in runs.list_transitions(conn, tenant_id, run_id):
            add(
                tr.at,
                {
                    "kind": "transition",
                    "version": tr.version,
                    "transition": tr.kind,
                    "from_state": tr.from_state,
                    "to_state": tr.to_state,
                    "reason": tr.reason,
                    "source_id": tr.source_id,
                    "actor": tr.actor,
                },
            )
        for op in operations.for_run(conn, tenant_id, run_id):
            for at, step in _operation_steps(op):
                add(at, step)
        for change in ownership.for_run(conn, tenant_id, run_id):
            add(
                change["at"],
                {
                    "kind": "owner_change",
                    "change": change["kind"],
                    "previous": {
                        "credential_id": change["from_credential_id"],
                        "worker_id": change["from_worker_id"],
                    },
                    "owner": {
                        "credential_id": change["to_credential_id"],
                        "worker_id": change["to_worker_id"],
                    },
                    "epoch": change["epoch"],
                    "previous_may_still_act": change["previous_may_still_act"],
                    "reason": change["reason"],
                    "actor": change["actor"],
                },
            )
        every = ("pending", "approved", "rejected", "cancelled")
        for proposed in amendments.for_run(conn, tenant_id, run_id, states=every):
            add(
                proposed.created_at,
                {
                    "kind": "amendment",
                    "amendment_id": proposed.id,
                    "state": proposed.state,
                    "user_id": proposed.proposed_by,
                    "actor": proposed.actor or {"kind": "user", "user_id": proposed.proposed_by},
                },
            )
        for answer in history.answers_for_run(conn, tenant_id, run_id):
            add(
                answer["created_at"],
                {
                    "kind": "answer",
                    "input_request_id": answer["input_request_id"],
                    "purpose": answer["purpose"],
                    "decision": answer["decision"],
                    "user_id": answer["user_id"],
                    "edited": bool(answer["edited"]),
                    "actor": answer["actor"] or {"kind": "user", "user_id": answer["user_id"]},
                },
            )
    timed.sort(key=lambda item: item[:3])
    return {"run_id": run_id, "steps": [step for *_, step in timed]}


def _operation_steps(op: Operation) -> list[tuple[datetime, TraceStep]]:
    """Each entry of the operation's history as a step, with when it happened."""
    out = []
    for entry in op.history or []:
        action = entry.get("action") or ("declared" if "from" not in entry else "moved")
        step: TraceStep = {
            "kind": "operation",
            "operation_id": op.operation_id,
            "action": str(action),
            "state": str(entry.get("state")),
            "from_state": entry.get("from"),
            "actor": entry.get("actor"),
        }
        for key in ("reason", "finding", "epoch"):
            if entry.get(key) is not None:
                step[key] = entry[key]
        out.append((_parsed(entry.get("at"), op.updated_at), step))
    return out


def _parsed(at: Any, fallback: datetime) -> datetime:
    if isinstance(at, str):
        try:
            return datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            return fallback
    return fallback
