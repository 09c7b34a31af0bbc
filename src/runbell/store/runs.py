"""Runs, their transition history, who may see them, and inbound-event dedupe."""

# size: runs and their dedupe rows are read together, one statement per batch (lock_batch,
# read_inbound_batch: issue 21); the batch's cache of locked rows lives beside the
# statements that must drop it when they write.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.errors import NotFound
from runbell.domain.principal import Principal
from runbell.domain.records import InboundEvent, Run, RunChanges, Transition
from runbell.store import fast, scope
from runbell.store import tables as t
from runbell.store.db import Tx

RUN_COLUMNS = tuple(f.name for f in fields(Run))

_RUN = sa.select(t.runs).where(
    t.runs.c.tenant_id == sa.bindparam("tenant_id"), t.runs.c.run_id == sa.bindparam("run_id")
)
_GET_RUN = fast.Statement(lambda: _RUN)
# The run lock: one writer per run at a time on PostgreSQL. (SQLite's BEGIN IMMEDIATE
# already serializes writers; its dialect leaves FOR UPDATE out.)
_LOCK_RUN = fast.Statement(lambda: _RUN.with_for_update())

#: The columns a transition moves (:func:`move_run` writes all of them every time).
MOVED = (
    "state",
    "version",
    "updated_at",
    "sequence",
    "report",
    "started_at",
    "finished_at",
    "stop_reason",
    "error",
    "stall_clock_at",
    "stall_due_at",
    "stalled_at",
)
_MOVE_RUN = fast.Statement(
    lambda: (
        sa.update(t.runs)
        .where(
            t.runs.c.tenant_id == sa.bindparam("k_tenant"), t.runs.c.run_id == sa.bindparam("k_run")
        )
        .values({name: sa.bindparam(name, type_=t.runs.c[name].type) for name in MOVED})
    )
)
TRANSITION_COLUMNS = (
    "tenant_id",
    "run_id",
    "version",
    "kind",
    "from_state",
    "to_state",
    "source_id",
    "event_id",
    "sequence",
    "reason",
    "decision",
    "at",
    "reported_at",
    "actor",
)
_ADD_TRANSITION = fast.insert(t.transitions, TRANSITION_COLUMNS)
_INSERT_RUN = fast.insert(t.runs, RUN_COLUMNS)
_FIND_INBOUND = fast.Statement(
    lambda: sa.select(t.inbound_events).where(
        t.inbound_events.c.tenant_id == sa.bindparam("tenant_id"),
        t.inbound_events.c.source_id == sa.bindparam("source_id"),
        t.inbound_events.c.event_id == sa.bindparam("event_id"),
    )
)
INBOUND_COLUMNS = (
    "tenant_id",
    "source_id",
    "event_id",
    "run_id",
    "claimed_state",
    "sequence",
    "outcome",
    "reason",
    "run_version",
    "notification_ids",
    "received_at",
)
_INSERT_INBOUND = fast.insert(t.inbound_events, INBOUND_COLUMNS)


def get_run(
    conn: Connection, tenant_id: str, run_id: str, *, for_update: bool = False
) -> Run | None:
    """The run; ``for_update``: locked until the transaction ends (served from the
    writer's batch lock, :func:`lock_batch`, when it read this run and nothing has
    changed it since)."""
    if for_update:
        tx = Tx.of(conn)
        if tx is not None:
            locked: Run | None = tx.locked.pop((tenant_id, run_id), None)
            if locked is not None:
                return locked
    row = (_LOCK_RUN if for_update else _GET_RUN).first(conn, tenant_id=tenant_id, run_id=run_id)
    return None if row is None else Run(**row)


def _changed(conn: Connection, tenant_id: str, run_id: str) -> None:
    """The run's row is being written: the batch's copy of it is stale from here on."""
    tx = Tx.of(conn)
    if tx is not None and tx.locked:
        tx.locked.pop((tenant_id, run_id), None)


def _padded(keys: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """``keys`` padded to the next power of two with its last key (so a handful of
    statement shapes serve every batch size; a repeated key changes nothing)."""
    size = 1
    while size < len(keys):
        size *= 2
    return keys + [keys[-1]] * (size - len(keys))


#: Keys per batch statement at most (a longer OR chain is too deep for SQLite's parser
#: past ~1,000 terms; a batch may hold up to 1,000 units).
CHUNK = 64


def chunks(keys: list[Any]) -> list[list[Any]]:
    """``keys`` (sorted) in runs of at most :data:`CHUNK`."""
    return [keys[i : i + CHUNK] for i in range(0, len(keys), CHUNK)]


def _keyed_in(columns: list[sa.ColumnElement[Any]], n: int, names: str) -> sa.ColumnElement[bool]:
    """``(c1 = :<names[0]>0 AND c2 = …) OR …`` for ``n`` keys: the form both
    planners answer with one index lookup per key (SQLite's multi-index OR, PostgreSQL's
    bitmap OR). A row-value ``(c1, c2) IN ((…), (…))`` list made SQLite scan the table."""
    return sa.or_(
        *(
            sa.and_(
                *(
                    c == sa.bindparam(f"{p}{i}", type_=c.type)
                    for p, c in zip(names, columns, strict=True)
                )
            )
            for i in range(n)
        )
    )


_LOCK_MANY: dict[int, fast.Statement] = {}
_INBOUND_MANY: dict[int, fast.Statement] = {}


def _lock_many(n: int) -> fast.Statement:
    found = _LOCK_MANY.get(n)
    if found is None:
        r = t.runs
        found = _LOCK_MANY[n] = fast.Statement(
            lambda: (
                sa.select(r)
                .where(_keyed_in([r.c.tenant_id, r.c.run_id], n, "tr"))
                .order_by(r.c.tenant_id, r.c.run_id)
                .with_for_update()
            )
        )
    return found


def _inbound_many(n: int) -> fast.Statement:
    found = _INBOUND_MANY.get(n)
    if found is None:
        i = t.inbound_events
        found = _INBOUND_MANY[n] = fast.Statement(
            lambda: sa.select(i).where(
                _keyed_in([i.c.tenant_id, i.c.source_id, i.c.event_id], n, "tse")
            )
        )
    return found


# Module-level instances: tests/integration/test_fast_seam.py checks these shapes.
_LOCK_BATCH_2 = _lock_many(2)
_INBOUND_BATCH_2 = _inbound_many(2)


def lock_batch(tx: Tx, keys: list[tuple[str, str]]) -> None:
    """Lock every run of a batch in one statement, in (tenant, run) order — so two
    processes' batches cannot deadlock on them — and keep the rows for the units
    (:func:`get_run` with ``for_update``). A key whose run does not exist locks nothing
    (the unit that creates it reads it itself). On SQLite the batch's BEGIN IMMEDIATE
    already holds the lock: a plain read."""
    send_lock_batch(tx, keys)()


def send_lock_batch(tx: Tx, keys: list[tuple[str, str]]) -> Callable[[], None]:
    """:func:`lock_batch` sent now, its rows kept when the returned function is called
    (inside ``fast.pipeline`` the batch's reads share one round trip)."""
    sent = []
    for chunk in chunks(sorted(set(keys))):  # in order across chunks too
        ordered = _padded(chunk)
        params = {}
        for n, (tenant_id, run_id) in enumerate(ordered):
            params[f"t{n}"], params[f"r{n}"] = tenant_id, run_id
        sent.append(_lock_many(len(ordered)).send(tx.conn, **params))

    def keep() -> None:
        for pending in sent:
            for row in pending.rows():
                tx.locked[(row["tenant_id"], row["run_id"])] = Run(**row)

    return keep


def read_inbound_batch(tx: Tx, keys: list[tuple[str, str, str]]) -> None:
    """The dedupe rows of a batch's events, in one statement, for :func:`find_inbound`
    (one each; an event not stored is remembered as None)."""
    send_inbound_batch(tx, keys)()


def send_inbound_batch(tx: Tx, keys: list[tuple[str, str, str]]) -> Callable[[], None]:
    """:func:`read_inbound_batch` sent now, kept when the returned function is called."""
    sent = []
    for chunk in chunks(sorted(set(keys))):
        params = {}
        for n, (tenant_id, source_id, event_id) in enumerate(_padded(chunk)):
            params[f"t{n}"], params[f"s{n}"], params[f"e{n}"] = tenant_id, source_id, event_id
        sent.append((chunk, _inbound_many(len(params) // 3).send(tx.conn, **params)))

    def keep() -> None:
        for chunk, pending in sent:
            found = dict.fromkeys(chunk)
            for row in pending.rows():
                found[(row["tenant_id"], row["source_id"], row["event_id"])] = InboundEvent(**row)
            tx.inbound.update(found)

    return keep


def require_run(conn: Connection, tenant_id: str, run_id: str, *, for_update: bool = False) -> Run:
    run = get_run(conn, tenant_id, run_id, for_update=for_update)
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    return run


def new_run(**values: Any) -> Run:
    """A run not yet written: ``values`` and, for every other column, what the table
    would default it to."""
    return Run(**{**_NEW_RUN, **values})


_NEW_RUN: dict[str, Any] = {
    **dict.fromkeys(RUN_COLUMNS),
    "notify_on_complete": False,
    "worker_epoch": 0,
    "has_operations": False,
}


def insert_run(conn: Connection, run: Run) -> None:
    _changed(conn, run.tenant_id, run.run_id)
    # Compiled once (store.fast): built per call, this INSERT of every column cost more
    # CPU than the rest of a run's creation (issue 21, bench/profile/p2-put.md).
    _INSERT_RUN.execute(conn, **{name: getattr(run, name) for name in RUN_COLUMNS})


def update_run(conn: Connection, tenant_id: str, run_id: str, values: RunChanges) -> None:
    _changed(conn, tenant_id, run_id)
    conn.execute(
        sa.update(t.runs)
        .where(t.runs.c.tenant_id == tenant_id, t.runs.c.run_id == run_id)
        .values(**values)
    )


def move_run(conn: Connection, run: Run) -> None:
    """Write the :data:`MOVED` columns of ``run`` (the run as it is after a transition)."""
    _changed(conn, run.tenant_id, run.run_id)
    # Sent, not waited for: in the writer's pipeline (PostgreSQL) it rides with the next
    # statement that reads an answer; the row is locked, so it cannot miss, and an error
    # surfaces at that read and fails the batch (which then runs unit by unit).
    _MOVE_RUN.post(
        conn,
        k_tenant=run.tenant_id,
        k_run=run.run_id,
        **{name: getattr(run, name) for name in MOVED},
    )


def add_transition(conn: Connection, values: dict[str, Any]) -> None:
    """One history row (columns not in ``values`` are NULL)."""
    _ADD_TRANSITION.execute(conn, **{name: values.get(name) for name in TRANSITION_COLUMNS})


def defer_transition(tx: Tx, values: dict[str, Any]) -> None:
    """:func:`add_transition` at the end of ``tx``, in one statement with the others (no
    statement of a transaction reads the history it writes)."""
    tx.defer(_ADD_TRANSITION, {name: values.get(name) for name in TRANSITION_COLUMNS})


def list_transitions(conn: Connection, tenant_id: str, run_id: str) -> list[Transition]:
    rows = conn.execute(
        sa.select(t.transitions)
        .where(t.transitions.c.tenant_id == tenant_id, t.transitions.c.run_id == run_id)
        .order_by(t.transitions.c.version)
    ).all()
    return [Transition.of(r._mapping) for r in rows]


def can_see_run(conn: Connection, who: Principal, run_id: str) -> bool:
    if who.sees_all_runs:
        return True
    if who.scope is not None and who.kind == "key":  # a scoped runtime credential
        if not who.scope.id_in_scope(run_id):
            return False
        run = get_run(conn, who.tenant_id, run_id)
        return run is not None and who.scope.run_in_scope(run_id, run.created_by_credential)
    return (
        conn.execute(
            sa.select(t.run_access.c.user_id).where(
                t.run_access.c.tenant_id == who.tenant_id,
                t.run_access.c.run_id == run_id,
                t.run_access.c.user_id == who.user_id,
            )
        ).first()
        is not None
    )


def runs_by_id(conn: Connection, tenant_id: str, run_ids: set[str]) -> dict[str, Run]:
    """The runs named in ``run_ids`` (those that exist), by run id."""
    if not run_ids:
        return {}
    rows = conn.execute(
        sa.select(t.runs).where(t.runs.c.tenant_id == tenant_id, t.runs.c.run_id.in_(run_ids))
    ).all()
    return {r.run_id: Run.of(r._mapping) for r in rows}


def visible_among(conn: Connection, who: Principal, run_ids: set[str]) -> set[str]:
    """The subset of ``run_ids`` ``who`` may see right now (:func:`can_see_run` for many)."""
    if who.sees_all_runs:
        return set(run_ids)
    if not run_ids:
        return set()
    if who.kind == "key":  # a scoped runtime credential
        q = scope.run_ids(who).where(t.runs.c.run_id.in_(run_ids))
        return {str(r) for r in conn.execute(q).scalars()}
    rows = conn.execute(
        sa.select(t.run_access.c.run_id).where(
            t.run_access.c.tenant_id == who.tenant_id,
            t.run_access.c.user_id == who.user_id,
            t.run_access.c.run_id.in_(run_ids),
        )
    )
    return {r[0] for r in rows}


def visible_run_ids(who: Principal) -> sa.Select[tuple[str]]:
    """Subquery of run ids a (non-admin) user, or a scoped runtime credential, may see."""
    if who.kind == "key":
        return scope.run_ids(who)
    return sa.select(t.run_access.c.run_id).where(
        t.run_access.c.tenant_id == who.tenant_id, t.run_access.c.user_id == who.user_id
    )


def started_under(
    conn: Connection, who: Principal, schedule_id: str, limit: int
) -> list[tuple[str, str | None, str, int | None, datetime]]:
    """The latest runs started under a schedule that ``who`` may see, newest first:
    ``(run_id, title, state, instruction version, created_at)`` (a walk of
    ``ix_runs_tenant_schedule``)."""
    r = t.runs
    q = sa.select(
        r.c.run_id, r.c.title, r.c.state, r.c.schedule_instruction_version, r.c.created_at
    ).where(r.c.tenant_id == who.tenant_id, r.c.schedule_id == schedule_id)
    if not who.sees_all_runs:
        q = q.where(r.c.run_id.in_(visible_run_ids(who)))
    rows = conn.execute(q.order_by(r.c.created_at.desc(), r.c.run_id).limit(limit)).all()
    return [(row[0], row[1], row[2], row[3], row[4]) for row in rows]


def list_runs(
    conn: Connection,
    who: Principal,
    *,
    states: list[str] | None,
    after: str | None,
    limit: int,
    linked: sa.Select[Any] | None = None,
) -> list[Run]:
    """A page of the runs ``who`` may see, by run id; ``linked``: only those among these
    run ids (``store.links.linked_runs``: the jobs of one conversation)."""
    q = sa.select(t.runs).where(t.runs.c.tenant_id == who.tenant_id)
    if not who.sees_all_runs:
        q = q.where(t.runs.c.run_id.in_(visible_run_ids(who)))
    if linked is not None:
        q = q.where(t.runs.c.run_id.in_(linked))
    if states:
        q = q.where(t.runs.c.state.in_(states))
    if after:
        q = q.where(t.runs.c.run_id > after)
    rows = conn.execute(q.order_by(t.runs.c.run_id).limit(limit)).all()
    return [Run.of(r._mapping) for r in rows]


# --- inbound events ------------------------------------------------------------------


def find_inbound(
    conn: Connection, tenant_id: str, source_id: str, event_id: str
) -> InboundEvent | None:
    """The stored dedupe row of an event (served from the writer's batch read,
    :func:`read_inbound_batch`, when it read this one)."""
    tx = Tx.of(conn)
    if tx is not None and tx.inbound:
        key = (tenant_id, source_id, event_id)
        if key in tx.inbound:
            seen: InboundEvent | None = tx.inbound.pop(key)
            return seen
    row = _FIND_INBOUND.first(conn, tenant_id=tenant_id, source_id=source_id, event_id=event_id)
    return None if row is None else InboundEvent(**row)


def defer_inbound(tx: Tx, event: InboundEvent) -> None:
    """:func:`insert_inbound` at the end of ``tx``; :func:`pending_inbound` finds it before
    then. A concurrent retry's row makes the commit fail on the primary key."""
    tx.defer(_INSERT_INBOUND, {name: getattr(event, name) for name in INBOUND_COLUMNS})


def pending_inbound(tx: Tx, tenant_id: str, source_id: str, event_id: str) -> InboundEvent | None:
    """The dedupe row ``tx`` is about to write for this event, if any."""
    for row in tx.pending(_INSERT_INBOUND):
        if (row["tenant_id"], row["source_id"], row["event_id"]) == (
            tenant_id,
            source_id,
            event_id,
        ):
            return InboundEvent(**row)
    return None


def insert_inbound(conn: Connection, event: InboundEvent) -> None:
    """The dedupe row; its primary key is what makes a concurrent retry fail here."""
    tx = Tx.of(conn)
    if tx is not None:
        tx.inbound.pop((event.tenant_id, event.source_id, event.event_id), None)
    _INSERT_INBOUND.execute(conn, **{name: getattr(event, name) for name in INBOUND_COLUMNS})


def get_transition(
    conn: Connection, tenant_id: str, run_id: str, version: int
) -> Transition | None:
    row = conn.execute(
        sa.select(t.transitions).where(
            t.transitions.c.tenant_id == tenant_id,
            t.transitions.c.run_id == run_id,
            t.transitions.c.version == version,
        )
    ).first()
    return None if row is None else Transition.of(row._mapping)


def set_worker(
    conn: Connection,
    tenant_id: str,
    run_id: str,
    worker_id: str,
    epoch: int,
    owner_credential_id: str | None = None,
) -> None:
    """The run's current worker and its epoch (operations declared under an older epoch
    belong to a worker that may still act), and the credential that now owns its
    completion (None: left as it is)."""
    values: dict[str, Any] = {"worker_id": worker_id, "worker_epoch": epoch}
    if owner_credential_id is not None:
        values["owner_credential_id"] = owner_credential_id
    _changed(conn, tenant_id, run_id)
    conn.execute(
        sa.update(t.runs)
        .where(t.runs.c.tenant_id == tenant_id, t.runs.c.run_id == run_id)
        .values(**values)
    )


def set_outcome(conn: Connection, tenant_id: str, run_id: str, outcome: str | None) -> None:
    _changed(conn, tenant_id, run_id)
    conn.execute(
        sa.update(t.runs)
        .where(t.runs.c.tenant_id == tenant_id, t.runs.c.run_id == run_id)
        .values(outcome=outcome)
    )


def set_stall_due(conn: Connection, tenant_id: str, run_id: str, due: datetime | None) -> None:
    """Move the run's stall clock (a changed tenant default re-times it)."""
    _changed(conn, tenant_id, run_id)
    conn.execute(
        sa.update(t.runs)
        .where(t.runs.c.tenant_id == tenant_id, t.runs.c.run_id == run_id)
        .values(stall_due_at=due)
    )


def dependents_of(conn: Connection, tenant_id: str, request_ids: list[str]) -> list[Run]:
    """The runs that depend on one of these input requests (``ix_runs_depends_on``)."""
    if not request_ids:
        return []
    rows = conn.execute(
        sa.select(t.runs)
        .where(
            t.runs.c.tenant_id == tenant_id,
            t.runs.c.depends_on_request.in_(sorted(set(request_ids))),
        )
        .order_by(t.runs.c.run_id)
    ).all()
    return [Run.of(r._mapping) for r in rows]
