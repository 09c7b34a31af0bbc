"""The rows Runbell keeps, as the layers pass them: frozen records, one per aggregate.

Repositories (``runbell.store``) build them from rows and take them to write; flows read
their fields and change one with :func:`dataclasses.replace`; faces may read them (they
are plain data, like the rest of ``domain``). JSON columns stay the caller's objects,
kept as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from runbell.domain.cancellation import CancelSummary
from runbell.domain.jobs import DoneWhen


class ReportLink(TypedDict):
    label: str
    url: str


class RunReport(TypedDict, total=False):
    """What the runtime said about the outcome: public (tenant webhooks carry it)."""

    iterations: int | None
    spend: dict[str, Any] | None  # {amount, currency}
    summary: str | None
    trace_id: str | None
    links: list[ReportLink] | None


class ReportedError(TypedDict, total=False):
    """A failed run's error as the runtime reported it (more keys may come along)."""

    code: str | None
    message: str | None
    retryable: bool
    user_action_required: bool
    data_inconsistent: bool


@dataclass(frozen=True, slots=True)
class Run:
    """One row of ``runs``: a run as Runbell last judged it. The JSON columns are the
    caller's objects, kept as given (``details`` is sensitive: never in feeds, logs or
    channels); change one with :func:`dataclasses.replace`, write it with a repository
    function."""

    tenant_id: str
    run_id: str
    owner_user_id: str
    title: str | None
    kind: str | None
    subject: dict[str, Any] | None
    objective: str | None
    authority: dict[str, Any] | None
    state: str
    version: int
    sequence: int | None
    notify_on_complete: bool
    metadata: dict[str, Any] | None
    details: dict[str, Any] | None
    progress: dict[str, Any] | None
    report: RunReport | None
    stop_reason: str | None
    error: ReportedError | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    last_progress_at: datetime | None
    stall_after_seconds: int | None
    stall_clock_at: datetime | None
    stall_due_at: datetime | None
    stalled_at: datetime | None
    worker_id: str | None
    worker_epoch: int
    outcome: str | None
    has_operations: bool
    cancel_requested_at: datetime | None
    cancel_requested_by: str | None
    cancel_reason: str | None
    cancel_summary: CancelSummary | None
    done_when: DoneWhen | None
    depends_on_run: str | None
    depends_on_request: str | None
    depends_on_version: int | None
    # Started under a schedule (issue 18 item 6): which, the instruction version and the
    # authority in force then ({"version": n, "authority": {...}}).
    schedule_id: str | None
    schedule_instruction_version: int | None
    schedule_authority: dict[str, Any] | None
    created_by_credential: str | None = None  # the key or delegated token that created it
    # The completion owner's credential (issue 18; its worker is ``worker_id``). None: a
    # run made before owners were recorded.
    owner_credential_id: str | None = None

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> Run:
        return cls(**row)


class RunChanges(TypedDict, total=False):
    """Some columns of a run, changed: what ``dataclasses.replace(run, **changes)`` and
    ``store.runs.update_run`` take."""

    tenant_id: str
    run_id: str
    owner_user_id: str
    title: str | None
    kind: str | None
    subject: dict[str, Any] | None
    objective: str | None
    authority: dict[str, Any] | None
    state: str
    version: int
    sequence: int | None
    notify_on_complete: bool
    metadata: dict[str, Any] | None
    details: dict[str, Any] | None
    progress: dict[str, Any] | None
    report: RunReport | None
    stop_reason: str | None
    error: ReportedError | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    last_progress_at: datetime | None
    stall_after_seconds: int | None
    stall_clock_at: datetime | None
    stall_due_at: datetime | None
    stalled_at: datetime | None
    worker_id: str | None
    worker_epoch: int
    outcome: str | None
    has_operations: bool
    cancel_requested_at: datetime | None
    cancel_requested_by: str | None
    cancel_reason: str | None
    cancel_summary: CancelSummary | None
    done_when: DoneWhen | None
    depends_on_run: str | None
    depends_on_request: str | None
    depends_on_version: int | None
    schedule_id: str | None
    schedule_instruction_version: int | None
    schedule_authority: dict[str, Any] | None
    owner_credential_id: str | None


@dataclass(frozen=True, slots=True)
class Transition:
    """One immutable history row: a run moved from one state to another (or a request
    replaced another without a move: ``kind`` ``request``)."""

    tenant_id: str
    run_id: str
    version: int
    kind: str
    from_state: str | None
    to_state: str
    source_id: str | None
    event_id: str | None
    sequence: int | None
    reason: str | None
    decision: dict[str, Any] | None
    at: datetime
    reported_at: datetime | None
    actor: dict[str, Any] | None = None  # who or what caused it (None: before the trace)

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> Transition:
        return cls(**row)


@dataclass(frozen=True, slots=True)
class InputRequest:
    """One question a run put to people (``purpose`` ``run``) or a proposal put to its
    owner (``amendment``), with its one answer once given (the ``answered_*``,
    ``decision`` and ``value`` fields; all None while unanswered). ``details`` is
    sensitive, like the run's."""

    tenant_id: str
    id: str
    run_id: str
    kind: str
    summary: str
    details: dict[str, Any] | None
    options: list[Any] | None
    blocks_work: bool
    expires_at: datetime | None
    version: int
    run_version: int
    state: str
    request_hash: str
    superseded_by: str | None
    created_at: datetime
    closed_at: datetime | None
    purpose: str
    answered_by_id: str | None = None
    answered_by_email: str | None = None
    answered_at: datetime | None = None
    decision: str | None = None
    value: Any = None
    approvers: list[str] | None = None  # who may answer (user ids); None: the run's approvers
    action: dict[str, Any] | None = None  # what approving lets happen (domain.actions)
    risks: list[dict[str, str]] | None = None  # flagged in the action when it was opened
    editable: dict[str, Any] | None = None  # {schema, value}: the person may edit the value
    edited: bool | None = None  # the answer approved an edited value
    answered_by_machine: str | None = None  # a machine answered: "callback" or "key"


@dataclass(frozen=True, slots=True)
class InboundEvent:
    """One runtime signal a source delivered, kept for dedupe: a retry of the same event
    id is answered with what the first one got (``outcome``, its notifications)."""

    tenant_id: str
    source_id: str
    event_id: str
    run_id: str
    claimed_state: str
    sequence: int | None
    outcome: str
    reason: str | None
    run_version: int | None
    notification_ids: list[str] | None
    received_at: datetime


class FeedEvent(TypedDict):
    """One event of a tenant's feed as stored. On the stream's hot path a row stays a
    (typed) dict: no object is built per event. The queries that do not need who or what
    it is about leave those keys out."""

    seq: int
    type: str
    run_id: NotRequired[str | None]
    notification_id: NotRequired[str | None]
    user_id: NotRequired[str | None]  # a person's own event (only they may see it)
    data: dict[str, Any]
    created_at: datetime


class Notification(TypedDict):
    """One row of ``notifications``: the durable attention record of one recipient for
    one transition. On the hot write path (a signal raises it and its deliveries in one
    transaction) a row stays a typed dict: no object is built per notification."""

    id: str
    tenant_id: str
    recipient_user_id: str
    run_id: str  # a digest's synthetic id for a digest
    transition_version: int
    attention_type: str
    urgency: str
    decision: str
    rule_id: str
    inputs: dict[str, Any]  # the facts the policy decided on
    summary: str
    subject_version: str | None
    input_request_id: str | None
    reason: str | None
    expires_at: datetime | None
    state: str
    closed_at: datetime | None
    closed_reason: str | None
    created_at: datetime
    first_delivered_at: datetime | None
    first_seen_at: datetime | None


class Delivery(TypedDict):
    """One row of ``deliveries``, the outbox: one message to one destination over one
    channel (a notification's, or a tenant webhook's event). A typed dict, as the
    notification it carries."""

    id: str
    tenant_id: str
    notification_id: str | None
    channel: str
    destination: str
    status: str
    run_id: str | None
    event_type: str | None
    event_key: str | None
    payload: dict[str, Any] | None
    urgency: str | None
    attempt_count: int
    next_attempt_at: datetime | None
    lease_until: NotRequired[datetime | None]  # a new row has no claim yet
    claimed_by: NotRequired[str | None]
    last_error: str | None
    created_at: datetime
    updated_at: datetime


class ClaimedDelivery(Delivery):
    """A delivery a worker just claimed, with the status it had (one given back unsent
    keeps it)."""

    was_status: str


class DeliveryAttempts(Delivery):
    """A delivery with its attempts, for a notification's trail."""

    attempts: list[Attempt]


class Endpoint(TypedDict):
    """One row of ``webhook_endpoints``: a tenant's webhook receiver. ``secrets`` are
    sealed, each with its dates; never shown."""

    id: str
    tenant_id: str
    url: str
    description: str | None
    event_types: list[str]
    secrets: list[dict[str, Any]]
    status: str
    disabled_reason: str | None
    dead_streak: int
    rate_limit_per_s: float | None
    created_at: datetime
    updated_at: datetime


class QuietHours(TypedDict):
    """One quiet window: ``HH:MM`` to ``HH:MM`` in the person's timezone, on ``days``
    (ISO weekdays, 1 = Monday) or every day."""

    start: str
    end: str
    days: NotRequired[list[int]]


class Preferences(TypedDict):
    """One row of ``preferences``: what may interrupt a person, and when."""

    tenant_id: str
    user_id: str
    consent: dict[str, Any]  # per channel: the urgencies and how and when consent was given
    quiet_hours: list[QuietHours] | None
    timezone: str
    locale: str
    updated_at: datetime


class PushSubscription(TypedDict):
    """One browser's web push subscription (the subscription is the consent)."""

    id: str
    tenant_id: str
    user_id: str
    endpoint: str
    p256dh: str
    auth: str
    user_agent: str | None
    created_at: datetime
    last_success_at: datetime | None


class ChatDestination(TypedDict):
    """A person's chat destination, or a tenant-wide room (``user_id`` None); the Apprise
    URL is sealed, ``url_hint`` is what may be shown."""

    id: str
    tenant_id: str
    user_id: str | None
    url_sealed: str
    url_hint: str
    label: str | None
    created_at: datetime


class Address(TypedDict):
    """A person's email address as it is now (the destination of an email delivery)."""

    address: str


#: A person channel's destination as stored now (``store.destinations.find``).
Destination = Address | PushSubscription | ChatDestination


class Attempt(TypedDict):
    """One try of one delivery: when, how it went, what the peer answered."""

    tenant_id: str
    delivery_id: str
    attempt_no: int
    started_at: datetime
    finished_at: datetime | None
    outcome: str
    status_code: int | None
    provider_message_id: str | None
    duration_ms: int | None
    error: str | None
    response_excerpt: str | None
    id: NotRequired[str]  # set by the store


class EscalationStep(TypedDict):
    """One step of a notification's escalation ladder: a channel, when it is due, what
    became of it."""

    id: str
    tenant_id: str
    notification_id: str
    step_no: int
    channel: str
    after_s: int
    due_at: datetime
    status: str
    deliveries: int | None
    reason: str | None
    created_at: datetime
    settled_at: datetime | None
    on_failure: bool  # may fire at once when an earlier channel failed (fallback)
    unknown_after_s: int | None  # ... or stayed unknown this long
    trigger: str | None  # what fired it: time | failed | dead | unknown
    purpose: str | None  # 'snooze': pushes the notification again (flows.push_actions)


class DigestGroup(TypedDict):
    """The unclaimed items of one recipient's digest window, counted."""

    tenant_id: str
    recipient_user_id: str
    digest_key: str
    window_start: datetime
    items: int
    closes_at: datetime
    max_items: int


class Receipt(TypedDict):
    """A channel's word that a notification was displayed, opened, dismissed or clicked
    (telemetry, never a decision)."""

    id: str
    tenant_id: str
    notification_id: str
    user_id: str | None
    kind: str
    channel: str | None
    at: datetime


class IdempotencyRecord(TypedDict):
    """A key's stored answer: the request it was for and the sealed response."""

    tenant_id: str
    principal: str
    key: str
    request_hash: str
    status_code: int
    response: dict[str, Any]  # {"sealed": …} once answered
    created_at: datetime
