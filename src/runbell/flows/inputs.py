"""The bodies flows take, typed: what a face hands a use case once it has parsed the
request (the API's pydantic models, the MCP tools' checked arguments, the web's forms).

Flows still check what a schema cannot (and what a caller that skips the API's schema
may send wrong); these types say which keys there are and what each holds. ``details``,
``metadata``, ``subject``, ``evidence`` and a reader's config are the caller's own JSON
objects, kept as given.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict


class DoneWhenBody(TypedDict, total=False):
    """What counts as done: words, and the operations that must be confirmed."""

    text: str
    operations: list[str]


class LinkBody(TypedDict, total=False):
    """A conversation, message, ticket… the run is linked to (``url``: display only)."""

    kind: str
    id: str
    url: str | None


class DependsOnBody(TypedDict, total=False):
    """Another run's proposal (an approval request) at a request version."""

    run: str
    request_id: str
    version: int | None


class RunFields(TypedDict, total=False):
    """``PUT /v1/runs/{id}``: only the fields given change (``owner`` by id or email)."""

    owner: str | None
    title: str | None
    kind: str | None
    subject: dict[str, Any] | None
    objective: str | None
    authority: dict[str, Any] | None
    notify_on_complete: bool | None
    metadata: dict[str, Any] | None
    details: dict[str, Any] | None
    state: str | None  # a new run starts queued or working
    sequence: int | None
    stall_after_seconds: int | None
    done_when: DoneWhenBody | str | None
    links: list[LinkBody] | None  # replaces the run's links (not versioned)
    depends_on: DependsOnBody | None
    schedule: ScheduleRef | None  # only on creation: the schedule the run starts under
    worker_id: str | None  # on creation: the completion owner's worker


class FindingBody(TypedDict, total=False):
    """``POST /v1/runs/{id}/operations/{op}/findings``: what a non-owner found."""

    finding: str  # confirmed | absent | conflict | failed | uncertain | evidence
    evidence: dict[str, Any] | None
    worker_id: str | None


class AnswerBody(TypedDict, total=False):
    """An answer to an input request, bound to the versions the person saw."""

    decision: str  # approve | reject | answer
    value: Any  # an option id, a text, or an approved editable request's (edited) value
    expected_run_version: int
    expected_request_version: int


class OptionBody(TypedDict):
    id: str
    label: str


class CallbackBody(TypedDict, total=False):
    """``POST /v1/input-requests/{id}/callback-urls`` (and ``callback`` on create)."""

    decisions: list[str] | None  # the decisions the URL may give; None: the kind's all


class CallbackAnswerBody(TypedDict, total=False):
    """``POST /v1/callbacks/{token}``: what a machine answers."""

    decision: str  # approve | reject | answer
    value: Any  # an option id or text, or an approval's edited value


class RequestBody(TypedDict, total=False):
    """``POST /v1/runs/{id}/input-requests``."""

    input_request_id: str
    kind: str  # approval | choice | text
    summary: str
    details: dict[str, Any] | None
    options: list[OptionBody] | None
    expires_at: datetime | str | None
    blocks_work: bool
    approvers: list[str] | None  # who may answer it (ids or emails); None: the run's
    action: dict[str, Any] | None  # what approving lets happen (domain.actions)
    editable: dict[str, Any] | None  # {schema, value}: a value the person may edit
    callback: dict[str, Any] | None  # {decisions?}: mint a callback URL with the request


class OperationBody(TypedDict, total=False):
    """One operation a run declares: an intended effect on a target."""

    operation_id: str
    target: dict[str, Any]  # {type, id, version?}
    intent: str
    details: dict[str, Any] | None
    idempotency_key: str | None


class DeclareBody(OperationBody, total=False):
    """``POST /v1/runs/{id}/operations``: ``operations`` (a batch) or one operation's
    fields, and the declaring worker's ``epoch``."""

    operations: list[OperationBody] | None
    epoch: int | None


class MoveBody(TypedDict, total=False):
    """``PATCH /v1/runs/{id}/operations/{op}``."""

    state: str
    evidence: dict[str, Any] | None
    epoch: int | None


class ProposalBody(TypedDict, total=False):
    """``POST /v1/runs/{id}/amendments``: why, and the fields to change."""

    text: str
    # objective | title -> the new text; done_when -> {text, operations?} (or its text);
    # exclude_operations -> operation ids or targets
    changes: dict[str, str | DoneWhenBody | list[str]]


class SourceBody(TypedDict, total=False):
    """``POST /v1/sources``."""

    name: str
    kind: str  # api | webhook
    mapper: str | None  # generic | openai, for a webhook source
    trust: str  # authoritative | advisory
    reader: dict[str, Any] | None  # the state reader's config (runbell.ingress.readers)
    signing_secret: str | None  # the provider's own, when it made one


class ScheduleBody(TypedDict, total=False):
    """``POST /v1/schedules``: a standing instruction on a cadence (issue 18 item 6)."""

    name: str | None
    owner: str | None  # a member's id or email (a person creating one: themselves)
    instruction: str
    authority: dict[str, Any] | None  # a run's authority shape: {users, roles}
    cadence: str  # cron, five fields, UTC
    mode: str  # record_only | webhook
    url: str | None  # webhook mode: where to fire


class ScheduleEdit(TypedDict, total=False):
    """``PATCH /v1/schedules/{id}``: a new instruction is a new version; a new authority
    is a new authority version (runs started under the old one are flagged)."""

    name: str | None
    instruction: str
    authority: dict[str, Any] | None
    cadence: str


class ScheduleRef(TypedDict):
    """``PUT /v1/runs/{id}`` with ``schedule``: the run starts under this schedule."""

    id: str


class DelegationBody(TypedDict, total=False):
    """``POST /v1/runs/{id}/delegations``: what the helper may do, for how long."""

    capabilities: list[str]
    expires_in: int  # seconds
    name: str


class KeyBody(TypedDict, total=False):
    """``POST /v1/keys``: a runtime or admin key; a runtime key may be scoped."""

    role: str  # runtime | admin
    name: str | None
    capabilities: list[str] | None  # None: every capability
    run_patterns: list[str] | None  # None: any run id
    own_runs: bool
