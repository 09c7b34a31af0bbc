"""The boundary: one accepted signal, one run update, one acknowledgement per transaction.

:class:`Runbell` is what the API, the CLI and the scheduler call. Each public method is
one unit of work: it opens the transaction, calls the repositories and the pure domain,
and returns plain dicts. Outbound I/O (state readers) happens *before* the transaction
opens, never while a run is locked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.exc import IntegrityError

from runbell import actions, metrics, views
from runbell.attention import (
    RequestLink,
    close_notification,
    raise_attention,
    supersede_actionable,
)
from runbell.config import Settings
from runbell.crypto import SecretBox
from runbell.dispatch.fanout import make_hook
from runbell.domain.errors import Conflict, NotFound, RunbellError, ValidationFailed
from runbell.domain.policy import Policy
from runbell.domain.runs import RunState, attention_for, is_terminal, judge
from runbell.domain.text import REASON_MAX, public_text
from runbell.ingress.readers import Observed, StateReader, reader_from_config
from runbell.presence import Presence
from runbell.store import accounts, feed, idempotency, runs
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store import tables as t
from runbell.store.accounts import Principal
from runbell.store.db import Database, PendingEvent, Tx

log = structlog.get_logger(__name__)

# The API's own limits for the other public free text (characters).
SUMMARY_MAX = 500
TRACE_ID_MAX = 200
LINK_LABEL_MAX = 200
PROGRESS_MAX = 500

RUN_FIELDS = (
    "title",
    "kind",
    "subject",
    "objective",
    "authority",
    "notify_on_complete",
    "metadata",
    "details",
)


@dataclass(frozen=True)
class Signal:
    """A reported run state, from the API, an SDK or a mapped provider webhook."""

    event_id: str
    state: str
    sequence: int | None = None
    at: datetime | None = None
    reason: str | None = None
    error: dict[str, Any] | None = None
    effects_verified: bool | None = None
    report: dict[str, Any] | None = None


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


def error_facts(error: Mapping[str, Any] | None) -> dict[str, bool]:
    error = error or {}
    return {
        "error_retryable": bool(error.get("retryable")),
        "error_user_action": bool(error.get("user_action_required")),
        "data_inconsistent": bool(error.get("data_inconsistent")),
    }


class Runbell:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        box: SecretBox,
        presence: Presence | None = None,
        reader_factory: Callable[[dict[str, Any]], StateReader] | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.box = box
        self.presence = presence or Presence()
        self._reader_factory = reader_factory or self._default_reader
        # Tests and embedders may pin a reader per source id (e.g. a StaticReader).
        self.reader_overrides: dict[str, StateReader] = {}
        self._policies: dict[tuple[str, str], Policy] = {}
        # Tenant-webhook messages are written in the same transaction as their events.
        db.before_flush.append(make_hook(lambda: self.settings.public_url.rstrip("/")))

    # --- configuration -------------------------------------------------------------

    def policy_for(self, tx_or_conn: Any, tenant_id: str) -> Policy:
        conn = tx_or_conn.conn if isinstance(tx_or_conn, Tx) else tx_or_conn
        doc = conn.execute(
            sa.select(t.tenants.c.policy).where(t.tenants.c.id == tenant_id)
        ).scalar()
        if not doc:
            return Policy.default()
        key = (tenant_id, hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest())
        policy = self._policies.get(key)
        if policy is None:
            policy = Policy.from_mapping(doc, base=Policy.default())
            self._policies[key] = policy
        return policy

    def set_policy(self, tenant_id: str, doc: dict[str, Any]) -> Policy:
        policy = Policy.from_mapping(doc, base=Policy.default())  # validates before storing
        with self.db.transaction() as tx:
            accounts.get_tenant(tx.conn, tenant_id)
            tx.conn.execute(
                sa.update(t.tenants).where(t.tenants.c.id == tenant_id).values(policy=doc)
            )
        return policy

    def _default_reader(self, config: dict[str, Any]) -> StateReader:
        from runbell.outbound import safe_client

        opened = dict(config)
        opened["headers"] = {k: self.box.open(v) for k, v in (config.get("headers") or {}).items()}
        client = safe_client(
            allow_hosts=self.settings.outbound_allow_hosts,
            timeout=float(config.get("timeout", 5.0)),
        )
        return reader_from_config(opened, client)

    def reader_for(self, source: dict[str, Any]) -> StateReader | None:
        if source["id"] in self.reader_overrides:
            return self.reader_overrides[source["id"]]
        if not source.get("reader"):
            return None
        return self._reader_factory(source["reader"])

    # --- runs ----------------------------------------------------------------------

    def put_run(
        self, who: Principal, run_id: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Create a run, or update its descriptive fields. State changes go through signals.

        Two creating PUTs may race (``FOR UPDATE`` locks nothing that does not exist yet):
        the loser's insert hits the primary key, and it is retried once as an update.
        """
        try:
            return self._put_run(who, run_id, body)
        except IntegrityError:
            return self._put_run(who, run_id, body)

    def _put_run(
        self, who: Principal, run_id: str, body: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        with self.db.transaction() as tx:
            run = runs.get_run(tx.conn, who.tenant_id, run_id, for_update=True)
            owner_id = (
                self._member(tx, who.tenant_id, body["owner"], "owner")
                if body.get("owner")
                else None
            )
            access = {
                self._member(tx, who.tenant_id, ref, "authority.users")
                for ref in (body.get("authority") or {}).get("users") or []
            }
            if run is None:
                if owner_id is None:
                    raise ValidationFailed("owner is required when a run is created", field="owner")
                created = self._create_run(tx, who, run_id, owner_id, body, access)
                return created, True
            updated = self._update_run(tx, who, run, owner_id, body, access)
            return updated, False

    def _member(self, tx: Tx, tenant_id: str, ref: str, field: str) -> str:
        try:
            return accounts.find_user(tx.conn, tenant_id, ref)
        except NotFound as exc:
            raise ValidationFailed(
                f"{field}: {ref!r} is not a member of this tenant", field=field
            ) from exc

    def _create_run(
        self,
        tx: Tx,
        who: Principal,
        run_id: str,
        owner_id: str,
        body: dict[str, Any],
        access: set[str],
    ) -> dict[str, Any]:
        state = body.get("state") or "queued"
        if state not in ("queued", "working"):
            raise ValidationFailed("a new run starts queued or working", field="state")
        values = {k: body.get(k) for k in RUN_FIELDS}
        values["notify_on_complete"] = bool(values["notify_on_complete"])
        values.update(
            tenant_id=who.tenant_id,
            run_id=run_id,
            owner_user_id=owner_id,
            state=state,
            version=1,
            sequence=body.get("sequence"),
            created_at=tx.now,
            updated_at=tx.now,
            started_at=tx.now if state == "working" else None,
        )
        runs.insert_run(tx.conn, values)
        runs.add_transition(
            tx.conn,
            {
                "tenant_id": who.tenant_id,
                "run_id": run_id,
                "version": 1,
                "kind": "create",
                "from_state": None,
                "to_state": state,
                "source_id": who.source_id,
                "sequence": body.get("sequence"),
                "reason": "created",
                "at": tx.now,
            },
        )
        runs.set_access(tx.conn, who.tenant_id, run_id, access | {owner_id})
        tx.emit(who.tenant_id, PendingEvent("run.created", views.run_event(values), run_id=run_id))
        log.info("run.created", run_id=run_id, state=state)
        return values

    def _update_run(
        self,
        tx: Tx,
        who: Principal,
        run: dict[str, Any],
        owner_id: str | None,
        body: dict[str, Any],
        access: set[str],
    ) -> dict[str, Any]:
        if body.get("state") and body["state"] != run["state"]:
            raise ValidationFailed(
                f"the run is {run['state']}; change state with POST "
                f"/v1/runs/{run['run_id']}/signals, not PUT",
                field="state",
            )
        changes = {k: body[k] for k in RUN_FIELDS if k in body and body[k] != run.get(k)}
        if "notify_on_complete" in changes:
            changes["notify_on_complete"] = bool(changes["notify_on_complete"])
        if owner_id is not None and owner_id != run["owner_user_id"]:
            changes["owner_user_id"] = owner_id
        if not changes:
            return run
        if is_terminal(run["state"]):
            raise Conflict(
                f"run {run['run_id']!r} is {run['state']}; a finished run is not edited "
                "(report final details on the signal that finishes it)",
                current=views.run_view(run),
            )
        version = run["version"] + 1
        changes.update(version=version, updated_at=tx.now)
        runs.update_run(tx.conn, who.tenant_id, run["run_id"], changes)
        runs.add_transition(
            tx.conn,
            {
                "tenant_id": who.tenant_id,
                "run_id": run["run_id"],
                "version": version,
                "kind": "update",
                "from_state": run["state"],
                "to_state": run["state"],
                "source_id": who.source_id,
                "reason": "updated: "
                + ", ".join(sorted(k for k in changes if k not in ("version", "updated_at"))),
                "at": tx.now,
            },
        )
        if "authority" in changes or "owner_user_id" in changes:
            runs.set_access(
                tx.conn,
                who.tenant_id,
                run["run_id"],
                access | {changes.get("owner_user_id", run["owner_user_id"])},
            )
        # The thing an open request asked about may have changed: its action must not run.
        supersede_actionable(tx, who.tenant_id, run["run_id"], version)
        run = {**run, **changes}
        tx.emit(
            who.tenant_id, PendingEvent("run.updated", views.run_event(run), run_id=run["run_id"])
        )
        return run

    def get_run(self, who: Principal, run_id: str) -> dict[str, Any]:
        with self.db.read() as conn:
            run = runs.get_run(conn, who.tenant_id, run_id)
            if run is None or not runs.can_see_run(conn, who, run_id):
                raise NotFound(f"no run {run_id!r}")
            out = views.run_view(run, include_details=True)
            out["pending_input_request"] = actions.pending_view(
                conn, who.tenant_id, run_id, include_details=True
            )
            out["open_notifications"] = [
                views.notification_view(n)
                for n in notes.open_for_run(conn, who.tenant_id, run_id)
                if who.sees_all_runs or n["recipient_user_id"] == who.user_id
            ]
            out["open_mismatches"] = int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(t.mismatches)
                    .where(
                        t.mismatches.c.tenant_id == who.tenant_id,
                        t.mismatches.c.run_id == run_id,
                        t.mismatches.c.status == "open",
                    )
                ).scalar_one()
            )
            return out

    def list_runs(
        self, who: Principal, *, states: list[str] | None, after: str | None, limit: int
    ) -> dict[str, Any]:
        with self.db.read() as conn:
            rows = runs.list_runs(conn, who, states=states, after=after, limit=limit + 1)
        page = rows[:limit]
        return {
            "runs": [views.run_view(r) for r in page],
            "next_cursor": page[-1]["run_id"] if len(rows) > limit else None,
        }

    def record_progress(
        self, who: Principal, run_id: str, message: str | None, counts: dict[str, Any] | None
    ) -> dict[str, Any]:
        """A heartbeat: updates last_progress_at and the live feed. Never a notification."""
        with self.db.transaction() as tx:
            run = runs.require_run(tx.conn, who.tenant_id, run_id, for_update=True)
            if is_terminal(run["state"]):
                return {
                    "accepted": False,
                    "reason": f"run is {run['state']}",
                    "run": views.run_view(run),
                }
            message = public_text(message, PROGRESS_MAX)
            progress = {"message": message, "counts": counts, "at": views.iso(tx.now)}
            runs.update_run(
                tx.conn, who.tenant_id, run_id, {"progress": progress, "last_progress_at": tx.now}
            )
            tx.emit(
                who.tenant_id,
                PendingEvent(
                    "run.progress",
                    {
                        "run_id": run_id,
                        "version": run["version"],
                        "message": message,
                        "counts": counts,
                    },
                    run_id=run_id,
                ),
            )
            run.update(progress=progress, last_progress_at=tx.now)
            return {"accepted": True, "decision": "live", "run": views.run_view(run)}

    # --- signals -------------------------------------------------------------------

    def accept_signal(
        self, tenant_id: str, source: dict[str, Any], run_id: str, signal: Signal
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
        with self.db.read() as conn:
            seen = runs.find_inbound(conn, tenant_id, source["id"], signal.event_id)
        if seen is not None:
            return self._duplicate(tenant_id, seen, run_id)

        observed: Observed | None = None
        reader_error: str | None = None
        if source["trust"] == "advisory":
            observed, reader_error = self._observe(source, run_id)
        try:
            with self.db.transaction() as tx:
                return self._accept_in_tx(
                    tx, tenant_id, source, run_id, signal, observed, reader_error
                )
        except IntegrityError:
            # A concurrent delivery of the same event won the insert: answer as duplicate.
            with self.db.read() as conn:
                seen = runs.find_inbound(conn, tenant_id, source["id"], signal.event_id)
            if seen is None:
                raise
            return self._duplicate(tenant_id, seen, run_id)

    def _observe(self, source: dict[str, Any], run_id: str) -> tuple[Observed | None, str | None]:
        try:
            reader = self.reader_for(source)
            if reader is None:
                return None, "advisory source has no state reader"
            return reader.read(run_id), None
        except RunbellError as exc:  # ReaderError, or a stored config that no longer builds
            log.warning(
                # The class only: a reader URL's path may carry a tenant's token. The
                # detail is kept on the mismatch row, visible to the tenant alone.
                "reconcile.reader_failed",
                run_id=run_id,
                source_id=source["id"],
                error=type(exc).__name__,
            )
            return None, exc.detail

    def _duplicate(self, tenant_id: str, seen: dict[str, Any], run_id: str) -> SignalResult:
        metrics.DUPLICATES.labels("signal").inc()
        if seen["run_id"] != run_id:
            # Not a retry: the runtime reused an event id. Dropping it as a duplicate would
            # lose this run's signal silently.
            raise Conflict(
                f"event_id {seen['event_id']!r} was already used by another run of this "
                "source; event ids must be unique per source",
                field="event_id",
            )
        with self.db.read() as conn:
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
        self,
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
                self._record_mismatch(tx, tenant_id, source, run, signal, observed, reader_error)
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

        run, ids = self._apply(
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

    def _apply(
        self,
        tx: Tx,
        run: dict[str, Any],
        state: str,
        *,
        sequence: int | None,
        source_id: str | None,
        event_id: str | None,
        reason: str | None,
        error: dict[str, Any] | None,
        effects_verified: bool | None,
        reported_at: datetime | None = None,
        report: dict[str, Any] | None = None,
        kind: str = "state",
        request: RequestLink | None = None,
    ) -> tuple[dict[str, Any], list[str]]:
        """Apply one judged transition: run row, history, attention, feed. Inside ``tx``.

        ``request`` links the ``input_required`` notification to the input request that
        caused it; ``kind`` is ``request`` when a new request replaces a pending one
        without a change of state (still a new version, so older approvals are stale).
        """
        tenant_id, run_id = run["tenant_id"], run["run_id"]
        version = run["version"] + 1
        changes: dict[str, Any] = {"state": state, "version": version, "updated_at": tx.now}
        if sequence is not None:
            changes["sequence"] = sequence
        if report:
            changes["report"] = {**(run.get("report") or {}), **report}
        if state == "working" and run.get("started_at") is None:
            changes["started_at"] = tx.now
        if is_terminal(state):
            changes.update(finished_at=tx.now, stop_reason=reason, error=error)
        runs.update_run(tx.conn, tenant_id, run_id, changes)
        before = run["state"]
        run = {**run, **changes}

        ids: list[str] = []
        # The transition's own event goes first, so the feed reads cause before effect.
        tx.emit(
            tenant_id,
            PendingEvent(
                "run.transitioned",
                {**views.run_event(run), "from": before, "reason": reason, "notification_ids": ids},
                run_id=run_id,
            ),
        )
        supersede_actionable(tx, tenant_id, run_id, version)
        if before == RunState.INPUT_REQUIRED and state != RunState.INPUT_REQUIRED:
            actions.cancel_pending(tx, run)  # nobody can answer those any more
        decision = None
        attention = attention_for(state, effects_verified)
        if attention is not None:
            raised = raise_attention(
                tx,
                self.policy_for(tx, tenant_id),
                run,
                attention=attention.value,
                version=version,
                facts={"effects_verified": effects_verified, **error_facts(error)},
                reason=reason,
                owner_present=self.presence.is_present(tenant_id, run["owner_user_id"]),
                request=request,
            )
            decision = raised.decision.as_dict()
            if raised.notification_id:
                ids.append(raised.notification_id)
        if is_terminal(state):
            # A mismatch alert about a run that has now finished is moot.
            for note in notes.open_for_run(tx.conn, tenant_id, run_id):
                if note["id"] not in ids and note["attention_type"] == "mismatch":
                    close_notification(tx, note, "resolved", f"run is {state}")
        runs.add_transition(
            tx.conn,
            {
                "tenant_id": tenant_id,
                "run_id": run_id,
                "version": version,
                "kind": kind,
                "from_state": before,
                "to_state": state,
                "source_id": source_id,
                "event_id": event_id,
                "sequence": sequence,
                "reason": reason,
                "decision": decision,
                "at": tx.now,
                "reported_at": reported_at,
            },
        )
        log.info(
            "run.transitioned",
            run_id=run_id,
            from_state=before,
            to_state=state,
            version=version,
            notifications=len(ids),
        )
        return run, ids

    # --- reconciliation ------------------------------------------------------------

    def _record_mismatch(
        self,
        tx: Tx,
        tenant_id: str,
        source: dict[str, Any],
        run: dict[str, Any],
        signal: Signal,
        observed: Observed | None,
        reader_error: str | None,
    ) -> None:
        existing = tx.conn.execute(
            sa.select(t.mismatches.c.id)
            .where(
                t.mismatches.c.tenant_id == tenant_id,
                t.mismatches.c.run_id == run["run_id"],
                t.mismatches.c.status == "open",
            )
            .where(t.mismatches.c.claimed["state"].as_string() == signal.state)
        ).first()
        if existing is not None:
            return  # already being reconciled; one open mismatch per claim
        from runbell.ids import new_id

        mismatch_id = new_id("mis")
        tx.conn.execute(
            t.mismatches.insert().values(
                id=mismatch_id,
                tenant_id=tenant_id,
                run_id=run["run_id"],
                source_id=source["id"],
                event_id=signal.event_id,
                claimed={
                    "state": signal.state,
                    "sequence": signal.sequence,
                    "reason": signal.reason,
                    "error": signal.error,
                    "effects_verified": signal.effects_verified,
                },
                observed=None
                if observed is None
                else {"state": observed.state, "sequence": observed.sequence},
                status="open",
                checks=0,
                last_error=reader_error,
                next_check_at=tx.now + timedelta(seconds=self.settings.mismatch_backoff_s[0]),
                created_at=tx.now,
            )
        )
        tx.emit(
            tenant_id,
            PendingEvent(
                "run.mismatch",
                {
                    "run_id": run["run_id"],
                    "mismatch_id": mismatch_id,
                    "claimed": signal.state,
                    "observed": None if observed is None else observed.state,
                    "version": run["version"],
                },
                run_id=run["run_id"],
            ),
        )
        log.info(
            "reconcile.mismatch",
            run_id=run["run_id"],
            claimed=signal.state,
            observed=None if observed is None else observed.state,
        )

    def recheck_mismatches(self, now: datetime, limit: int = 100) -> int:
        """Re-read due mismatches; apply what converged, escalate what never does."""
        with self.db.read() as conn:
            due = [
                dict(r._mapping)
                for r in conn.execute(
                    sa.select(t.mismatches)
                    .where(t.mismatches.c.status == "open", t.mismatches.c.next_check_at <= now)
                    .order_by(t.mismatches.c.next_check_at)
                    .limit(limit)
                ).all()
            ]
        for mismatch in due:
            with self.db.read() as conn:
                try:
                    source = accounts.get_source(conn, mismatch["tenant_id"], mismatch["source_id"])
                except NotFound:
                    continue
            observed, error = self._observe(source, mismatch["run_id"])
            with self.db.transaction(now=now) as tx:
                self._recheck_in_tx(tx, mismatch, observed, error)
        return len(due)

    def _recheck_in_tx(
        self, tx: Tx, mismatch: dict[str, Any], observed: Observed | None, error: str | None
    ) -> None:
        mt = t.mismatches
        tenant_id = mismatch["tenant_id"]
        current = tx.conn.execute(sa.select(mt.c.status).where(mt.c.id == mismatch["id"])).scalar()
        if current != "open":
            return  # another scheduler got here first
        run = runs.require_run(tx.conn, tenant_id, mismatch["run_id"], for_update=True)
        claimed = mismatch["claimed"]

        def close(status: str, note: str) -> None:
            tx.conn.execute(
                sa.update(mt)
                .where(mt.c.id == mismatch["id"])
                .values(
                    status=status,
                    resolved_at=tx.now,
                    last_error=note[:500],
                    next_check_at=None,
                    observed=None
                    if observed is None
                    else {"state": observed.state, "sequence": observed.sequence},
                )
            )
            tx.emit(
                tenant_id,
                PendingEvent(
                    "run.mismatch_closed",
                    {
                        "run_id": run["run_id"],
                        "mismatch_id": mismatch["id"],
                        "status": status,
                        "reason": note,
                    },
                    run_id=run["run_id"],
                ),
            )

        claim = judge(run["state"], run["sequence"], claimed["state"], None)
        if not claim.applies:
            close("superseded", f"claim no longer applies: {claim.reason}")
            return
        if observed is not None and observed.state == claimed["state"]:
            run, _ = self._apply(
                tx,
                run,
                claimed["state"],
                sequence=observed.sequence,
                source_id=mismatch["source_id"],
                event_id=mismatch["event_id"],
                reason=claimed.get("reason"),
                error=claimed.get("error"),
                effects_verified=claimed.get("effects_verified"),
            )
            close("resolved", "state reader agrees")
            return
        if observed is not None and observed.state != run["state"]:
            moved = judge(run["state"], run["sequence"], observed.state, observed.sequence)
            if moved.applies:
                # The authoritative state went somewhere else: follow it, drop the claim.
                self._apply(
                    tx,
                    run,
                    observed.state,
                    sequence=observed.sequence,
                    source_id=mismatch["source_id"],
                    event_id=None,
                    reason="reconciled from the state reader",
                    error=None,
                    effects_verified=None,
                )
                close("superseded", f"state reader says {observed.state}")
                return
        checks = mismatch["checks"] + 1
        backoff = self.settings.mismatch_backoff_s
        values: dict[str, Any] = {
            "checks": checks,
            "last_error": (error or "")[:500] or None,
            "observed": None
            if observed is None
            else {"state": observed.state, "sequence": observed.sequence},
        }
        if checks >= self.settings.mismatch_max_checks:
            values.update(status="escalated", next_check_at=None)
            tx.conn.execute(sa.update(mt).where(mt.c.id == mismatch["id"]).values(**values))
            raise_attention(
                tx,
                self.policy_for(tx, tenant_id),
                run,
                attention="mismatch",
                version=run["version"],
                facts={},
                reason=(
                    f"runtime reported {claimed['state']}, state reader says "
                    f"{observed.state if observed else 'nothing'} after {checks} checks"
                ),
                owner_present=False,
            )
            log.warning("reconcile.escalated", run_id=run["run_id"], checks=checks)
            return
        values["next_check_at"] = tx.now + timedelta(seconds=backoff[min(checks, len(backoff) - 1)])
        tx.conn.execute(sa.update(mt).where(mt.c.id == mismatch["id"]).values(**values))

    # --- notifications -------------------------------------------------------------

    def _own_note(self, conn: Any, who: Principal, notification_id: str) -> dict[str, Any]:
        note = notes.get(conn, who.tenant_id, notification_id)
        if who.is_user and note["recipient_user_id"] != who.user_id:
            raise NotFound(f"no notification {notification_id!r}")
        return note

    def list_notifications(
        self, who: Principal, *, states: list[str] | None, before: str | None, limit: int
    ) -> dict[str, Any]:
        assert who.user_id is not None
        with self.db.read() as conn:
            rows = notes.list_for_recipient(
                conn, who.tenant_id, who.user_id, states=states, before=before, limit=limit + 1
            )
        page = rows[:limit]
        return {
            "notifications": [views.notification_view(n) for n in page],
            "next_cursor": page[-1]["id"] if len(rows) > limit else None,
        }

    def get_notification(self, who: Principal, notification_id: str) -> dict[str, Any]:
        with self.db.read() as conn:
            note = self._own_note(conn, who, notification_id)
            run = runs.require_run(conn, who.tenant_id, note["run_id"])
            can_see = runs.can_see_run(conn, who, note["run_id"])
            request = actions.get_for_notification(conn, note)
        ok, why = self._actionable(note, run, request, can_see)
        if note["attention_type"] == "input_required" and not ok:
            metrics.STALE_OPENS.labels(note["attention_type"]).inc()
        out = views.notification_view(note)
        if not can_see:
            # The pointer stays; what it pointed at does not (invariant 8): only the run's
            # id, state and version, no reason, no request.
            out.update(
                actionable=False,
                actionable_reason=why,
                reason=None,
                run={"run_id": run["run_id"], "state": run["state"], "version": run["version"]},
            )
            return out
        out.update(
            actionable=ok, actionable_reason=why, run=views.run_view(run, include_details=True)
        )
        if request is not None:
            out["input_request"] = views.input_request_view(request, include_details=True)
        return out

    def _actionable(
        self,
        note: dict[str, Any],
        run: dict[str, Any],
        request: dict[str, Any] | None,
        recipient_sees_run: bool,
    ) -> tuple[bool, str]:
        """Whether the recipient can still act on ``note``, and why (not): the one answer
        the recipient's own view and the admin's trail both give."""
        ok, why = views.actionable(note, run, self.db.clock(), request)
        if not recipient_sees_run:
            return False, "access lost"
        return ok, why

    def _recipient_sees_run(self, conn: Any, note: dict[str, Any]) -> bool:
        """The recipient's access now, as the dispatcher checks it: a current member who
        may see the run (whoever is asking)."""
        tenant_id, user_id = note["tenant_id"], note["recipient_user_id"]
        role = accounts.membership_role(conn, tenant_id, user_id)
        recipient = Principal(tenant_id=tenant_id, kind="user", role=role or "", user_id=user_id)
        return role is not None and runs.can_see_run(conn, recipient, note["run_id"])

    def acknowledge(self, who: Principal, notification_id: str) -> dict[str, Any]:
        with self.db.transaction() as tx:
            return self.acknowledge_in(tx, who, notification_id)

    def acknowledge_in(self, tx: Tx, who: Principal, notification_id: str) -> dict[str, Any]:
        """Acknowledge inside ``tx`` (the API's Idempotency-Key record commits with it)."""
        note = self._own_note(tx.conn, who, notification_id)
        if close_notification(
            tx, note, "acknowledged", f"acknowledged by {who.user_id or who.key_id}"
        ):
            notes.mark_seen(tx.conn, who.tenant_id, notification_id, tx.now)
            waited = (tx.now - note["created_at"]).total_seconds()
            kind = note["attention_type"]
            tx.after_commit.append(lambda: metrics.ACK_SECONDS.labels(kind).observe(waited))
            note = notes.get(tx.conn, who.tenant_id, notification_id)
        return views.notification_view(note)

    def revoke_member(self, tenant_id: str, user_id: str) -> int:
        """Revoke a membership and all its tokens, and withdraw what was sent to them.

        In the same transaction, every open notification of theirs closes as ``revoked``
        with its stored previews redacted, which cancels its queued deliveries on every
        channel (invariant 8). Returns how many notifications were withdrawn.
        """
        with self.db.transaction() as tx:
            accounts.revoke_member(tx.conn, tenant_id, user_id, tx.now)
            withdrawn = 0
            for note in notes.open_for_recipient(tx.conn, tenant_id, user_id):
                notes.redact(tx.conn, tenant_id, note["id"])
                redacted = {**note, "summary": notes.WITHDRAWN_SUMMARY, "reason": None}
                withdrawn += close_notification(tx, redacted, "revoked", "recipient lost access")
        log.info("member.revoked", tenant_id=tenant_id, user_id=user_id, withdrawn=withdrawn)
        return withdrawn

    def trail(self, who: Principal, notification_id: str) -> dict[str, Any]:
        with self.db.read() as conn:
            note = notes.get(conn, who.tenant_id, notification_id)
            transition = conn.execute(
                sa.select(t.transitions).where(
                    t.transitions.c.tenant_id == who.tenant_id,
                    t.transitions.c.run_id == note["run_id"],
                    t.transitions.c.version == note["transition_version"],
                )
            ).first()
            deliveries = notes.deliveries_for(conn, who.tenant_id, notification_id)
            lifecycle = feed.for_notification(conn, who.tenant_id, notification_id)
            receipts = requests.receipts_for(conn, who.tenant_id, notification_id)
            run = runs.require_run(conn, who.tenant_id, note["run_id"])
            request = actions.get_for_notification(conn, note)
            recipient_sees_run = self._recipient_sees_run(conn, note)
        out = views.notification_view(note)
        # "Could the user still act?": the recipient's answer, not the admin asking.
        out["actionable"], out["actionable_reason"] = self._actionable(
            note, run, request, recipient_sees_run
        )
        out["why"] = {
            "rule_id": note["rule_id"],
            "decision": note["decision"],
            "inputs": note["inputs"],
        }
        out["transition"] = (
            None
            if transition is None
            else {
                "version": transition.version,
                "kind": transition.kind,
                "from": transition.from_state,
                "to": transition.to_state,
                "source_id": transition.source_id,
                "event_id": transition.event_id,
                "reason": transition.reason,
                "at": views.iso(transition.at),
                "reported_at": views.iso(transition.reported_at),
            }
        )
        out["deliveries"] = [
            {
                "id": d["id"],
                "channel": d["channel"],
                "destination": d["destination"],
                "event_type": d["event_type"],
                "status": d["status"],
                "attempt_count": d["attempt_count"],
                "next_attempt_at": views.iso(d["next_attempt_at"]),
                "last_error": d["last_error"],
                "created_at": views.iso(d["created_at"]),
                "updated_at": views.iso(d["updated_at"]),
                "attempts": [
                    {
                        k: (views.iso(v) if isinstance(v, datetime) else v)
                        for k, v in a.items()
                        if k not in ("tenant_id",)
                    }
                    for a in d.get("attempts", [])
                ],
            }
            for d in deliveries
        ]
        out["lifecycle"] = [
            {
                "cursor": str(e["seq"]),
                "type": e["type"],
                "at": views.iso(e["created_at"]),
                "data": e["data"],
            }
            for e in lifecycle
        ]
        out["receipts"] = [{**views.receipt_view(r), "user_id": r["user_id"]} for r in receipts]
        return out

    def expire_notifications(self, now: datetime, limit: int = 500) -> int:
        """Close open notifications past their expiry (and cancel what they had queued)."""
        n = t.notifications
        with self.db.read() as conn:
            due = [
                dict(r._mapping)
                for r in conn.execute(
                    sa.select(n)
                    .where(n.c.state == "open", n.c.expires_at <= now)
                    .order_by(n.c.expires_at)
                    .limit(limit)
                ).all()
            ]
        for note in due:
            with self.db.transaction(now=now) as tx:
                close_notification(tx, note, "expired", "expired before anyone acted")
        return len(due)

    # --- retention -----------------------------------------------------------------

    def prune(self, now: datetime) -> int:
        cutoff = now - timedelta(seconds=self.settings.feed_retention_s)
        total = 0
        with self.db.read() as conn:
            tenant_ids = [r[0] for r in conn.execute(sa.select(t.tenants.c.id))]
        for tenant_id in tenant_ids:
            with self.db.transaction(now=now) as tx:
                total += feed.prune(tx.conn, tenant_id, cutoff)
        with self.db.transaction(now=now) as tx:
            before = now - timedelta(seconds=self.settings.inbound_retention_s)
            runs.prune_inbound(tx.conn, before)
            idempotency.prune(tx.conn, before)  # same retention as signal dedupe
        return total
