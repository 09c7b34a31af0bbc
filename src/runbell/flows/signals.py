"""Signals: a runtime or provider reports a run's state; it is deduped, judged and applied.

:func:`accept_signal` is one unit of work: dedupe on (source, event id), confirm an
advisory claim through the state reader (before the transaction opens), judge it against
the run, apply it, and answer ``applied | duplicate | stale | mismatch | rejected``.

Invariants kept here (DESIGN §2):

- 1 and 12: a retried signal (same source and event id) is a ``duplicate`` answered with
  the original result — never a second transition or notification; a concurrent retry
  that loses the insert race answers the same way.
- 2: a late or out-of-order signal is recorded as ``stale`` and changes nothing.
- 3: an advisory claim is applied only when the state reader agrees (else a mismatch).
- 11: the signal's ``reason`` and report texts are public: cut to one short safe line here
  before anything stores them; ``error`` stays private to the run's readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import structlog
from sqlalchemy.exc import IntegrityError

from runbell import metrics
from runbell.domain.errors import Conflict, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.runs import RunState, judge
from runbell.domain.signals import Signal
from runbell.domain.text import REASON_MAX, public_text
from runbell.flows import reconcile, transitions, views
from runbell.flows.context import Runbell
from runbell.ingress.readers import Observed
from runbell.store import accounts, runs
from runbell.store import notifications as notes
from runbell.store.db import Tx

__all__ = ["Signal", "SignalResult", "accept_signal", "api_source", "public_report"]

log = structlog.get_logger(__name__)

# The API's own limits for the other public free text (characters).
SUMMARY_MAX = 500
TRACE_ID_MAX = 200
LINK_LABEL_MAX = 200


@dataclass
class SignalResult:
    outcome: str  # applied | duplicate | stale | mismatch | rejected
    reason: str | None
    run: dict[str, Any]
    notifications: list[dict[str, Any]] = field(default_factory=list)
    original_outcome: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {
            "outcome": self.outcome,
            "reason": self.reason,
            "run": self.run,
            "notifications": self.notifications,
        }
        if self.original_outcome is not None:
            out["original_outcome"] = self.original_outcome
        return out


def public_report(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """A signal's ``report`` with its free text made safe: it is public like ``reason``."""
    if not report:
        return report
    out = dict(report)
    for name, limit in (("summary", SUMMARY_MAX), ("trace_id", TRACE_ID_MAX)):
        if isinstance(out.get(name), str):
            out[name] = public_text(out[name], limit)
    if isinstance(out.get("links"), list):
        out["links"] = [
            {**link, "label": public_text(link.get("label"), LINK_LABEL_MAX) or "link"}
            if isinstance(link, dict)
            else link
            for link in out["links"]
        ]
    return out


def api_source(rb: Runbell, who: Principal) -> dict[str, Any]:
    """The source a runtime key's signals come from: the key's own, else the tenant's
    authoritative API source."""
    with rb.db.read() as conn:
        source_id = who.source_id or accounts.api_source_id(conn, who.tenant_id)
        return accounts.get_source(conn, who.tenant_id, source_id)


def accept_signal(
    rb: Runbell, tenant_id: str, source: dict[str, Any], run_id: str, signal: Signal
) -> SignalResult:
    """Dedupe, reconcile, judge, apply, decide and enqueue — one transaction."""
    if signal.state not in RunState.__members__.values():
        raise ValidationFailed(f"unknown state {signal.state!r}", field="state")
    # Public from here on (notifications, feed, webhooks): one short safe line.
    signal = replace(
        signal,
        reason=public_text(signal.reason, REASON_MAX),
        report=public_report(signal.report),
    )
    with rb.db.read() as conn:
        seen = runs.find_inbound(conn, tenant_id, source["id"], signal.event_id)
    if seen is not None:
        return _duplicate(rb, tenant_id, seen, run_id)

    observed: Observed | None = None
    reader_error: str | None = None
    if source["trust"] == "advisory":
        observed, reader_error = reconcile.observe(rb, source, run_id)
    try:
        with rb.db.transaction() as tx:
            return _accept_in_tx(rb, tx, tenant_id, source, run_id, signal, observed, reader_error)
    except IntegrityError:
        # A concurrent delivery of the same event won the insert: answer as duplicate.
        with rb.db.read() as conn:
            seen = runs.find_inbound(conn, tenant_id, source["id"], signal.event_id)
        if seen is None:
            raise
        return _duplicate(rb, tenant_id, seen, run_id)


def _duplicate(rb: Runbell, tenant_id: str, seen: dict[str, Any], run_id: str) -> SignalResult:
    metrics.DUPLICATES.labels("signal").inc()
    if seen["run_id"] != run_id:
        # Not a retry: the runtime reused an event id. Dropping it as a duplicate would
        # lose this run's signal silently.
        raise Conflict(
            f"event_id {seen['event_id']!r} was already used by another run of this "
            "source; event ids must be unique per source",
            field="event_id",
        )
    with rb.db.read() as conn:
        run = runs.get_run(conn, tenant_id, seen["run_id"])
        found = notes.get_many(conn, tenant_id, list(seen.get("notification_ids") or []))
    return SignalResult(
        outcome="duplicate",
        reason=seen.get("reason"),
        run=views.run_view(run) if run else {"run_id": seen["run_id"]},
        notifications=[views.notification_view(n) for n in found],
        original_outcome=seen["outcome"],
    )


def _accept_in_tx(
    rb: Runbell,
    tx: Tx,
    tenant_id: str,
    source: dict[str, Any],
    run_id: str,
    signal: Signal,
    observed: Observed | None,
    reader_error: str | None,
) -> SignalResult:
    runs.insert_inbound(
        tx.conn,
        {
            "tenant_id": tenant_id,
            "source_id": source["id"],
            "event_id": signal.event_id,
            "run_id": run_id,
            "claimed_state": signal.state,
            "sequence": signal.sequence,
            "outcome": "pending",
            "received_at": tx.now,
        },
    )
    run = runs.require_run(tx.conn, tenant_id, run_id, for_update=True)

    def finish(outcome: str, reason: str | None, ids: list[str]) -> None:
        runs.finish_inbound(
            tx.conn,
            tenant_id,
            source["id"],
            signal.event_id,
            outcome=outcome,
            reason=reason,
            run_version=run["version"],
            notification_ids=ids,
        )

    sequence = signal.sequence
    if source["trust"] == "advisory":
        claim = judge(run["state"], run["sequence"], signal.state, sequence)
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
                rb, tx, tenant_id, source, run, signal, observed, reader_error
            )
            finish("mismatch", reason, [])
            return SignalResult("mismatch", reason, views.run_view(run))
        if observed.sequence is not None:
            sequence = observed.sequence

    verdict = judge(run["state"], run["sequence"], signal.state, sequence)
    if not verdict.applies:
        finish(verdict.verdict, verdict.reason, [])
        log.info(
            "signal.not_applied", run_id=run_id, outcome=verdict.verdict, reason=verdict.reason
        )
        return SignalResult(verdict.verdict, verdict.reason, views.run_view(run))

    run, ids = transitions.apply(
        rb,
        tx,
        run,
        signal.state,
        sequence=sequence,
        source_id=source["id"],
        event_id=signal.event_id,
        reason=signal.reason,
        error=signal.error,
        effects_verified=signal.effects_verified,
        reported_at=signal.at,
        report=signal.report,
    )
    finish("applied", verdict.reason, ids)
    return SignalResult(
        "applied",
        verdict.reason,
        views.run_view(run),
        [views.notification_view(n) for n in notes.get_many(tx.conn, tenant_id, ids)],
    )
