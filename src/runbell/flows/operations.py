"""The operations ledger: declare a run's intended effects, move them with evidence, read
them; and worker fencing (an epoch per claim: ``flows.ownership``).

Every public function is one unit of work: one transaction, the run row locked first (so a
claim, a declaration and a move of one run are serialized), then the ledger rows.

Invariants kept here (DESIGN §2):

- 15: an operation whose reply was lost is ``uncertain``: new work on the same target and
  intent is refused (409 naming the operation) while it, an ``unresolved`` lookup or a
  request still ``sent`` may land — tenant-wide, whoever took the run over — never
  retried under a new id, until it is settled or its completion owner supersedes it;
  illegal moves are 409 with the operation as it is.
- The owner rule: a move to a final state is the completion owner's (or an admin's);
  anyone else gets a 403 naming the rule and reports a finding instead
  (``flows.findings``). Every history step names who made it (``actor``).
- Fencing: a declaration or move that carries an epoch older than the run's is refused
  ("superseded worker"); the run says while the previous worker's ``sent`` operations have
  not settled (``previous_worker_may_still_act``).
- 11: ``details`` stay in the ledger and its authenticated API views; the feed event
  ``operation.updated`` (and its webhook) carries ids, state, target type and id, intent.
- 3: a ledger change after a completion that needs review re-judges it
  (:func:`runbell.flows.completion.review`).

Example (what the API router calls)::

    declare(core, runtime, "sync-7", {"operations": [{"operation_id": "inv-1",
        "target": {"type": "invoice", "id": "INV-1"}, "intent": "mark paid"}]})
    move(core, runtime, "sync-7", "inv-1", {"state": "sent", "epoch": 1})
    move(core, runtime, "sync-7", "inv-1", {"state": "uncertain",
        "evidence": {"error": "timeout after 30 s"}})
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import structlog

from runbell.domain import capabilities
from runbell.domain.errors import Conflict, NotFound, ValidationFailed
from runbell.domain.operations import (
    BLOCKS_NEW_WORK,
    FINAL,
    MAY_HAVE_LANDED,
    OP_STATES,
    OpState,
    move_refusal,
)
from runbell.domain.principal import Principal
from runbell.domain.records import Run
from runbell.domain.runs import is_terminal
from runbell.domain.text import public_text
from runbell.flows import completion, ownership, scope, stalls, views, written
from runbell.flows.context import Core
from runbell.flows.idempotency import Answer, IdempotencyKey, fingerprint
from runbell.flows.inputs import DeclareBody, MoveBody
from runbell.flows.operation_views import (
    DeclaredAnswer,
    Ledger,
    LedgerSnapshot,
    LedgerState,
    LedgerSummary,
    MovedAnswer,
    OperationEvent,
    operation_view,
)
from runbell.store import operations as ledger
from runbell.store import runs
from runbell.store.db import PendingEvent, Tx
from runbell.store.operations import Moved, Operation

log = structlog.get_logger(__name__)

INTENT_MAX = 200
MAX_BATCH = 500
ID_MAX = 200


# --- views -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Declared:
    """One declared operation, validated, its public text made safe; ``body_hash`` tells
    an idempotent re-declaration from a changed one."""

    operation_id: str
    target_type: str
    target_id: str
    target_version: str | None
    intent: str
    details: dict[str, Any] | None
    idempotency_key: str | None
    body_hash: str


def _event(op: Operation, before: str | None) -> OperationEvent:
    """The thin feed/webhook payload: no details, no evidence, no destination key."""
    return {
        "run_id": op.run_id,
        "operation_id": op.operation_id,
        "state": op.state,
        "from": before,
        "target": {"type": op.target_type, "id": op.target_id},
        "intent": op.intent,
        "epoch": op.epoch,
    }


def _emit(tx: Tx, op: Operation, before: str | None) -> None:
    tx.emit(
        op.tenant_id,
        PendingEvent("operation.updated", _event(op, before), run_id=op.run_id),
    )


def summary(conn: Any, tenant_id: str, run_id: str) -> LedgerSummary:
    """The ledger in counts, for a run's summary (e.g. when it is cancelled):
    ``{counts, text, uncertain: [ids that may have landed], kept: n confirmed}``."""
    counts = ledger.counts(conn, tenant_id, run_id)
    landed = ledger.ids_by_state(conn, tenant_id, run_id, tuple(sorted(MAY_HAVE_LANDED)))
    return {
        **completion.operations_summary(counts),
        "uncertain": [i for s in sorted(MAY_HAVE_LANDED, reverse=True) for i in landed.get(s, [])],
        "kept": int(counts.get(OpState.CONFIRMED, 0)),
    }


def snapshot(conn: Any, run: Run) -> LedgerSnapshot:
    """What the run snapshot adds: ``operations: {counts, text}`` and whether a replaced
    worker may still cause an effect."""
    tenant_id, run_id = run.tenant_id, run.run_id
    if not run.has_operations:
        return {
            "operations": completion.operations_summary({}),
            "previous_worker_may_still_act": False,
            "completion_owner": _owner(run, False),
        }
    stale = ledger.older_epoch_in_flight(conn, tenant_id, run_id, run.worker_epoch or 0)
    return {
        "operations": completion.operations_summary(ledger.counts(conn, tenant_id, run_id)),
        "previous_worker_may_still_act": stale > 0,
        "completion_owner": _owner(run, stale > 0),
    }


def _owner(run: Run, stale: bool) -> dict[str, str | bool | None]:
    return {
        "credential_id": run.owner_credential_id,
        "worker_id": run.worker_id,
        "previous_may_still_act": stale,
    }


def _ledger_state(conn: Any, run: Run) -> LedgerState:
    """:func:`snapshot` as the ledger's own answers carry it: ``summary: {counts, text}``
    beside the ``operations`` list."""
    shown = snapshot(conn, run)
    return {
        "summary": shown["operations"],
        "previous_worker_may_still_act": shown["previous_worker_may_still_act"],
    }


# --- reading -----------------------------------------------------------------------------


def list_operations(core: Core, who: Principal, run_id: str) -> Ledger:
    """The run's ledger in declaration order, with its counts. 404 if you may not see it."""
    who.require(capabilities.READ)
    with core.db.read() as conn:
        run = runs.get_run(conn, who.tenant_id, run_id)
        if run is None or not runs.can_see_run(conn, who, run_id):
            raise NotFound(f"no run {run_id!r}")
        ops = ledger.for_run(conn, who.tenant_id, run_id)
        return {
            "run_id": run_id,
            "operations": [operation_view(op) for op in ops],
            **_ledger_state(conn, run),
            "outcome": run.outcome,
        }


# --- fencing -----------------------------------------------------------------------------


def _fence(run: Run, epoch: int | None) -> None:
    """Refuse an update from a worker that was replaced (or from an epoch never issued)."""
    if epoch is None:
        return
    current = int(run.worker_epoch or 0)
    if epoch < current:
        raise Conflict(
            f"superseded worker: epoch {epoch} is older than the run's epoch {current} "
            f"(worker {run.worker_id!r} claimed the run since); this update was not "
            "applied",
            current={"run": views.run_view(run), "epoch": current},
        )
    if epoch > current:
        raise Conflict(
            f"epoch {epoch} was never issued for this run (its epoch is {current}); claim "
            "the run first with POST /v1/runs/{run_id}/claim",
            current={"run": views.run_view(run), "epoch": current},
        )


# --- declaring ---------------------------------------------------------------------------


def _checked_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > ID_MAX:
        raise ValidationFailed(f"{field} is 1 to {ID_MAX} characters", field=field)
    return value


def _declared(item: Any, where: str) -> Declared:
    """One declared operation validated, its public text made safe. ``where``: the
    prefix that names its fields in errors (``operations.3.`` or nothing)."""
    if not isinstance(item, dict):
        raise ValidationFailed(f"{where.rstrip('.')} must be an object", field=where.rstrip("."))
    op_id = _checked_id(item.get("operation_id"), f"{where}operation_id")
    target = item.get("target")
    if not isinstance(target, dict):
        raise ValidationFailed("target is {type, id, version?}", field=f"{where}target")
    t_type = _checked_id(target.get("type"), f"{where}target.type")[:100]
    t_id = _checked_id(target.get("id"), f"{where}target.id")
    version = target.get("version")
    if version is not None:
        version = str(version)[:100]
    raw = item.get("intent")
    intent = public_text(raw, INTENT_MAX) if isinstance(raw, str) else None
    if not intent:
        raise ValidationFailed("intent is a short, non-empty text", field=f"{where}intent")
    details = item.get("details")
    if details is not None and not isinstance(details, dict):
        raise ValidationFailed("details must be an object", field=f"{where}details")
    dest_key = item.get("idempotency_key")
    if dest_key is not None:
        dest_key = _checked_id(dest_key, f"{where}idempotency_key")
    body: dict[str, Any] = {
        "target_type": t_type,
        "target_id": t_id,
        "target_version": version,
        "intent": intent,
        "details": details,
        "idempotency_key": dest_key,
    }
    return Declared(
        operation_id=op_id,
        target_type=t_type,
        target_id=t_id,
        target_version=version,
        intent=intent,
        details=details,
        idempotency_key=dest_key,
        body_hash=fingerprint(body),
    )


def declared_items(body: DeclareBody) -> tuple[list[Declared], int | None]:
    """``{"operations": [...], "epoch"?}`` or one operation object (with ``epoch``?)."""
    epoch = body.get("epoch")
    if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0):
        raise ValidationFailed("epoch is a non-negative integer", field="epoch")
    if "operations" in body:
        items = body["operations"]
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
            raise ValidationFailed(
                f"operations is a list of 1 to {MAX_BATCH} operations", field="operations"
            )
        fields = [_declared(item, f"operations.{i}.") for i, item in enumerate(items)]
    else:
        fields = [_declared({k: v for k, v in body.items() if k != "epoch"}, "")]
    seen: set[str] = set()
    for f in fields:
        if f.operation_id in seen:
            raise ValidationFailed(
                f"operation_id {f.operation_id!r} appears twice in one request",
                field="operations",
            )
        seen.add(f.operation_id)
    return fields, epoch


def declare(
    core: Core,
    who: Principal,
    run_id: str,
    body: DeclareBody,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Declare one or many intended effects (state ``planned``).

    Idempotent per ``operation_id``: the same id with the same body answers the row as it
    is (200 when nothing new was declared, 201 otherwise); the same id with another body
    is a 409 with the operation as it is. New work on a target and intent that an
    ``uncertain`` (or ``unresolved``) operation may already have changed is a 409."""
    who.require(capabilities.DECLARE)
    items, epoch = declared_items(body)

    def act(tx: Tx) -> tuple[int, DeclaredAnswer]:
        tenant_id = who.tenant_id
        run = scope.require_run(tx.conn, who, run_id, capabilities.DECLARE, for_update=True)
        _fence(run, epoch)
        actor = ownership.actor_of(who, run.worker_id if epoch is not None else None)
        existing = ledger.get_many(tx.conn, tenant_id, run_id, [i.operation_id for i in items])
        new = []
        for item in items:
            found = existing.get(item.operation_id)
            if found is None:
                new.append(item)
            elif found.body_hash != item.body_hash:
                raise Conflict(
                    f"operation_id {item.operation_id!r} was already declared with another "
                    "body; an operation's target, intent, details and key never change — "
                    "declare new work under a new id",
                    field="operation_id",
                    current={"operation": operation_view(found)},
                )
        for item in new:  # first: the most useful thing to say about a retry
            _refuse_if_in_flight(tx, tenant_id, item)
        if new and is_terminal(run.state):
            raise Conflict(
                f"run {run_id!r} is {run.state}; operations are declared before it finishes",
                current={"run": views.run_view(run)},
            )
        position = ledger.next_position(tx.conn, tenant_id, run_id)
        rows = []
        for i, item in enumerate(new):
            row = Operation(
                **asdict(item),
                tenant_id=tenant_id,
                run_id=run_id,
                position=position + i,
                state=OpState.PLANNED.value,
                epoch=epoch,
                evidence=None,
                history=[
                    {"state": "planned", "at": views.iso(tx.now), "epoch": epoch, "actor": actor}
                ],
                created_at=tx.now,
                updated_at=tx.now,
            )
            rows.append(row)
            existing[item.operation_id] = row
        ledger.insert(tx.conn, rows)
        if rows and not run.has_operations:
            runs.update_run(tx.conn, tenant_id, run_id, {"has_operations": True})
            run = replace(run, has_operations=True)
        for row in rows:
            _emit(tx, row, None)
        if rows:
            log.debug("operations.declared", run_id=run_id, count=len(rows))
            if run.state == "working":
                run = stalls.recover_on_progress(core, tx, run, actor)  # a sign of life (inv. 13)
        shown = [operation_view(existing[i.operation_id]) for i in items]
        return (201 if rows else 200), {
            "run_id": run_id,
            "operations": shown,
            "created": [r.operation_id for r in rows],
            **_ledger_state(tx.conn, run),
        }

    return written.act_once(core, key, (who.tenant_id, run_id), lambda: act)


def _refuse_if_in_flight(tx: Tx, tenant_id: str, item: Declared) -> None:
    """New work on a target and intent waits while an earlier operation there (any run of
    the tenant, whichever worker sent it) is sent, uncertain or unresolved and was not
    superseded by its run's completion owner."""
    for other in ledger.landing_on(
        tx.conn, tenant_id, item.target_type, item.target_id, BLOCKS_NEW_WORK
    ):
        if other.intent != item.intent:
            continue
        why = (
            "it is still in flight and may yet land"
            if other.state == OpState.SENT
            else "it may already have landed"
        )
        raise Conflict(
            f"operation {other.operation_id!r} of run {other.run_id!r} "
            f"({other.intent} on {other.target_type} {other.target_id}) is "
            f"{other.state}: {why}; resolve it first (settle it with evidence: look it "
            "up and PATCH it) or have its run's completion owner supersede it with a "
            "reason (POST …/supersede) instead of retrying under a new id",
            field="operation_id",
            operation_id=other.operation_id,
            current={"operation": operation_view(other, include_details=False)},
        )


# --- moving ------------------------------------------------------------------------------


def move(core: Core, who: Principal, run_id: str, operation_id: str, body: MoveBody) -> MovedAnswer:
    """Move one operation to ``body["state"]`` with ``evidence`` (receipt id, lookup
    result, who or what checked). Repeating the move it already made is answered as it
    is (``changed: false``); any other illegal move is a 409 with the operation as it is.
    A move of a completed run's operation whose review is open updates that review."""
    who.require(capabilities.SETTLE)
    state = body.get("state")
    if state not in OP_STATES:
        raise ValidationFailed(f"state must be one of {', '.join(OP_STATES)}", field="state")
    evidence = body.get("evidence")
    if evidence is not None and not isinstance(evidence, dict):
        raise ValidationFailed("evidence must be an object", field="evidence")
    epoch = body.get("epoch")
    if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0):
        raise ValidationFailed("epoch is a non-negative integer", field="epoch")

    def unit(tx: Tx) -> MovedAnswer:  # one unit of the process's writer (flows.written)
        tenant_id = who.tenant_id
        run = scope.require_run(tx.conn, who, run_id, capabilities.SETTLE, for_update=True)
        op = ledger.get(tx.conn, tenant_id, run_id, operation_id)
        if op is None:
            raise NotFound(f"no operation {operation_id!r} in run {run_id!r}")
        _fence(run, epoch)
        if state in FINAL and op.state != state:
            caller = ownership.caller_of(who)
            ownership.require_owner(run, caller, f"settle an operation as {state}")
        if op.state == state:
            if evidence is None or evidence == op.evidence:
                return _moved(tx, run, op, changed=False)
            raise Conflict(
                f"operation {operation_id!r} is already {state} with other evidence; "
                "evidence is not rewritten",
                current={"operation": operation_view(op)},
            )
        refusal = move_refusal(op.state, state)
        if refusal is not None:
            raise Conflict(
                f"operation {operation_id!r}: {refusal}",
                current={"operation": operation_view(op)},
            )
        before = op.state
        actor = ownership.actor_of(who, run.worker_id if epoch is not None else None)
        step: dict[str, Any] = {
            "state": state,
            "from": before,
            "at": views.iso(tx.now),
            "epoch": epoch,
            "actor": actor,
        }
        if evidence is not None:
            step["evidence"] = evidence
        moved = Moved(
            state=state,
            evidence=evidence if evidence is not None else op.evidence,
            history=[*(op.history or []), step],
            updated_at=tx.now,
            epoch=epoch,
        )
        op = ledger.move(tx.conn, op, moved)
        _emit(tx, op, before)
        log.debug("operation.moved", run_id=run_id, from_state=before, to_state=state)
        if run.state == "working":
            run = stalls.recover_on_progress(core, tx, run, actor)  # a sign of life (inv. 13)
        run = completion.review(core, tx, run, actor)
        return _moved(tx, run, op, changed=True)

    return written.write(core, who.tenant_id, run_id, unit)


def _moved(tx: Tx, run: Run, op: Operation, *, changed: bool) -> MovedAnswer:
    return {
        "operation": operation_view(op),
        "changed": changed,
        "run": views.run_view(run),
        **_ledger_state(tx.conn, run),
    }


def mark_not_started(
    tx: Tx,
    run: Run,
    only: set[str] | None = None,
    because: dict[str, str] | None = None,
    actor: dict[str, str] | None = None,
) -> int:
    """Every ``planned`` operation of the run → ``not_started`` (cancellation: work that
    never began is said so, not left looking pending); ``only`` those ids, with
    ``because`` as their evidence and on their history step (an approved amendment that
    excludes them). Inside the caller's transaction; one ``operation.updated`` event each;
    ``actor``: who asked for it (the trace). Returns how many were marked."""
    tenant_id, run_id = run.tenant_id, run.run_id
    marked = 0
    if not run.has_operations:
        return marked
    for op in ledger.for_run(tx.conn, tenant_id, run_id):
        if op.state != OpState.PLANNED or (only is not None and op.operation_id not in only):
            continue
        step: dict[str, Any] = {
            "state": "not_started",
            "from": "planned",
            "at": views.iso(tx.now),
            "epoch": None,
            "actor": actor,
        }
        if because is not None:
            step["because"] = because
        moved = Moved(
            state=OpState.NOT_STARTED.value,
            evidence=because if because is not None else op.evidence,
            history=[*(op.history or []), step],
            updated_at=tx.now,
        )
        _emit(tx, ledger.move(tx.conn, op, moved), "planned")
        marked += 1
    return marked
