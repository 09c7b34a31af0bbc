"""Typed views of the server's answers. Each keeps the whole JSON as ``raw``, so a field
added by a newer server is never lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "TERMINAL_STATES",
    "Answer",
    "AnswerOutcome",
    "CancelResult",
    "Delegation",
    "Event",
    "FeedReset",
    "InputRequest",
    "OpenedInputRequest",
    "Operation",
    "ProgressResult",
    "Run",
    "SignalResult",
    "Snapshot",
    "SubjectGrant",
]

TERMINAL_STATES = frozenset({"completed", "failed", "cancelled"})

AnswerOutcome = Literal["answered", "expired", "superseded", "cancelled", "timeout"]


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class InputRequest:
    id: str
    run_id: str
    kind: str
    state: str
    version: int
    run_version: int | None
    summary: str | None = None
    options: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] | None = None
    expires_at: datetime | None = None
    decision: str | None = None
    value: Any = None  # an option id, a text, or an approved editable value
    answered_by: dict[str, Any] | None = None
    superseded_by: str | None = None
    approvers: list[str] | None = None
    action: dict[str, Any] | None = None  # with details: what approving lets happen
    risks: list[dict[str, Any]] = field(default_factory=list)  # flagged in the action
    editable: dict[str, Any] | None = None  # {schema, value}: what the person may edit
    edited: bool = False  # the approval carries an edited value
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InputRequest:
        return cls(
            id=data["id"],
            run_id=data["run_id"],
            kind=data["kind"],
            state=data["state"],
            version=int(data.get("version") or 1),
            run_version=data.get("run_version"),
            summary=data.get("summary"),
            options=list(data.get("options") or []),
            details=data.get("details"),
            expires_at=_time(data.get("expires_at")),
            decision=data.get("decision"),
            value=data.get("value"),
            answered_by=data.get("answered_by"),
            superseded_by=data.get("superseded_by"),
            approvers=data.get("approvers"),
            action=data.get("action"),
            risks=list(data.get("risks") or []),
            editable=data.get("editable"),
            edited=bool(data.get("edited")),
            raw=data,
        )


@dataclass(frozen=True)
class Run:
    run_id: str
    state: str
    version: int
    terminal: bool
    owner: str | None = None
    title: str | None = None
    kind: str | None = None
    sequence: int | None = None
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    report: dict[str, Any] | None = None
    outcome: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    cancel_requested: dict[str, Any] | None = None
    pending_input_request: InputRequest | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    #: What counts as done (``{"text", "operations"}``), the run's links (only in a
    #: single run's answer, not in lists), what it depends on, and where that stands now
    #: (``{"state", "text", …}``, also only in a single run's answer).
    done_when: dict[str, Any] | None = None
    links: list[dict[str, Any]] = field(default_factory=list)
    depends_on: dict[str, Any] | None = None
    dependency: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Run:
        pending = data.get("pending_input_request")
        return cls(
            run_id=data["run_id"],
            state=data["state"],
            version=int(data["version"]),
            terminal=bool(data.get("terminal", data["state"] in TERMINAL_STATES)),
            owner=data.get("owner"),
            title=data.get("title"),
            kind=data.get("kind"),
            sequence=data.get("sequence"),
            stop_reason=data.get("stop_reason"),
            error=data.get("error"),
            report=data.get("report"),
            outcome=data.get("outcome"),
            metadata=dict(data.get("metadata") or {}),
            details=data.get("details"),
            progress=data.get("progress"),
            cancel_requested=data.get("cancel_requested"),
            pending_input_request=InputRequest.from_json(pending) if pending else None,
            created_at=_time(data.get("created_at")),
            finished_at=_time(data.get("finished_at")),
            done_when=data.get("done_when"),
            links=list(data.get("links") or []),
            depends_on=data.get("depends_on"),
            dependency=data.get("dependency"),
            raw=data,
        )


@dataclass(frozen=True)
class SignalResult:
    """``outcome`` is ``applied``, ``duplicate``, ``stale``, ``mismatch`` or ``rejected``;
    ``event_id`` is the id that was sent (generated when you gave none)."""

    outcome: str
    reason: str | None
    run: Run
    event_id: str
    notifications: list[dict[str, Any]] = field(default_factory=list)
    original_outcome: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any], event_id: str) -> SignalResult:
        return cls(
            outcome=data["outcome"],
            reason=data.get("reason"),
            run=Run.from_json(data["run"]),
            event_id=event_id,
            notifications=list(data.get("notifications") or []),
            original_outcome=data.get("original_outcome"),
            raw=data,
        )


@dataclass(frozen=True)
class ProgressResult:
    accepted: bool
    run: Run
    reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgressResult:
        return cls(bool(data.get("accepted")), Run.from_json(data["run"]), data.get("reason"), data)


@dataclass(frozen=True)
class OpenedInputRequest:
    """What opening an input request answered: ``created`` is False when the same
    request was opened before (a retry)."""

    input_request: InputRequest
    run: Run
    created: bool
    notifications: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def callback_url(self) -> str | None:
        """The callback URL minted with the request (``callback=``), shown this once."""
        callback = self.raw.get("callback")
        return str(callback["url"]) if isinstance(callback, dict) else None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpenedInputRequest:
        return cls(
            InputRequest.from_json(data["input_request"]),
            Run.from_json(data["run"]),
            bool(data.get("created")),
            list(data.get("notifications") or []),
            data,
        )


@dataclass(frozen=True)
class Answer:
    """How an input request ended, as the runtime learns it.

    ``outcome``: ``answered`` (``decision`` is ``approve``, ``reject`` or ``answer``;
    ``value`` the option id or text, or for a request with an ``editable`` value the
    approved value, ``edited`` True when the person changed it), ``expired``,
    ``superseded``, ``cancelled``, or ``timeout`` (the client stopped waiting; the
    request may still be pending).
    """

    outcome: AnswerOutcome
    request_id: str
    run_id: str
    decision: str | None = None
    value: Any = None
    answered_by: str | None = None
    answered_at: datetime | None = None
    edited: bool = False

    @property
    def approved(self) -> bool:
        return self.outcome == "answered" and self.decision == "approve"

    @property
    def rejected(self) -> bool:
        return self.outcome == "answered" and self.decision == "reject"


@dataclass(frozen=True)
class Operation:
    operation_id: str
    run_id: str
    state: str
    intent: str | None = None
    target: dict[str, Any] | None = None
    allowed_next: list[str] = field(default_factory=list)
    epoch: int | None = None
    evidence: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Operation:
        return cls(
            operation_id=data["operation_id"],
            run_id=data["run_id"],
            state=data["state"],
            intent=data.get("intent"),
            target=data.get("target"),
            allowed_next=list(data.get("allowed_next") or []),
            epoch=data.get("epoch"),
            evidence=data.get("evidence"),
            raw=data,
        )


@dataclass(frozen=True)
class CancelResult:
    """``outcome`` is ``requested`` (the run is now stopping) or ``already_stopping``."""

    outcome: str
    run: Run
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CancelResult:
        return cls(data["outcome"], Run.from_json(data["run"]), data)


@dataclass(frozen=True)
class Delegation:
    """A delegated token: bound to ``run_id``, ``capabilities``, until ``expires_at``.
    ``token`` (``rbd_…``) only in the answer that minted it; ``state`` is ``active``,
    ``expired`` or ``revoked``."""

    id: str
    run_id: str
    name: str
    capabilities: list[str]
    state: str
    expires_at: datetime | None
    token: str | None = field(default=None, repr=False)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Delegation:
        return cls(
            data["id"],
            data["run_id"],
            data["name"],
            list(data["capabilities"]),
            data["state"],
            _time(data.get("expires_at")),
            data.get("token"),
            data,
        )


@dataclass(frozen=True)
class Event:
    """One feed event; ``id`` is its cursor."""

    id: str
    type: str
    run_id: str | None
    notification_id: str | None
    at: datetime | None
    data: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        return cls(
            id=str(data["id"]),
            type=data["type"],
            run_id=data.get("run_id"),
            notification_id=data.get("notification_id"),
            at=_time(data.get("at")),
            data=dict(data.get("data") or {}),
        )


@dataclass(frozen=True)
class Snapshot:
    head_cursor: str
    runs: list[Run]
    notifications: list[dict[str, Any]]
    truncated: bool

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(
            str(data["head_cursor"]),
            [Run.from_json(r) for r in data.get("runs") or []],
            list(data.get("notifications") or []),
            bool(data.get("truncated")),
        )


@dataclass(frozen=True)
class FeedReset:
    """Yielded by ``watch`` when the cursor had expired (410): events between the old
    cursor and ``snapshot.head_cursor`` are gone; replace local state with ``snapshot``.
    The events that follow continue from its head."""

    snapshot: Snapshot

    @property
    def id(self) -> str:
        return self.snapshot.head_cursor


@dataclass(frozen=True)
class Schedule:
    """Scheduled work: a standing instruction (its current version), the owner, the
    authority the runs it starts act under, a cron cadence, and how runs start
    (``record_only`` or ``webhook``). ``secret`` only in the answer that created it."""

    id: str
    state: str
    mode: str
    cadence: str
    owner: str
    instruction: str
    instruction_version: int
    authority: dict[str, Any] | None
    authority_version: int
    name: str | None = None
    url: str | None = None
    next_fire_at: datetime | None = None
    secret: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schedule:
        return cls(
            id=data["id"],
            state=data["state"],
            mode=data["mode"],
            cadence=data["cadence"],
            owner=data["owner"],
            instruction=data["instruction"]["text"],
            instruction_version=int(data["instruction"]["version"]),
            authority=data.get("authority"),
            authority_version=int(data["authority_version"]),
            name=data.get("name"),
            url=data.get("url"),
            next_fire_at=_time(data.get("next_fire_at")),
            secret=data.get("secret"),
            raw=data,
        )


@dataclass(frozen=True)
class SubjectGrant:
    """A member granted a subject (``{type, id}``, any version) in a ``role``
    (``viewer``, ``approver``, ``amender``): they have it on every run of the subject.
    ``runs``: how many runs it covered when made; ``created``: False when the member
    already had it (the answer is that grant)."""

    id: str
    user: dict[str, Any]
    subject: dict[str, Any]
    role: str
    created_by: str | None = None
    created_at: datetime | None = None
    runs: int | None = None
    created: bool | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubjectGrant:
        return cls(
            id=data["id"],
            user=dict(data["user"]),
            subject=dict(data["subject"]),
            role=data["role"],
            created_by=data.get("created_by"),
            created_at=_time(data.get("created_at")),
            runs=data.get("runs"),
            created=data.get("created"),
            raw=data,
        )


@dataclass(frozen=True)
class GroupAcknowledged:
    """What acknowledging a group of your notifications did: ``acknowledged`` how many
    this call closed (``folded`` of them because a digest among them folded them), ``ids``
    theirs; for named ids, ``already_closed`` (closed before) and ``not_found`` (not
    yours: left alone); ``more``: the group held more than 1000, call again."""

    acknowledged: int
    folded: int
    already_closed: int
    not_found: int
    more: bool
    ids: list[str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupAcknowledged:
        return cls(
            acknowledged=int(data["acknowledged"]),
            folded=int(data.get("folded") or 0),
            already_closed=int(data.get("already_closed") or 0),
            not_found=int(data.get("not_found") or 0),
            more=bool(data.get("more")),
            ids=list(data.get("ids") or []),
            raw=data,
        )
