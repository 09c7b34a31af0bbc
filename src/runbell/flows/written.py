"""Run writes through the process's group-commit writer (:mod:`runbell.runtime.writer`).

Every write to a run — create and edit, progress, input requests and their answers,
operations, cancellation, amendments — is one *unit* (a function of a
:class:`~runbell.store.db.Tx`) that the writer thread commits together with whatever
other units are waiting, instead of a transaction of its own (on SQLite a
``BEGIN IMMEDIATE`` that queued behind the writer's lock: issue 21 measured a p99 of
642 to 855 ms for ``PUT /v1/runs/{id}`` at 8 connections).

The rules a unit keeps (the writer's):

- it runs on the writer thread: it never opens ``core.db.transaction()``, never waits on
  the writer, and does nothing outside the database (HTTP, a state reader) — that happens
  before it is submitted, or after the commit (``tx.after_commit``);
- its lock key is ``(tenant_id, run_id)``: the writer orders a batch's units by it, so
  two processes lock runs in the same order;
- a unit that raises (404, 409, 422…) is rolled back to its own savepoint and its caller
  gets its error; the others in the batch commit. Nobody is answered before the batch's
  commit is durable (DESIGN §2, invariant 12).

Callers that already hold a transaction (web forms, schedules, hooks, MCP) call the
flows' ``*_in_tx`` / ``*_in`` functions directly instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import IntegrityError

from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey, claim, settle, stored
from runbell.flows.views import json_body
from runbell.store.db import Tx

T = TypeVar("T")


def write(core: Core, tenant_id: str, run_id: str, unit: Callable[[Tx], T]) -> T:
    """``unit`` committed by the writer under the run's lock key; its answer after the
    commit."""
    return core.writer.run(unit, key=(tenant_id, run_id))


def write_retried(core: Core, tenant_id: str, run_id: str, unit: Callable[[Tx], T]) -> T:
    """:func:`write`, tried once more when the unit's insert lost a race to a concurrent
    writer of the same row (another process): the second try sees the winner's row."""
    try:
        return write(core, tenant_id, run_id, unit)
    except IntegrityError:
        return write(core, tenant_id, run_id, unit)


def act_once(
    core: Core,
    key: IdempotencyKey | None,
    lock: tuple[str, str],
    prepare: Callable[[], Act],
) -> Answer:
    """:func:`runbell.flows.idempotency.act_once` through the writer: a retry under an
    Idempotency-Key is answered from its stored answer before anything else; otherwise
    ``prepare()`` runs (checks, outside any transaction) and the action it returns runs
    as one unit, its answer stored in the same transaction (``lock``: the run's
    ``(tenant_id, run_id)``)."""
    if key is not None:
        with core.db.read() as conn:
            found = stored(conn, core.box, key)
        if found is not None:
            return found
    act = prepare()

    def unit(tx: Tx) -> Answer:
        if key is not None:
            replay = claim(tx, core.box, key)  # an earlier unit of this batch, perhaps
            if replay is not None:
                return replay
        status, content = act(tx)
        if key is None:
            return Answer(status, json_body(content))
        return settle(tx, core.box, key, status, content)

    return write_retried(core, lock[0], lock[1], unit)
