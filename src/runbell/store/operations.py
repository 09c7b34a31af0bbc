"""The operations ledger's rows (the run's worker claim and outcome live on the run row:
``store.runs``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from runbell.store import tables as t

_OPS = t.operations


@dataclass(frozen=True, slots=True)
class Operation:
    """One row of the ledger: an intended effect of a run on a target, and where it stands.
    ``details`` and ``evidence`` are the caller's JSON objects, kept as given."""

    tenant_id: str
    run_id: str
    operation_id: str
    position: int
    target_type: str
    target_id: str
    target_version: str | None
    intent: str
    details: dict[str, Any] | None
    idempotency_key: str | None
    state: str
    epoch: int | None
    evidence: dict[str, Any] | None
    history: list[dict[str, Any]]
    body_hash: str
    created_at: datetime
    updated_at: datetime
    # Findings others reported ([{finding, evidence, actor, at}]) and the owner's
    # supersede ({reason, actor, at}); None when there are none.
    reports: list[dict[str, Any]] | None = None
    superseded: dict[str, Any] | None = None

    @classmethod
    def of(cls, row: RowMapping) -> Operation:
        return cls(**row)


@dataclass(frozen=True, slots=True)
class Moved:
    """What moving an operation writes: its new state, evidence and history step."""

    state: str
    evidence: dict[str, Any] | None
    history: list[dict[str, Any]]
    updated_at: datetime
    epoch: int | None = None  # None: the operation keeps its epoch


def for_run(conn: Connection, tenant_id: str, run_id: str) -> list[Operation]:
    """Every operation of the run, in declaration order."""
    rows = conn.execute(
        sa.select(_OPS)
        .where(_OPS.c.tenant_id == tenant_id, _OPS.c.run_id == run_id)
        .order_by(_OPS.c.position)
    ).all()
    return [Operation.of(r._mapping) for r in rows]


def get(conn: Connection, tenant_id: str, run_id: str, operation_id: str) -> Operation | None:
    row = conn.execute(
        sa.select(_OPS).where(
            _OPS.c.tenant_id == tenant_id,
            _OPS.c.run_id == run_id,
            _OPS.c.operation_id == operation_id,
        )
    ).first()
    return None if row is None else Operation.of(row._mapping)


def get_many(
    conn: Connection, tenant_id: str, run_id: str, operation_ids: list[str]
) -> dict[str, Operation]:
    if not operation_ids:
        return {}
    rows = conn.execute(
        sa.select(_OPS).where(
            _OPS.c.tenant_id == tenant_id,
            _OPS.c.run_id == run_id,
            _OPS.c.operation_id.in_(operation_ids),
        )
    ).all()
    return {r.operation_id: Operation.of(r._mapping) for r in rows}


def counts(conn: Connection, tenant_id: str, run_id: str) -> dict[str, int]:
    """How many of the run's operations are in each state (states with none left out)."""
    rows = conn.execute(
        sa.select(_OPS.c.state, sa.func.count())
        .where(_OPS.c.tenant_id == tenant_id, _OPS.c.run_id == run_id)
        .group_by(_OPS.c.state)
    ).all()
    return {str(state): int(n) for state, n in rows}


def counts_for_runs(
    conn: Connection, tenant_id: str, run_ids: list[str]
) -> dict[str, dict[str, int]]:
    """:func:`counts` for many runs in one statement (a page of the runs overview)."""
    if not run_ids:
        return {}
    rows = conn.execute(
        sa.select(_OPS.c.run_id, _OPS.c.state, sa.func.count())
        .where(_OPS.c.tenant_id == tenant_id, _OPS.c.run_id.in_(sorted(set(run_ids))))
        .group_by(_OPS.c.run_id, _OPS.c.state)
    ).all()
    out: dict[str, dict[str, int]] = {}
    for run_id, state, n in rows:
        out.setdefault(str(run_id), {})[str(state)] = int(n)
    return out


def ids_by_state(
    conn: Connection, tenant_id: str, run_id: str, states: tuple[str, ...]
) -> dict[str, list[str]]:
    """The run's operation ids in each of ``states``, in declaration order."""
    rows = conn.execute(
        sa.select(_OPS.c.state, _OPS.c.operation_id)
        .where(_OPS.c.tenant_id == tenant_id, _OPS.c.run_id == run_id, _OPS.c.state.in_(states))
        .order_by(_OPS.c.position)
    ).all()
    out: dict[str, list[str]] = {}
    for state, op_id in rows:
        out.setdefault(str(state), []).append(str(op_id))
    return out


def excluded_by_amendment(conn: Connection, tenant_id: str, run_id: str) -> list[str]:
    """The run's ``not_started`` operations whose evidence is an approved amendment that
    left them out, in declaration order (read only when the run has ``not_started`` ones)."""
    rows = conn.execute(
        sa.select(_OPS.c.operation_id, _OPS.c.evidence)
        .where(
            _OPS.c.tenant_id == tenant_id,
            _OPS.c.run_id == run_id,
            _OPS.c.state == "not_started",
        )
        .order_by(_OPS.c.position)
    ).all()
    return [
        str(op_id)
        for op_id, evidence in rows
        if isinstance(evidence, dict) and evidence.get("excluded_by_amendment")
    ]


def states_of(
    conn: Connection, tenant_id: str, run_id: str, operation_ids: list[str]
) -> dict[str, str]:
    """The state of each of these operations of the run (those it declared)."""
    if not operation_ids:
        return {}
    rows = conn.execute(
        sa.select(_OPS.c.operation_id, _OPS.c.state).where(
            _OPS.c.tenant_id == tenant_id,
            _OPS.c.run_id == run_id,
            _OPS.c.operation_id.in_(sorted(set(operation_ids))),
        )
    ).all()
    return {str(op_id): str(state) for op_id, state in rows}


def next_position(conn: Connection, tenant_id: str, run_id: str) -> int:
    found = conn.execute(
        sa.select(sa.func.max(_OPS.c.position)).where(
            _OPS.c.tenant_id == tenant_id, _OPS.c.run_id == run_id
        )
    ).scalar()
    return 0 if found is None else int(found) + 1


def landing_on(
    conn: Connection, tenant_id: str, target_type: str, target_id: str, states: frozenset[str]
) -> list[Operation]:
    """Operations of the tenant on this target in one of ``states`` (any run) that the
    completion owner has not superseded."""
    rows = conn.execute(
        sa.select(_OPS).where(
            _OPS.c.tenant_id == tenant_id,
            _OPS.c.target_type == target_type,
            _OPS.c.target_id == target_id,
            _OPS.c.state.in_(sorted(states)),
            _OPS.c.superseded.is_(None),
        )
    ).all()
    return [Operation.of(r._mapping) for r in rows]


#: Columns a new operation never has: left out of the insert so they are SQL NULL (a JSON
#: column given None would store JSON ``null``, which ``IS NULL`` does not find).
_NOT_AT_DECLARATION = ("reports", "superseded")


def insert(conn: Connection, ops: list[Operation]) -> None:
    if ops:
        conn.execute(
            _OPS.insert(),
            [{k: v for k, v in asdict(op).items() if k not in _NOT_AT_DECLARATION} for op in ops],
        )


def move(conn: Connection, op: Operation, moved: Moved) -> Operation:
    """Write ``moved`` onto ``op``'s row; the operation as it is now."""
    values = {k: v for k, v in asdict(moved).items() if not (k == "epoch" and v is None)}
    conn.execute(
        sa.update(_OPS)
        .where(
            _OPS.c.tenant_id == op.tenant_id,
            _OPS.c.run_id == op.run_id,
            _OPS.c.operation_id == op.operation_id,
        )
        .values(**values)
    )
    return replace(op, **values)


def older_epoch_in_flight(conn: Connection, tenant_id: str, run_id: str, epoch: int) -> int:
    """How many of the run's operations were sent under an epoch older than ``epoch`` and
    have not settled: the previous worker may still cause their effect."""
    found = conn.execute(
        sa.select(sa.func.count()).where(
            _OPS.c.tenant_id == tenant_id,
            _OPS.c.run_id == run_id,
            _OPS.c.state == "sent",
            _OPS.c.epoch < epoch,
        )
    ).scalar()
    return int(found or 0)


def set_trace(
    conn: Connection,
    op: Operation,
    *,
    history: list[dict[str, Any]],
    updated_at: datetime,
    reports: list[dict[str, Any]] | None = None,
    superseded: dict[str, Any] | None = None,
) -> Operation:
    """Record a finding (``reports``) or the owner's supersede (``superseded``) on ``op``,
    with its history step: the operation's state does not change. Returns it as it is now."""
    values: dict[str, Any] = {"history": history, "updated_at": updated_at}
    if reports is not None:
        values["reports"] = reports
    if superseded is not None:
        values["superseded"] = superseded
    conn.execute(
        sa.update(_OPS)
        .where(
            _OPS.c.tenant_id == op.tenant_id,
            _OPS.c.run_id == op.run_id,
            _OPS.c.operation_id == op.operation_id,
        )
        .values(**values)
    )
    return replace(op, **values)
