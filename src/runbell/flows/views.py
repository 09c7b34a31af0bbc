"""What the outside sees of runs and notifications (API bodies, feed payloads).

Sensitive run ``details`` appear only where the caller asked for them and may see them;
the neutral views here never include them.

Invariants kept here (DESIGN §2): 11 (``details`` only in the views that ask for them, and
a run's ``error`` only in run views for callers who may see the run — never in the feed
and webhook payloads, ``run_event``); 9 (``actionable`` says why an action can no longer
run, in the words the faces show).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from runbell.domain.badges import badge
from runbell.domain.cancellation import CancelSummary
from runbell.domain.jobs import DoneWhen
from runbell.domain.records import (
    InputRequest,
    Notification,
    Receipt,
    ReportedError,
    Run,
    RunReport,
)
from runbell.domain.runs import MCP_STATUS, RunState, is_terminal


class CancelRequest(TypedDict):
    at: str | None
    by: str | None
    by_kind: str  # user | runtime
    reason: str | None


class WorkerView(TypedDict):
    id: str
    epoch: int


class DependsOnView(TypedDict):
    """The proposal a run depends on, as it named it (``flows.dependencies``)."""

    run: str
    request_id: str
    version: int


class RunView(TypedDict):
    """``GET /v1/runs/{id}`` and every body that carries a run (the OpenAPI ``Run``)."""

    run_id: str
    owner: str
    title: str | None
    kind: str | None
    subject: dict[str, Any] | None
    objective: str | None
    authority: dict[str, Any] | None
    state: str
    mcp_status: str
    terminal: bool
    version: int
    sequence: int | None
    notify_on_complete: bool
    metadata: dict[str, Any]
    progress: dict[str, Any] | None
    report: RunReport | None
    stop_reason: str | None
    error: ReportedError | None
    created_at: str | None
    updated_at: str | None
    started_at: str | None
    finished_at: str | None
    last_progress_at: str | None
    cancel_requested: CancelRequest | None
    cancellation: CancelSummary | None
    stall_after_seconds: int | None
    stalled_at: str | None
    stall_due_at: str | None
    outcome: str | None
    worker: WorkerView | None
    done_when: DoneWhen | None  # what counts as done (issue 18 item 5)
    depends_on: DependsOnView | None
    details: NotRequired[dict[str, Any] | None]  # only for a caller who asked and may see


class BadgeView(TypedDict):
    """A run's status badge (``domain.badges``): from its state and its ledger."""

    key: str
    label: str
    because: str | None


def badge_view(state: str, outcome: str | None, counts: Mapping[str, int] | None) -> BadgeView:
    shown = badge(state, outcome, counts)
    return {"key": shown.key, "label": shown.label, "because": shown.because}


class RunRef(TypedDict):
    """A run named, not shown: its id (a signal about a run that no longer exists)."""

    run_id: str


class RunBrief(RunRef):
    """A run a caller may no longer see: its id, state and version, nothing else."""

    state: str
    version: int


class RunEvent(TypedDict):
    """The thin run payload of feed events and webhooks: never details or error."""

    run_id: str
    state: str
    version: int
    kind: str | None
    terminal: bool
    stop_reason: str | None
    report: RunReport | None


class NotificationView(TypedDict):
    id: str
    run_id: str
    recipient: str
    transition_version: int
    attention_type: str
    urgency: str
    decision: str
    rule_id: str
    summary: str
    subject_version: str | None
    input_request_id: str | None
    reason: str | None
    state: str
    expires_at: str | None
    created_at: str | None
    closed_at: str | None
    closed_reason: str | None
    first_delivered_at: str | None
    first_seen_at: str | None
    deep_link: str


class Person(TypedDict):
    id: str
    email: str | None


class InputRequestView(TypedDict):
    id: str
    run_id: str
    kind: str
    summary: str
    options: list[Any]
    blocks_work: bool
    expires_at: str | None
    version: int
    run_version: int
    state: str
    created_at: str | None
    closed_at: str | None
    answered_by: Person | None
    answered_at: str | None
    decision: str | None
    value: Any
    expired_at: str | None
    superseded_by: str | None
    approvers: list[str] | None  # who may answer it, when the request names them
    details: NotRequired[dict[str, Any] | None]  # only when asked for
    action: NotRequired[dict[str, Any] | None]  # with details: as sensitive
    risks: NotRequired[list[dict[str, str]]]  # with details: flagged in the action
    edited: bool | None  # the approval carried an edited value (issue 19 item 3)
    answered_by_machine: str | None  # "callback" or "key": a machine answered (item 4)
    editable: NotRequired[dict[str, Any] | None]  # {schema, value}; with the details


class ReceiptView(TypedDict):
    id: str
    notification_id: str
    kind: str
    channel: str | None
    at: str | None


# Built once: ``json.dumps`` with options builds an encoder per call (~2-4 us an answer).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_body(content: Any) -> bytes:
    """The bytes of one JSON answer: compact UTF-8 ending in one newline (so ``curl``
    output does not run into the prompt). Every API answer and every stored replay."""
    return _ENCODER.encode(content).encode() + b"\n"


#: A user id as it appears inside stored reasons and evidence ("answered by usr_…").
USER_ID = re.compile(r"\busr_[0-9a-z]{10,40}\b")


def user_ids_in(texts: Iterable[Any]) -> set[str]:
    """The user ids named in ``texts`` (strings; anything else is skipped)."""
    return {m for t in texts if isinstance(t, str) for m in USER_ID.findall(t)}


def name_people(text: str | None, people: Mapping[str, str]) -> str | None:
    """``text`` with each user id of ``people`` replaced by that person's email: a stored
    reason says "answered by usr_…"; a person reads who it was. Ids of anyone else (not a
    member of the tenant) stay as they are."""
    if not text:
        return text
    return USER_ID.sub(lambda m: people.get(m.group(0), m.group(0)), text)


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    # The last value and its text, by identity (the memo holds the object, so its id
    # cannot be reused; one tuple, swapped whole, as threads share it): a signal's answer
    # and events format its transaction's ``now`` several times.
    seen = _last_iso[0]
    if seen[0] is value:
        return seen[1]
    text = value.isoformat().replace("+00:00", "Z")
    _last_iso[0] = (value, text)
    return text


_last_iso: list[tuple[datetime | None, str | None]] = [(None, None)]


def run_view(run: Run, *, include_details: bool = False) -> RunView:
    out: RunView = {
        "run_id": run.run_id,
        "owner": run.owner_user_id,
        "title": run.title,
        "kind": run.kind,
        "subject": run.subject,
        "objective": run.objective,
        "authority": run.authority,
        "state": run.state,
        "mcp_status": MCP_STATUS[RunState(run.state)],
        "terminal": is_terminal(run.state),
        "version": run.version,
        "sequence": run.sequence,
        "notify_on_complete": bool(run.notify_on_complete),
        "metadata": run.metadata or {},
        "progress": run.progress,
        "report": run.report,
        "stop_reason": run.stop_reason,
        "error": run.error,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "last_progress_at": iso(run.last_progress_at),
        "cancel_requested": cancel_requested_view(run),
        # Once cancelled: what was kept and what stays uncertain (flows.cancel_outcome).
        "cancellation": run.cancel_summary,
        "stall_after_seconds": run.stall_after_seconds,
        "stalled_at": iso(run.stalled_at),  # an open stall episode began then
        "stall_due_at": iso(run.stall_due_at),
        # What a completion means given the run's operations (flows.completion):
        # verified | needs_review | unknown, None when no completion was judged.
        "outcome": run.outcome,
        "worker": (
            {"id": run.worker_id, "epoch": run.worker_epoch or 0} if run.worker_id else None
        ),
        "done_when": run.done_when,
        "depends_on": depends_on_view(run),
    }
    if include_details:
        out["details"] = run.details
    return out


def depends_on_view(run: Run) -> DependsOnView | None:
    if run.depends_on_request is None or run.depends_on_run is None:
        return None
    return {
        "run": run.depends_on_run,
        "request_id": run.depends_on_request,
        "version": int(run.depends_on_version or 1),
    }


def cancel_requested_view(run: Run) -> CancelRequest | None:
    """``{at, by, by_kind, reason}`` of the run's cancellation request, or None: ``by`` is
    the person who asked (``by_kind: user``), or None when the runtime asked with its API
    key (``by_kind: runtime``)."""
    at = run.cancel_requested_at
    if at is None:
        return None
    by = run.cancel_requested_by
    return {
        "at": iso(at),
        "by": by,
        "by_kind": "user" if by else "runtime",
        "reason": run.cancel_reason,
    }


def run_event(run: Run) -> RunEvent:
    """The thin run payload carried by feed events: ids, state, version, reason."""
    return {
        "run_id": run.run_id,
        "state": run.state,
        "version": run.version,
        "kind": run.kind,
        "terminal": is_terminal(run.state),
        "stop_reason": run.stop_reason,
        "report": run.report,
    }


def notification_view(note: Notification) -> NotificationView:
    return {
        "id": note["id"],
        "run_id": note["run_id"],
        "recipient": note["recipient_user_id"],
        "transition_version": note["transition_version"],
        "attention_type": note["attention_type"],
        "urgency": note["urgency"],
        "decision": note["decision"],
        "rule_id": note["rule_id"],
        "summary": note["summary"],
        "subject_version": note.get("subject_version"),
        "input_request_id": note.get("input_request_id"),
        "reason": note.get("reason"),
        "state": note["state"],
        "expires_at": iso(note.get("expires_at")),
        "created_at": iso(note.get("created_at")),
        "closed_at": iso(note.get("closed_at")),
        "closed_reason": note.get("closed_reason"),
        "first_delivered_at": iso(note.get("first_delivered_at")),
        "first_seen_at": iso(note.get("first_seen_at")),
        "deep_link": f"/n/{note['id']}",
    }


def input_request_view(req: InputRequest, *, include_details: bool = False) -> InputRequestView:
    """An input request as the API shows it. ``details`` (arguments, evidence, risk) only
    when asked for, for a caller who may see the run."""
    answered = req.answered_by_id
    out: InputRequestView = {
        "id": req.id,
        "run_id": req.run_id,
        "kind": req.kind,
        "summary": req.summary,
        "options": req.options or [],
        "blocks_work": bool(req.blocks_work),
        "expires_at": iso(req.expires_at),
        "version": req.version,
        "run_version": req.run_version,
        "state": req.state,
        "created_at": iso(req.created_at),
        "closed_at": iso(req.closed_at),
        "answered_by": ({"id": answered, "email": req.answered_by_email} if answered else None),
        "answered_at": iso(req.answered_at),
        "decision": req.decision,
        "value": req.value,
        "expired_at": iso(req.expires_at) if req.state == "expired" else None,
        "superseded_by": req.superseded_by,
        "approvers": req.approvers,
        "edited": req.edited,
        "answered_by_machine": req.answered_by_machine,
    }
    if include_details:
        out["details"] = req.details
        # What approving lets happen, and what was flagged in it: as sensitive as details.
        out["action"] = req.action
        out["risks"] = req.risks or []
        out["editable"] = req.editable  # the value is as sensitive as the details
    return out


def receipt_view(receipt: Receipt) -> ReceiptView:
    return {
        "id": receipt["id"],
        "notification_id": receipt["notification_id"],
        "kind": receipt["kind"],
        "channel": receipt["channel"],
        "at": iso(receipt["at"]),
    }


def request_blocked(req: InputRequest, now: datetime) -> str | None:
    """Why an input request can no longer be answered, in a few words; None if it can."""
    state = req.state
    if state == "answered":
        return f"answered by {req.answered_by_email or req.answered_by_id}"
    if state == "superseded":
        return "superseded by a newer request"
    if state == "cancelled":
        return "request cancelled"
    if state == "expired":
        return "expired"
    if req.expires_at is not None and req.expires_at <= now:
        return "expired"
    return None


def _standing(note: Notification, now: datetime) -> tuple[bool, str] | None:
    """A closed or expired notification's reason it can no longer be acted on."""
    if note["state"] != "open":
        return False, note["state"]
    expires_at = note["expires_at"]
    if expires_at is not None and expires_at <= now:
        return False, "expired"
    return None


def actionable(
    note: Notification,
    run: Run | None,
    now: datetime,
    request: InputRequest | None = None,
) -> tuple[bool, str]:
    """Whether the notification's action can still run, and why (not).

    For an ``input_required`` notification that points at an input request (``request``,
    the stored row with its answer), the request's own fate comes first: ``answered by
    <email>``, ``superseded by a newer request``, ``request cancelled``, ``expired``.
    ``run`` is None for a digest: it has no run of its own and is only informational.
    """
    if run is None:
        return _standing(note, now) or (False, "informational")
    if note["attention_type"] == "amendment":
        # A proposal put to the owner: open while its request waits and the run goes on.
        if request is not None and request_blocked(request, now) is not None:
            return False, str(request_blocked(request, now))
        if note["state"] != "open":
            return False, note["state"]
        if is_terminal(run.state):
            return False, f"run is now {run.state}"
        return True, "awaiting your decision"
    if note["attention_type"] == "needs_review" and request is not None:
        # A completion that needs review carries the owner's decision (flows.review).
        if request_blocked(request, now) is not None:
            return False, str(request_blocked(request, now))
        if note["state"] not in ("open", "acknowledged"):
            return False, note["state"]
        return True, "awaiting your review decision"
    if note["attention_type"] == "input_required" and request is not None:
        blocked = request_blocked(request, now)
        if blocked is not None:
            return False, blocked
        if note["state"] == "revoked":
            return False, "access lost"
        if run.state != "input_required":
            return False, f"run is now {run.state}"
        if run.version != note["transition_version"]:
            return (
                False,
                f"run changed since (version {note['transition_version']} -> {run.version})",
            )
        # Acknowledging says "I saw it", not "I decided": the request still waits.
        return True, "awaiting your input"
    standing = _standing(note, now)
    if standing is not None:
        return standing
    if note["attention_type"] != "input_required":
        return False, "informational"
    if run.state != "input_required":
        return False, f"run is now {run.state}"
    if run.version != note["transition_version"]:
        return (
            False,
            f"run changed since (version {note['transition_version']} -> {run.version})",
        )
    return True, "awaiting your input"
