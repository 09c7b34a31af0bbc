"""Reconciliation: advisory signals are confirmed by the run's state reader first.

Invariants kept here (DESIGN §2):

- 3: no success alert before authoritative state agrees — an advisory claim the reader
  does not confirm is recorded as a mismatch (one open mismatch per claim), re-checked on
  a bounded backoff, and escalated as a ``mismatch`` notification when it never converges;
  a claim that no longer applies, or a reader that moved elsewhere, closes it.
- Outbound I/O (the reader) happens before the transaction opens, never while a run is
  locked; a reader failure is recorded by its class only (its URL may carry a token).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypedDict

import structlog

from runbell.domain.errors import NotFound, RunbellError
from runbell.domain.records import Run
from runbell.domain.runs import judge
from runbell.domain.signals import Signal
from runbell.flows import transitions
from runbell.flows.attention import raise_attention
from runbell.flows.context import Core
from runbell.flows.policy import policy_for
from runbell.ids import new_id
from runbell.ingress.readers import Observed, StateReader
from runbell.store import accounts, mismatches, runs
from runbell.store.accounts import Source
from runbell.store.db import PendingEvent, Tx
from runbell.store.mismatches import Mismatch

log = structlog.get_logger(__name__)

#: Who moved a run the state reader's read decided (the trace's actor).
READER = {"kind": "state_reader"}


def reader_for(core: Core, source: Source) -> StateReader | None:
    """The state reader of an advisory source (a test's override wins), or None."""
    if source.id in core.reader_overrides:
        return core.reader_overrides[source.id]
    if not source.reader:
        return None
    return core.reader_factory(source)


def observe(core: Core, source: Source, run_id: str) -> tuple[Observed | None, str | None]:
    """Ask the source's state reader about ``run_id``: (what it says, or why it could not)."""
    try:
        reader = reader_for(core, source)
        if reader is None:
            return None, "advisory source has no state reader"
        return reader.read(run_id), None
    except RunbellError as exc:  # ReaderError, or a stored config that no longer builds
        log.warning(
            # The class only: a reader URL's path may carry a tenant's token. The
            # detail is kept on the mismatch row, visible to the tenant alone.
            "reconcile.reader_failed",
            run_id=run_id,
            source_id=source.id,
            error=type(exc).__name__,
        )
        return None, exc.detail


class ObservedView(TypedDict):
    """What a state reader saw of the run: its state, and its sequence when it has one."""

    state: str
    sequence: int | None


def _observed(observed: Observed | None) -> ObservedView | None:
    return None if observed is None else {"state": observed.state, "sequence": observed.sequence}


def record_mismatch(
    core: Core,
    tx: Tx,
    tenant_id: str,
    source: Source,
    run: Run,
    signal: Signal,
    observed: Observed | None,
    reader_error: str | None,
) -> None:
    """Record an unconfirmed claim for re-checking (once per run and claimed state)."""
    if mismatches.open_for_claim(tx.conn, tenant_id, run.run_id, signal.state) is not None:
        return  # already being reconciled; one open mismatch per claim
    mismatch_id = new_id("mis")
    mismatches.insert(
        tx.conn,
        {
            "id": mismatch_id,
            "tenant_id": tenant_id,
            "run_id": run.run_id,
            "source_id": source.id,
            "event_id": signal.event_id,
            "claimed": {
                "state": signal.state,
                "sequence": signal.sequence,
                "reason": signal.reason,
                "error": signal.error,
                "effects_verified": signal.effects_verified,
            },
            "observed": _observed(observed),
            "status": "open",
            "checks": 0,
            "last_error": reader_error,
            "next_check_at": tx.now + timedelta(seconds=core.settings.mismatch_backoff_s[0]),
            "created_at": tx.now,
        },
    )
    tx.emit(
        tenant_id,
        PendingEvent(
            "run.mismatch",
            {
                "run_id": run.run_id,
                "mismatch_id": mismatch_id,
                "claimed": signal.state,
                "observed": None if observed is None else observed.state,
                "version": run.version,
            },
            run_id=run.run_id,
        ),
    )
    log.info(
        "reconcile.mismatch",
        run_id=run.run_id,
        claimed=signal.state,
        observed=None if observed is None else observed.state,
    )


def recheck_mismatches(core: Core, now: datetime, limit: int = 100) -> int:
    """Scheduler sweep: re-read due mismatches; apply what converged, escalate what never
    does. Each is re-checked in its own transaction, the reader asked before it opens."""
    with core.db.read() as conn:
        due = mismatches.due(conn, now, limit)
    for mismatch in due:
        with core.db.read() as conn:
            try:
                source = accounts.get_source(conn, mismatch.tenant_id, mismatch.source_id)
            except NotFound:
                continue
        observed, error = observe(core, source, mismatch.run_id)
        with core.db.transaction(now=now) as tx:
            _recheck_in_tx(core, tx, mismatch, observed, error)
    return len(due)


def _recheck_in_tx(
    core: Core, tx: Tx, mismatch: Mismatch, observed: Observed | None, error: str | None
) -> None:
    tenant_id = mismatch.tenant_id
    if mismatches.status_of(tx.conn, mismatch.id) != "open":
        return  # another scheduler got here first
    run = runs.require_run(tx.conn, tenant_id, mismatch.run_id, for_update=True)
    claimed = mismatch.claimed

    def close(status: str, note: str) -> None:
        mismatches.update(
            tx.conn,
            mismatch.id,
            status=status,
            resolved_at=tx.now,
            last_error=note[:500],
            next_check_at=None,
            observed=_observed(observed),
        )
        tx.emit(
            tenant_id,
            PendingEvent(
                "run.mismatch_closed",
                {
                    "run_id": run.run_id,
                    "mismatch_id": mismatch.id,
                    "status": status,
                    "reason": note,
                },
                run_id=run.run_id,
            ),
        )

    claim = judge(run.state, run.sequence, claimed["state"], None)
    if not claim.applies:
        close("superseded", f"claim no longer applies: {claim.reason}")
        return
    if observed is not None and observed.state == claimed["state"]:
        run, _ = transitions.apply(
            core,
            tx,
            run,
            transitions.TransitionRequest(
                state=claimed["state"],
                sequence=observed.sequence,
                source_id=mismatch.source_id,
                event_id=mismatch.event_id,
                reason=claimed.get("reason"),
                error=claimed.get("error"),
                # The reader's "fell short" wins over the claim: a review, never a success.
                effects_verified=False
                if observed.effects_verified is False
                else claimed.get("effects_verified"),
                actor=READER,
            ),
        )
        close("resolved", "state reader agrees")
        return
    if observed is not None and observed.state != run.state:
        moved = judge(run.state, run.sequence, observed.state, observed.sequence)
        if moved.applies:
            # The authoritative state went somewhere else: follow it, drop the claim.
            transitions.apply(
                core,
                tx,
                run,
                transitions.TransitionRequest(
                    state=observed.state,
                    sequence=observed.sequence,
                    source_id=mismatch.source_id,
                    event_id=None,
                    reason="reconciled from the state reader",
                    error=None,
                    effects_verified=observed.effects_verified,
                    actor=READER,
                ),
            )
            close("superseded", f"state reader says {observed.state}")
            return
    checks = mismatch.checks + 1
    backoff = core.settings.mismatch_backoff_s
    values: dict[str, Any] = {
        "checks": checks,
        "last_error": (error or "")[:500] or None,
        "observed": _observed(observed),
    }
    if checks >= core.settings.mismatch_max_checks:
        values.update(status="escalated", next_check_at=None)
        mismatches.update(tx.conn, mismatch.id, **values)
        raise_attention(
            tx,
            policy_for(core, tx.conn, tenant_id),
            run,
            attention="mismatch",
            version=run.version,
            facts={},
            reason=(
                f"runtime reported {claimed['state']}, state reader says "
                f"{observed.state if observed else 'nothing'} after {checks} checks"
            ),
            owner_present=False,
        )
        log.warning("reconcile.escalated", run_id=run.run_id, checks=checks)
        return
    values["next_check_at"] = tx.now + timedelta(seconds=backoff[min(checks, len(backoff) - 1)])
    mismatches.update(tx.conn, mismatch.id, **values)
