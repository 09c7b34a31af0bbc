"""Signals: a runtime or provider reports a run's state; it is deduped, judged and applied.

:func:`accept_signal` is one unit of work: dedupe on (source, event id), confirm an
advisory claim through the state reader (before the transaction opens), judge it against
the run, apply it, and answer ``applied | duplicate | stale | mismatch | rejected``.

Invariants kept here (DESIGN §2):

- 1 and 12: a retried signal (same source and event id) is a ``duplicate`` answered with
  the original result — never a second transition or notification; a concurrent retry
  that loses the insert race answers the same way.
- 2: a late or out-of-order signal is recorded as ``stale`` and changes nothing.
  So is ``input_required`` on a run that asks through input requests while none is
  open (:func:`runbell.domain.runs.judge_reported_wait`): news of a wait already settled.
- 3: an advisory claim is applied only when the state reader agrees (else a mismatch).
- The owner rule (issue 18): ``completed`` reported through the API by anyone but the
  run's completion owner (or an admin) is a 403 naming the rule; a provider's verified
  webhook is the runtime's own state and is not held to it. Every applied signal's
  transition records who sent it (``actor``).
- 11: the signal's ``reason`` and report texts are public: cut to one short safe line here
  before anything stores them; ``error`` stays private to the run's readers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NotRequired, TypedDict

import structlog
from anyio.to_thread import run_sync as to_thread
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from runbell import metrics
from runbell.domain import capabilities
from runbell.domain.errors import Conflict, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import InboundEvent, Notification, RunReport
from runbell.domain.runs import RunState, judge, judge_reported_wait
from runbell.domain.signals import Signal
from runbell.domain.text import REASON_MAX, public_text
from runbell.flows import ownership, reconcile, scope, transitions, views
from runbell.flows.context import Core
from runbell.ingress.readers import Observed
from runbell.store import accounts, runs
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store.accounts import Source
from runbell.store.db import Tx

__all__ = [
    "Signal",
    "SignalResult",
    "accept_signal",
    "accept_signal_async",
    "api_source",
    "public_report",
]

log = structlog.get_logger(__name__)

# The API's own limits for the other public free text (characters).
SUMMARY_MAX = 500
TRACE_ID_MAX = 200
LINK_LABEL_MAX = 200
#: Seconds a process remembers a key's source (see :func:`api_source`).
SOURCE_TTL_S = 5.0


class SignalAnswer(TypedDict):
    """The body of ``POST /v1/runs/{id}/signals``."""

    outcome: str
    reason: str | None
    run: views.RunView | views.RunRef
    notifications: list[views.NotificationView]
    original_outcome: NotRequired[str]


@dataclass
class SignalResult:
    outcome: str  # applied | duplicate | stale | mismatch | rejected
    reason: str | None
    run: views.RunView | views.RunRef
    notifications: list[views.NotificationView] = field(default_factory=list)
    original_outcome: str | None = None

    def as_dict(self) -> SignalAnswer:
        out: SignalAnswer = {
            "outcome": self.outcome,
            "reason": self.reason,
            "run": self.run,
            "notifications": self.notifications,
        }
        if self.original_outcome is not None:
            out["original_outcome"] = self.original_outcome
        return out


def public_report(report: RunReport | None) -> RunReport | None:
    """A signal's ``report`` with its free text made safe: it is public like ``reason``."""
    if not report:
        return report
    out = RunReport(**report)
    summary, trace_id = out.get("summary"), out.get("trace_id")
    if isinstance(summary, str):
        out["summary"] = public_text(summary, SUMMARY_MAX)
    if isinstance(trace_id, str):
        out["trace_id"] = public_text(trace_id, TRACE_ID_MAX)
    links = out.get("links")
    if isinstance(links, list):
        out["links"] = [
            {**link, "label": public_text(link.get("label"), LINK_LABEL_MAX) or "link"}
            for link in links
            if isinstance(link, dict)
        ]
    return out


def api_source(core: Core, who: Principal) -> Source:
    """The source a runtime key's signals come from: the key's own, else the tenant's
    authoritative API source.

    Remembered per process for :data:`SOURCE_TTL_S` seconds: a signal would otherwise read
    two rows that almost never change. A source's trust and reader only decide how *new*
    signals are checked, so a change reaches every process within that time."""
    source = remembered_source(core, who)
    if source is not None:
        return source
    key = ("source", who.tenant_id, who.source_id)
    now = time.monotonic()
    with core.db.read() as conn:
        source_id = who.source_id or accounts.api_source_id(conn, who.tenant_id)
        source = accounts.get_source(conn, who.tenant_id, source_id)
    core.memo[key] = (now, source)
    return source


def remembered_source(core: Core, who: Principal) -> Source | None:
    """:func:`api_source` if this process remembers it (no database read), else None."""
    found = core.memo.get(("source", who.tenant_id, who.source_id))
    if found is not None and time.monotonic() - found[0] < SOURCE_TTL_S:
        source: Source = found[1]
        return source
    return None


def checked(signal: Signal) -> Signal:
    """The signal validated, its public text made safe (before anything stores it)."""
    if signal.state not in RunState.__members__.values():
        raise ValidationFailed(f"unknown state {signal.state!r}", field="state")
    # Public from here on (notifications, feed, webhooks): one short safe line.
    return replace(
        signal,
        reason=public_text(signal.reason, REASON_MAX),
        report=public_report(signal.report),
    )


def accept_signal(
    core: Core,
    tenant_id: str,
    source: Source,
    run_id: str,
    signal: Signal,
    *,
    who: Principal | None = None,
) -> SignalResult:
    """Dedupe, reconcile, judge, apply, decide and enqueue — one unit of work, committed
    by the process's writer together with whatever other signals are waiting
    (:mod:`runbell.runtime.writer`); answered once that commit is durable.

    ``who``: the runtime credential that sent it (None: a verified provider webhook); a
    scoped one needs ``runs.report`` (403) and the run in its scope (404)."""
    if who is not None:
        who.require(capabilities.REPORT)
    signal = checked(signal)
    unit = _prepare(core, tenant_id, source, run_id, signal, who)
    if isinstance(unit, SignalResult):
        return unit
    try:
        return core.writer.run(
            unit, key=(tenant_id, run_id), inbound=(tenant_id, source.id, signal.event_id)
        )
    except IntegrityError:
        return _lost_race(core, tenant_id, source, run_id, signal)


async def accept_signal_async(
    core: Core,
    tenant_id: str,
    source: Source,
    run_id: str,
    signal: Signal,
    *,
    who: Principal | None = None,
) -> SignalResult:
    """:func:`accept_signal` for an event loop: the request awaits the writer instead of
    holding a thread. (An advisory source's state reader still runs in a thread.)"""
    if who is not None:
        who.require(capabilities.REPORT)
    signal = checked(signal)
    if source.trust == "advisory":
        return await to_thread(
            partial(accept_signal, core, tenant_id, source, run_id, signal, who=who)
        )
    unit = _prepare(core, tenant_id, source, run_id, signal, who)
    assert not isinstance(unit, SignalResult)
    try:
        return await core.writer.run_async(
            unit, key=(tenant_id, run_id), inbound=(tenant_id, source.id, signal.event_id)
        )
    except IntegrityError:
        return await to_thread(partial(_lost_race, core, tenant_id, source, run_id, signal))


def _prepare(
    core: Core,
    tenant_id: str,
    source: Source,
    run_id: str,
    signal: Signal,
    who: Principal | None = None,
) -> SignalResult | Callable[[Tx], SignalResult]:
    """The unit of work for ``signal`` — or, for an advisory source, possibly its answer
    already (a retry, answered without asking the state reader again)."""
    observed: Observed | None = None
    reader_error: str | None = None
    if who is not None and who.limits_runs:  # scope before anything tells of the run
        with core.db.read() as conn:
            scope.check_run(who, runs.get_run(conn, tenant_id, run_id), run_id)
    if source.trust == "advisory":
        with core.db.read() as conn:
            seen = runs.find_inbound(conn, tenant_id, source.id, signal.event_id)
            if seen is not None:
                return _duplicate(conn, tenant_id, seen, run_id, {})
        observed, reader_error = reconcile.observe(core, source, run_id)

    def unit(tx: Tx) -> SignalResult:
        return _accept_in_tx(core, tx, tenant_id, source, run_id, signal, observed, reader_error)

    return unit


def _lost_race(
    core: Core, tenant_id: str, source: Source, run_id: str, signal: Signal
) -> SignalResult:
    """A concurrent delivery of the same event (another process) won the dedupe insert:
    answer as the duplicate it is."""
    with core.db.read() as conn:
        seen = runs.find_inbound(conn, tenant_id, source.id, signal.event_id)
        if seen is None:
            raise RuntimeError("dedupe insert failed but no inbound event is stored")
        return _duplicate(conn, tenant_id, seen, run_id, {})


def _duplicate(
    conn: Connection,
    tenant_id: str,
    seen: InboundEvent,
    run_id: str,
    written: dict[str, Notification],
) -> SignalResult:
    metrics.bound(metrics.DUPLICATES, "signal").inc()
    if seen.run_id != run_id:
        # Not a retry: the runtime reused an event id. Dropping it as a duplicate would
        # lose this run's signal silently.
        raise Conflict(
            f"event_id {seen.event_id!r} was already used by another run of this "
            "source; event ids must be unique per source",
            field="event_id",
        )
    run = runs.get_run(conn, tenant_id, seen.run_id)
    ids = list(seen.notification_ids or [])
    found = [written[i] for i in sorted(ids) if i in written]
    if len(found) < len(ids):
        found = notes.get_many(conn, tenant_id, ids)
    return SignalResult(
        outcome="duplicate",
        reason=seen.reason,
        run=views.run_view(run) if run else {"run_id": seen.run_id},
        notifications=[views.notification_view(n) for n in found],
        original_outcome=seen.outcome,
    )


def _accept_in_tx(
    core: Core,
    tx: Tx,
    tenant_id: str,
    source: Source,
    run_id: str,
    signal: Signal,
    observed: Observed | None,
    reader_error: str | None,
) -> SignalResult:
    seen = runs.pending_inbound(tx, tenant_id, source.id, signal.event_id) or runs.find_inbound(
        tx.conn, tenant_id, source.id, signal.event_id
    )
    if seen is not None:  # a retry (perhaps of a signal earlier in this very batch)
        return _duplicate(tx.conn, tenant_id, seen, run_id, tx.written)
    run = runs.require_run(tx.conn, tenant_id, run_id, for_update=True)
    if signal.actor is None:  # a provider's verified webhook: the source is the actor
        actor = {"kind": "source", "source_id": source.id}
    else:
        actor = signal.actor
        if signal.state == RunState.COMPLETED and run.owner_credential_id is not None:
            # The owner rule, on the row already read: no query of its own.
            ownership.require_owner(run, ownership.caller_in(actor), "report the run completed")

    def finish(outcome: str, reason: str | None, ids: list[str]) -> None:
        # Written with its outcome at the end of the transaction: the primary key is the
        # dedupe, so a concurrent retry of this event (another process) fails the commit
        # and, tried again alone, answers as a duplicate.
        runs.defer_inbound(
            tx,
            InboundEvent(
                tenant_id=tenant_id,
                source_id=source.id,
                event_id=signal.event_id,
                run_id=run_id,
                claimed_state=signal.state,
                sequence=signal.sequence,
                outcome=outcome,
                reason=reason,
                run_version=run.version,
                notification_ids=list(ids),
                received_at=tx.now,
            ),
        )

    sequence = signal.sequence
    if source.trust == "advisory":
        claim = judge(run.state, run.sequence, signal.state, sequence)
        if not claim.applies:
            finish(claim.verdict, claim.reason, [])
            return SignalResult(claim.verdict, claim.reason, views.run_view(run))
        if observed is None or observed.state != signal.state:
            reason = (
                f"state reader says {observed.state}"
                if observed
                else f"state reader unavailable: {reader_error}"
            )
            reconcile.record_mismatch(
                core, tx, tenant_id, source, run, signal, observed, reader_error
            )
            finish("mismatch", reason, [])
            return SignalResult("mismatch", reason, views.run_view(run))
        if observed.sequence is not None:
            sequence = observed.sequence
        if observed.effects_verified is False:
            # The runtime itself says the work fell short (e.g. an incomplete response):
            # confirmed, but a review, never a success alert.
            signal = replace(signal, effects_verified=False)

    verdict = judge(run.state, run.sequence, signal.state, sequence)
    if verdict.applies and signal.state == RunState.INPUT_REQUIRED:
        # Back to a wait only through an open request once the run has asked one.
        has_asked, request_open = requests.asked(tx.conn, tenant_id, run_id)
        verdict = judge_reported_wait(has_asked, request_open) or verdict
    if not verdict.applies:
        finish(verdict.verdict, verdict.reason, [])
        log.debug(
            "signal.not_applied", run_id=run_id, outcome=verdict.verdict, reason=verdict.reason
        )
        return SignalResult(verdict.verdict, verdict.reason, views.run_view(run))

    run, ids = transitions.apply(
        core,
        tx,
        run,
        transitions.TransitionRequest(
            state=signal.state,
            sequence=sequence,
            source_id=source.id,
            event_id=signal.event_id,
            reason=signal.reason,
            error=signal.error,
            effects_verified=signal.effects_verified,
            reported_at=signal.at,
            report=signal.report,
            actor=actor,
        ),
    )
    finish("applied", verdict.reason, ids)
    return SignalResult(
        "applied",
        verdict.reason,
        views.run_view(run),
        [views.notification_view(n) for n in _written(tx, tenant_id, ids)],
    )


def _written(tx: Tx, tenant_id: str, ids: list[str]) -> list[Notification]:
    """The notifications ``ids`` as this transaction wrote them (read only if it did not)."""
    if all(i in tx.written for i in ids):
        return [tx.written[i] for i in sorted(ids)]
    return notes.get_many(tx.conn, tenant_id, ids)
