"""The schema, in SQLAlchemy Core. Identical on SQLite and PostgreSQL.

Every row carries ``tenant_id``. Invariant 1 (one notification per tenant, recipient, run,
transition version and attention type) is the unique constraint ``uq_notification_once``;
dedupe of inbound signals is the primary key of ``inbound_events``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import TypeDecorator

from runbell.domain import limits

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both databases (SQLite would otherwise hand back naive ones)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; pass an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
Id = sa.String(limits.ID)


def _tenant() -> sa.Column[str]:
    return sa.Column("tenant_id", Id, sa.ForeignKey("tenants.id"), nullable=False)


tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("id", Id, primary_key=True),
    sa.Column("name", sa.String(limits.NAME), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    # The feed cursor counter: bumped once per committing transaction, under the row lock,
    # so feed sequence order equals commit order (no reader can skip a late commit).
    sa.Column("feed_seq", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("feed_pruned_through", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("policy", JSON, nullable=True),
    # {table: days}: this tenant's retention where it differs from the settings' defaults
    sa.Column("retention", JSON, nullable=True),
)
sa.Index("ix_tenants_name", tenants.c.name, unique=True)  # the CLI addresses tenants by name

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", Id, primary_key=True),
    sa.Column("email", sa.String(limits.EMAIL), nullable=False, unique=True),
    sa.Column("name", sa.String(limits.NAME), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

memberships = sa.Table(
    "memberships",
    metadata,
    _tenant(),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime, nullable=True),
    sa.PrimaryKeyConstraint("tenant_id", "user_id"),
    sa.CheckConstraint("role in ('owner','admin','member')", name="role"),
)

user_tokens = sa.Table(
    "user_tokens",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=True),
    sa.Column("revoked_at", UTCDateTime, nullable=True),
)

sources = sa.Table(
    "sources",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("name", sa.String(limits.NAME), nullable=False),
    # api: signals over the HTTP API with a runtime key; webhook: signed provider events
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("mapper", sa.String(32), nullable=True),
    sa.Column("trust", sa.String(16), nullable=False),
    # {"type": "http_json", ...}; header values are sealed with the secret box
    sa.Column("reader", JSON, nullable=True),
    # sealed Standard Webhooks secrets, newest first (several = rotation window)
    sa.Column("secrets", JSON, nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.CheckConstraint("trust in ('authoritative','advisory')", name="trust"),
    sa.CheckConstraint("kind in ('api','webhook')", name="kind"),
)
sa.Index("ix_sources_tenant_name", sources.c.tenant_id, sources.c.name, unique=True)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("name", sa.String(limits.NAME), nullable=True),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("source_id", Id, sa.ForeignKey("sources.id"), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime, nullable=True),
    sa.CheckConstraint("role in ('runtime','admin')", name="role"),
)

runs = sa.Table(
    "runs",
    metadata,
    _tenant(),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("owner_user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("title", sa.String(limits.TITLE), nullable=True),
    sa.Column("kind", sa.String(limits.KIND), nullable=True),
    sa.Column("subject", JSON, nullable=True),
    sa.Column("objective", sa.Text, nullable=True),
    sa.Column("authority", JSON, nullable=True),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("sequence", sa.BigInteger, nullable=True),
    sa.Column("notify_on_complete", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("metadata", JSON, nullable=True),
    sa.Column("details", JSON, nullable=True),  # sensitive: never in feed, logs or channels
    sa.Column("progress", JSON, nullable=True),
    # What the runtime reported about the outcome: iterations, spend, summary, trace_id,
    # links. Not sensitive by contract (it goes into tenant webhooks), unlike details.
    sa.Column("report", JSON, nullable=True),
    sa.Column("stop_reason", sa.String(limits.REASON), nullable=True),
    sa.Column("error", JSON, nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=True),
    sa.Column("finished_at", UTCDateTime, nullable=True),
    sa.Column("last_progress_at", UTCDateTime, nullable=True),
    # Stall detection (flows/stalls.py): seconds without a sign of life before a working
    # run is stalled (NULL: the tenant default; 0: never); when the episode clock started
    # (entered working, last progress, recovery); when it runs out (NULL unless working and
    # not already stalled: the sweep reads only due rows); when the open episode began.
    sa.Column("stall_after_seconds", sa.Integer, nullable=True),
    sa.Column("stall_clock_at", UTCDateTime, nullable=True),
    sa.Column("stall_due_at", UTCDateTime, nullable=True),
    sa.Column("stalled_at", UTCDateTime, nullable=True),
    # Worker fencing and the completion's meaning (issue 10, runbell.flows.operations):
    # the worker that claimed the run last, its epoch (bumped per new worker id), and
    # verified | needs_review | unknown once a completion was judged (None otherwise).
    sa.Column("worker_id", sa.String(limits.WORKER_ID), nullable=True),
    sa.Column("worker_epoch", sa.Integer, nullable=False, server_default="0"),
    sa.Column("outcome", sa.String(16), nullable=True),
    # Whether the run ever declared an operation (migration 0013): a run without a ledger
    # costs its transitions no ledger query.
    sa.Column("has_operations", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.PrimaryKeyConstraint("tenant_id", "run_id"),
)
sa.Index("ix_runs_stall_due", runs.c.stall_due_at)
sa.Index("ix_runs_tenant_state", runs.c.tenant_id, runs.c.state)
sa.Index("ix_runs_tenant_updated", runs.c.tenant_id, runs.c.updated_at)

# Who may see a run besides tenant owners/admins: its owner and the people its authority
# names, and members granted its subject. Kept as rows so feed and inbox filters are one
# indexed join. One row per source (``via``: ``run`` for the run's own owner/authority, a
# subject grant's id for a grant; issue 18 item 4), so a revoke deletes its own rows.
run_access = sa.Table(
    "run_access",
    metadata,
    _tenant(),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("via", Id, nullable=False, server_default="run"),
    sa.PrimaryKeyConstraint("tenant_id", "user_id", "run_id", "via"),
)
# One run's rows (who may answer or amend it): read and rewritten by every run create and
# edit. The primary key serves a user's runs; without this, a run's were a tenant scan.
# ``via`` too: SQLite's planner otherwise takes the primary key for ``via != …`` (it covers
# the query) and scans the tenant again.
sa.Index("ix_run_access_run", run_access.c.tenant_id, run_access.c.run_id, run_access.c.via)

transitions = sa.Table(
    "transitions",
    metadata,
    _tenant(),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # create | state | update
    sa.Column("from_state", sa.String(20), nullable=True),
    sa.Column("to_state", sa.String(20), nullable=False),
    sa.Column("source_id", Id, nullable=True),
    sa.Column("event_id", sa.String(limits.EVENT_ID), nullable=True),
    sa.Column("sequence", sa.BigInteger, nullable=True),
    sa.Column("reason", sa.String(limits.REASON), nullable=True),
    sa.Column("decision", JSON, nullable=True),  # the policy decision, even when suppressed
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("reported_at", UTCDateTime, nullable=True),  # the runtime's own clock, as sent
    sa.PrimaryKeyConstraint("tenant_id", "run_id", "version"),
)
# The retention indexes (here and below): each prune batch walks one from its oldest row.
sa.Index("ix_transitions_tenant_at", transitions.c.tenant_id, transitions.c.at)

inbound_events = sa.Table(
    "inbound_events",
    metadata,
    _tenant(),
    sa.Column("source_id", Id, nullable=False),
    sa.Column("event_id", sa.String(limits.EVENT_ID), nullable=False),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("claimed_state", sa.String(20), nullable=False),
    sa.Column("sequence", sa.BigInteger, nullable=True),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("reason", sa.String(limits.REASON), nullable=True),
    sa.Column("run_version", sa.Integer, nullable=True),
    sa.Column("notification_ids", JSON, nullable=True),
    sa.Column("received_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "source_id", "event_id"),
)
sa.Index(
    "ix_inbound_events_tenant_received", inbound_events.c.tenant_id, inbound_events.c.received_at
)

mismatches = sa.Table(
    "mismatches",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("source_id", Id, nullable=False),
    sa.Column("event_id", sa.String(limits.EVENT_ID), nullable=False),
    sa.Column("claimed", JSON, nullable=False),
    sa.Column("observed", JSON, nullable=True),
    sa.Column("status", sa.String(16), nullable=False),  # open|resolved|superseded|escalated
    sa.Column("checks", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_check_at", UTCDateTime, nullable=True),
    sa.Column("last_error", sa.String(500), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("resolved_at", UTCDateTime, nullable=True),
)
sa.Index("ix_mismatches_due", mismatches.c.status, mismatches.c.next_check_at)
sa.Index("ix_mismatches_run", mismatches.c.tenant_id, mismatches.c.run_id)
sa.Index("ix_mismatches_tenant_created", mismatches.c.tenant_id, mismatches.c.created_at)

notifications = sa.Table(
    "notifications",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("recipient_user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("transition_version", sa.Integer, nullable=False),
    sa.Column("attention_type", sa.String(20), nullable=False),
    sa.Column("urgency", sa.String(20), nullable=False),
    sa.Column("decision", sa.String(16), nullable=False),
    sa.Column("rule_id", sa.String(limits.RULE_ID), nullable=False),
    sa.Column("inputs", JSON, nullable=False),
    sa.Column("summary", sa.String(300), nullable=False),  # neutral: safe on a lock screen
    sa.Column("subject_version", sa.String(limits.SUBJECT_VERSION_STORED), nullable=True),
    sa.Column("input_request_id", sa.String(limits.RUN_ID), nullable=True),
    sa.Column("reason", sa.String(limits.REASON), nullable=True),
    sa.Column("expires_at", UTCDateTime, nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("closed_at", UTCDateTime, nullable=True),
    sa.Column("closed_reason", sa.String(500), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("first_delivered_at", UTCDateTime, nullable=True),
    sa.Column("first_seen_at", UTCDateTime, nullable=True),
    sa.UniqueConstraint(
        "tenant_id",
        "recipient_user_id",
        "run_id",
        "transition_version",
        "attention_type",
        name="uq_notification_once",
    ),
    sa.CheckConstraint(
        "state in ('open','acknowledged','resolved','expired','superseded','revoked')",
        name="state",
    ),
)
sa.Index(
    "ix_notifications_inbox",
    notifications.c.tenant_id,
    notifications.c.recipient_user_id,
    notifications.c.id,
)
sa.Index("ix_notifications_expiry", notifications.c.state, notifications.c.expires_at)
# count_recent (the policy's recent_completions): bounded by its LIMIT, not by history.
sa.Index(
    "ix_notifications_recent",
    notifications.c.tenant_id,
    notifications.c.recipient_user_id,
    notifications.c.attention_type,
    notifications.c.created_at,
)
sa.Index(
    "ix_notifications_run_state",
    notifications.c.tenant_id,
    notifications.c.run_id,
    notifications.c.state,
)
sa.Index("ix_notifications_tenant_closed", notifications.c.tenant_id, notifications.c.closed_at)

deliveries = sa.Table(
    "deliveries",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    # A person's notification (inbox, email, push, chat) or, for tenant webhooks, an event.
    sa.Column("notification_id", Id, sa.ForeignKey("notifications.id"), nullable=True),
    sa.Column("channel", sa.String(16), nullable=False),
    sa.Column("destination", sa.String(500), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=True),
    sa.Column("event_type", sa.String(limits.EVENT_TYPE), nullable=True),
    sa.Column(
        "event_key", sa.String(limits.EVENT_KEY), nullable=True
    ),  # one webhook message per event
    sa.Column("payload", JSON, nullable=True),  # the webhook message body, fixed at creation
    sa.Column("urgency", sa.String(20), nullable=True),
    sa.Column("attempt_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", UTCDateTime, nullable=True),
    sa.Column("lease_until", UTCDateTime, nullable=True),
    sa.Column("claimed_by", sa.String(100), nullable=True),
    sa.Column("last_error", sa.String(500), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("notification_id", "channel", "destination", name="uq_delivery_once"),
    sa.UniqueConstraint(
        "tenant_id", "channel", "destination", "event_key", name="uq_delivery_event_once"
    ),
)
sa.Index("ix_deliveries_due", deliveries.c.status, deliveries.c.next_attempt_at)
sa.Index("ix_deliveries_tenant_status", deliveries.c.tenant_id, deliveries.c.status)
sa.Index("ix_deliveries_tenant_updated", deliveries.c.tenant_id, deliveries.c.updated_at)

delivery_attempts = sa.Table(
    "delivery_attempts",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("delivery_id", Id, sa.ForeignKey("deliveries.id"), nullable=False),
    sa.Column("attempt_no", sa.Integer, nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("finished_at", UTCDateTime, nullable=True),
    sa.Column("outcome", sa.String(20), nullable=False),
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("provider_message_id", sa.String(300), nullable=True),
    sa.Column("duration_ms", sa.Integer, nullable=True),
    sa.Column("error", sa.String(500), nullable=True),
    sa.Column("response_excerpt", sa.String(1000), nullable=True),
)
sa.Index("ix_delivery_attempts_delivery", delivery_attempts.c.delivery_id)
sa.Index(
    "ix_delivery_attempts_tenant_started",
    delivery_attempts.c.tenant_id,
    delivery_attempts.c.started_at,
)

feed_events = sa.Table(
    "feed_events",
    metadata,
    _tenant(),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("type", sa.String(limits.EVENT_TYPE), nullable=False),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=True),
    sa.Column("notification_id", Id, nullable=True),
    # Audience: NULL = a run event (visible to whoever may see the run); else one user.
    sa.Column("user_id", Id, nullable=True),
    sa.Column("data", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "seq"),
)
sa.Index("ix_feed_events_created", feed_events.c.tenant_id, feed_events.c.created_at)
sa.Index("ix_feed_events_notification", feed_events.c.notification_id)

preferences = sa.Table(
    "preferences",
    metadata,
    _tenant(),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    # {"email": {"urgencies": [...], "given_at": ..., "how": ...}, ...}
    sa.Column("consent", JSON, nullable=False),
    sa.Column("quiet_hours", JSON, nullable=True),
    sa.Column("timezone", sa.String(limits.TIMEZONE), nullable=False, server_default="UTC"),
    sa.Column("locale", sa.String(limits.LOCALE), nullable=False, server_default="en"),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "user_id"),
)

webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("url", sa.String(limits.URL), nullable=False),
    sa.Column("description", sa.String(limits.DESCRIPTION), nullable=True),
    sa.Column("event_types", JSON, nullable=False),  # [] = every event type
    # [{"sealed": …, "created_at": …, "expires_at": … | None}], newest first
    sa.Column("secrets", JSON, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # enabled | disabled
    sa.Column("disabled_reason", sa.String(500), nullable=True),
    sa.Column("dead_streak", sa.Integer, nullable=False, server_default="0"),
    sa.Column("rate_limit_per_s", sa.Float, nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)
sa.Index("ix_webhook_endpoints_tenant", webhook_endpoints.c.tenant_id)

push_subscriptions = sa.Table(
    "push_subscriptions",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("endpoint", sa.String(limits.URL), nullable=False),
    sa.Column("p256dh", sa.String(limits.P256DH), nullable=False),
    sa.Column("auth", sa.String(limits.PUSH_AUTH), nullable=False),
    sa.Column("user_agent", sa.String(limits.USER_AGENT), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("last_success_at", UTCDateTime, nullable=True),
)
sa.Index("ix_push_subscriptions_user", push_subscriptions.c.tenant_id, push_subscriptions.c.user_id)
sa.Index(
    "ix_push_subscriptions_endpoint",
    push_subscriptions.c.tenant_id,
    push_subscriptions.c.endpoint,
    unique=True,
)

chat_destinations = sa.Table(
    "chat_destinations",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=True),  # NULL: tenant-wide
    sa.Column("url_sealed", sa.Text, nullable=False),  # Apprise URLs carry tokens
    sa.Column(
        "url_hint", sa.String(limits.CHAT_URL_HINT), nullable=False
    ),  # scheme and host, for display
    sa.Column("label", sa.String(limits.CHAT_LABEL), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
)
sa.Index("ix_chat_destinations_user", chat_destinations.c.tenant_id, chat_destinations.c.user_id)

operator_events = sa.Table(
    "operator_events",
    metadata,
    sa.Column("id", Id, primary_key=True),
    sa.Column("tenant_id", Id, nullable=True),
    sa.Column("kind", sa.String(50), nullable=False),
    sa.Column("detail", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)
sa.Index("ix_operator_events_created", operator_events.c.created_at)

# Outbound rate-limit buckets shared by all workers (runbell.store.rate_limits): the
# theoretical arrival time of the next message per key ("tenant:…", "endpoint:…").
rate_limits = sa.Table(
    "rate_limits",
    metadata,
    sa.Column("key", sa.String(100), primary_key=True),
    sa.Column("tat", UTCDateTime, nullable=True),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

# Failed authentication shared by every API process (runbell.store.auth_failures): per key
# ("bearer:addr:…", "bearer:cred:rbk_Ab3d", "webhook:source:…") the window's start and count.
auth_failures = sa.Table(
    "auth_failures",
    metadata,
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("window_start", UTCDateTime, nullable=False),
    sa.Column("failures", sa.Integer, nullable=False),
)

# --- people act: input requests, responses, receipts, web sessions (issue 4) --------

input_requests = sa.Table(
    "input_requests",
    metadata,
    _tenant(),
    sa.Column("id", sa.String(limits.RUN_ID), nullable=False),  # the runtime's input_request_id
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # approval | choice | text
    sa.Column("summary", sa.String(limits.REQUEST_SUMMARY), nullable=False),  # safe after sign-in
    sa.Column("details", JSON, nullable=True),  # sensitive: arguments, evidence, risk
    sa.Column("options", JSON, nullable=True),  # [{"id", "label"}] for choice
    sa.Column("blocks_work", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("expires_at", UTCDateTime, nullable=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("run_version", sa.Integer, nullable=False),  # the run version it opened at
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("request_hash", sa.String(64), nullable=False),  # idempotent re-open
    sa.Column("superseded_by", sa.String(limits.RUN_ID), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("closed_at", UTCDateTime, nullable=True),
    sa.PrimaryKeyConstraint("tenant_id", "id"),
    sa.CheckConstraint(
        "state in ('pending','answered','expired','cancelled','superseded')", name="state"
    ),
)
sa.Index(
    "ix_input_requests_run",
    input_requests.c.tenant_id,
    input_requests.c.run_id,
    input_requests.c.state,
)
sa.Index("ix_input_requests_expiry", input_requests.c.state, input_requests.c.expires_at)

# The one committed answer per request: the primary key is the request.
responses = sa.Table(
    "responses",
    metadata,
    _tenant(),
    sa.Column("input_request_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("id", Id, nullable=False, unique=True),
    # NULL: a machine answered (a callback URL, a key with input_requests.answer): ``actor``
    # says which (issue 19 item 4).
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=True),
    sa.Column("decision", sa.String(16), nullable=False),  # approve | reject | answer
    sa.Column("value", JSON, nullable=True),
    sa.Column("expected_run_version", sa.Integer, nullable=False),
    sa.Column("expected_request_version", sa.Integer, nullable=False),
    sa.Column("idempotency_key", sa.String(limits.IDEMPOTENCY_KEY), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "input_request_id"),
)

# Idempotency-Key records: the same key and body replay the original answer. ``response``
# is ``{"sealed": <Fernet token of the exact body bytes>}`` (answers stored before that
# were the plain body object); ``status_code`` 0 while its transaction is still open.
idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    _tenant(),
    sa.Column("principal", sa.String(100), nullable=False),  # user or key id
    sa.Column("key", sa.String(limits.IDEMPOTENCY_KEY), nullable=False),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("status_code", sa.Integer, nullable=False),
    sa.Column("response", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "principal", "key"),
)
sa.Index(
    "ix_idempotency_keys_tenant_created",
    idempotency_keys.c.tenant_id,
    idempotency_keys.c.created_at,
)

# Channel telemetry, kept apart from decisions (invariant 10).
receipts = sa.Table(
    "receipts",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("notification_id", Id, nullable=False),
    sa.Column("user_id", Id, nullable=True),
    sa.Column("kind", sa.String(16), nullable=False),  # displayed | opened | dismissed | clicked
    sa.Column("channel", sa.String(16), nullable=True),
    sa.Column("at", UTCDateTime, nullable=False),
)
sa.Index("ix_receipts_notification", receipts.c.notification_id)
sa.Index("ix_receipts_tenant_at", receipts.c.tenant_id, receipts.c.at)

login_links = sa.Table(
    "login_links",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("used_at", UTCDateTime, nullable=True),
)

web_sessions = sa.Table(
    "web_sessions",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("csrf_token", sa.String(64), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime, nullable=True),
)

kv = sa.Table(
    "kv",
    metadata,
    sa.Column("key", sa.String(100), primary_key=True),
    sa.Column("value", JSON, nullable=False),
)

# Who is watching the live UI, shared by every API process (runtime/presence.py). One row per
# (tenant, user, holding process), refreshed by that process's heartbeat; a row past
# expires_at is ignored (its process died) and deleted by the next heartbeat of any process.
# No index on expires_at: the table holds one row per viewer and process, and an unindexed
# expires_at keeps the heartbeat's updates HOT (no index writes, see docs/operations.md).
presence = sa.Table(
    "presence",
    metadata,
    sa.Column("tenant_id", Id, primary_key=True),
    sa.Column("user_id", Id, primary_key=True),
    sa.Column("holder", sa.String(64), primary_key=True),
    sa.Column("expires_at", UTCDateTime, nullable=False),
)

# --- the runs overview (issue 10): migration 0012_overview --------------------------------
# "finished": a tenant's terminal runs, most recent first, paged.
sa.Index("ix_runs_tenant_finished", runs.c.tenant_id, runs.c.finished_at)
# "needs review": a tenant's notifications of one attention type in one state.
sa.Index(
    "ix_notifications_tenant_attention",
    notifications.c.tenant_id,
    notifications.c.attention_type,
    notifications.c.state,
)

# Digests (migration 0011): attention a rule decided as ``digest``, collected per recipient
# and key in the transaction of its transition, then sent as ONE ``digest`` notification
# when its (epoch-aligned) window closes or it reaches its maximum size. The digest's
# identity is unique, and its items are claimed in the transaction that creates it, so two
# flushers (or a flush retried after a crash) make it exactly once.
digest_items = sa.Table(
    "digest_items",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("recipient_user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("digest_key", sa.String(limits.DIGEST_KEY), nullable=False),
    sa.Column("window_start", UTCDateTime, nullable=False),
    sa.Column("closes_at", UTCDateTime, nullable=False),
    sa.Column("max_items", sa.Integer, nullable=False),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("transition_version", sa.Integer, nullable=False),
    sa.Column("attention_type", sa.String(20), nullable=False),
    sa.Column("urgency", sa.String(20), nullable=False),
    sa.Column("rule_id", sa.String(limits.RULE_ID), nullable=False),
    sa.Column("notification_id", Id, nullable=True),  # the item's own inbox notification
    sa.Column("digest_id", Id, nullable=True),  # set when a digest claims the item
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint(
        "tenant_id",
        "recipient_user_id",
        "run_id",
        "transition_version",
        "attention_type",
        name="uq_digest_item_once",
    ),
)
# The flush sweep reads unclaimed items only (digest_id IS NULL) by when they close.
sa.Index("ix_digest_items_due", digest_items.c.digest_id, digest_items.c.closes_at)
sa.Index("ix_digest_items_digest", digest_items.c.tenant_id, digest_items.c.digest_id)

digests = sa.Table(
    "digests",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("recipient_user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("digest_key", sa.String(limits.DIGEST_KEY), nullable=False),
    sa.Column("window_start", UTCDateTime, nullable=False),
    sa.Column("part", sa.Integer, nullable=False),
    sa.Column("window_end", UTCDateTime, nullable=False),
    sa.Column("ordinal", sa.Integer, nullable=False),  # its notification's transition_version
    sa.Column("notification_id", Id, nullable=False),
    sa.Column("item_count", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint(
        "tenant_id",
        "recipient_user_id",
        "digest_key",
        "window_start",
        "part",
        name="uq_digest_once",
    ),
)
sa.Index("ix_digests_notification", digests.c.tenant_id, digests.c.notification_id)
sa.Index("ix_digests_tenant_created", digests.c.tenant_id, digests.c.created_at)

# --- cancellation as a request, amendments by other people (issue 10) ---------------
#
# The run's cancellation request (who asked, when, why) and, once it is cancelled, the
# summary of what was kept and what stays uncertain (flows.cancel_outcome). Columns of
# ``runs``, appended here so the table's own block stays as it was.
runs.append_column(sa.Column("cancel_requested_at", UTCDateTime, nullable=True))
# The person who asked; NULL with cancel_requested_at set: the runtime (an API key) asked.
runs.append_column(sa.Column("cancel_requested_by", Id, nullable=True))
runs.append_column(sa.Column("cancel_reason", sa.String(limits.REASON), nullable=True))
runs.append_column(sa.Column("cancel_summary", JSON, nullable=True))

# ``run``: the runtime's own question (it blocks the run); ``amendment``: a proposed change
# put to the run's owner (it never blocks the run; flows.amendments).
input_requests.append_column(
    sa.Column("purpose", sa.String(16), nullable=False, server_default="run")
)

# A change to a run proposed by someone else; it becomes an input request to the owner.
amendments = sa.Table(
    "amendments",
    metadata,
    _tenant(),
    sa.Column("id", Id, nullable=False),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("input_request_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("proposed_by", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("changes", JSON, nullable=True),  # {"objective": …, "title": …}
    sa.Column("base", JSON, nullable=True),  # those fields' values when it was proposed
    sa.Column("run_version", sa.Integer, nullable=False),  # the run version it was made on
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("decided_by", Id, nullable=True),
    sa.Column("decided_at", UTCDateTime, nullable=True),
    sa.Column("applied_version", sa.Integer, nullable=True),  # the run version it made
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "id"),
    sa.CheckConstraint("state in ('pending','approved','rejected','cancelled')", name="state"),
)
sa.Index("ix_amendments_run", amendments.c.tenant_id, amendments.c.run_id, amendments.c.state)
sa.Index("ix_amendments_tenant_created", amendments.c.tenant_id, amendments.c.created_at)

# --- stalls and escalation (issue 10) -------------------------------------------------

# One row per rung of a notification's escalation ladder, written with the notification;
# the escalation sweep fires due pending rows, and every close of the notification
# cancels the pending ones (flows/attention.close_notification). Part of the notification's
# trail, so it lives as long as the notification: retention's notification prune deletes
# its steps with it (ON DELETE CASCADE; a closed notification has no pending step).
escalation_steps = sa.Table(
    "escalation_steps",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column(
        "notification_id",
        Id,
        sa.ForeignKey("notifications.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("step_no", sa.Integer, nullable=False),
    sa.Column("channel", sa.String(16), nullable=False),
    sa.Column("after_s", sa.Integer, nullable=False),
    sa.Column("due_at", UTCDateTime, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # pending | fired | cancelled
    sa.Column("deliveries", sa.Integer, nullable=True),  # rows queued when it fired
    sa.Column("reason", sa.String(limits.REASON), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("settled_at", UTCDateTime, nullable=True),
    # Fallback on failure (migration 0021, flows.fallback): this rung may fire at once when
    # an earlier channel failed for good, or stayed unknown ``unknown_after_s``; ``trigger``
    # says what fired it (time | failed | dead | unknown).
    sa.Column("on_failure", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("unknown_after_s", sa.Integer, nullable=True),
    sa.Column("trigger", sa.String(16), nullable=True),
    sa.UniqueConstraint("notification_id", "step_no", name="uq_escalation_step_once"),
    sa.CheckConstraint("status in ('pending','fired','cancelled')", name="status"),
)
sa.Index("ix_escalation_steps_due", escalation_steps.c.status, escalation_steps.c.due_at)
sa.Index(
    "ix_escalation_steps_tenant_created",
    escalation_steps.c.tenant_id,
    escalation_steps.c.created_at,
)

# --- the operations ledger (issue 10, runbell.flows.operations) ----------------------

# One intended effect of a run under its stable operation_id (DESIGN §3, invariant 15).
# ``history`` is every move with its evidence; ``details`` is sensitive (never in the feed,
# webhooks, logs or channels); ``epoch`` is the worker epoch that last moved it.
operations = sa.Table(
    "operations",
    metadata,
    _tenant(),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("operation_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("position", sa.Integer, nullable=False),  # declaration order within the run
    sa.Column("target_type", sa.String(limits.TARGET_TYPE), nullable=False),
    sa.Column("target_id", sa.String(limits.TARGET_ID), nullable=False),
    sa.Column("target_version", sa.String(limits.TARGET_VERSION), nullable=True),
    sa.Column(
        "intent", sa.String(limits.PUBLIC_LINE), nullable=False
    ),  # public: one short safe line
    sa.Column("details", JSON, nullable=True),
    sa.Column(
        "idempotency_key", sa.String(limits.IDEMPOTENCY_KEY), nullable=True
    ),  # the destination's
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("epoch", sa.Integer, nullable=True),
    sa.Column("evidence", JSON, nullable=True),  # the latest move's
    sa.Column("history", JSON, nullable=False),
    sa.Column("body_hash", sa.String(64), nullable=False),  # idempotent re-declare
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "run_id", "operation_id"),
    sa.CheckConstraint(
        "state in ('planned','sent','confirmed','conflict','failed','uncertain','absent',"
        "'unresolved','not_started')",
        name="state",
    ),
)
# "Operation X may already have landed": new work on a target is checked against this.
sa.Index(
    "ix_operations_target",
    operations.c.tenant_id,
    operations.c.target_type,
    operations.c.target_id,
    operations.c.state,
)

# --- jobs: what counts as done, links, dependencies (issue 18 item 5) ----------------
#
# ``done_when``: {"text", "operations": [operation ids]}: what counts as done, in words,
# and the operations a verified completion needs *confirmed* (flows.completion).
# ``depends_on_*``: the other run's proposal (an input request, at a request version) this
# run's work assumes; its state is read when the run is shown (flows.dependencies), and the
# index finds the runs to tell when that request is decided, cancelled or replaced.
runs.append_column(sa.Column("done_when", JSON, nullable=True))
runs.append_column(sa.Column("depends_on_run", sa.String(limits.RUN_ID), nullable=True))
runs.append_column(sa.Column("depends_on_request", sa.String(limits.RUN_ID), nullable=True))
runs.append_column(sa.Column("depends_on_version", sa.Integer, nullable=True))
sa.Index("ix_runs_depends_on", runs.c.tenant_id, runs.c.depends_on_request)

# The conversations, messages, tickets… a run is linked to (display links, never
# fetched). ``GET /v1/runs?link=kind:id`` reads ix_run_links_target: every job of one
# conversation in one indexed query.
run_links = sa.Table(
    "run_links",
    metadata,
    _tenant(),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("kind", sa.String(limits.LINK_KIND), nullable=False),
    sa.Column("link_id", sa.String(limits.LINK_ID), nullable=False),
    sa.Column("url", sa.String(limits.URL), nullable=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "run_id", "kind", "link_id"),
)
sa.Index("ix_run_links_target", run_links.c.tenant_id, run_links.c.kind, run_links.c.link_id)
# --- scheduled work (issue 18 item 6, runbell.flows.schedule_*): migration 0020_schedules ---

# A standing instruction to start work on a cadence: who owns it, the authority that
# justifies the runs it starts (a run's ``authority`` shape, versioned: every change bumps
# ``authority_version``), its cron cadence, and how runs start. ``record_only``: the
# runtime starts runs itself and names the schedule; ``webhook``: the scheduler sweep fires
# a signed request at ``url`` when an occurrence is due (``next_fire_at``; NULL unless an
# active webhook schedule). ``secret`` is sealed with the secret box.
schedules = sa.Table(
    "schedules",
    metadata,
    _tenant(),
    sa.Column("id", Id, nullable=False),
    sa.Column("name", sa.String(limits.TITLE), nullable=True),
    sa.Column("owner_user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("authority", JSON, nullable=True),
    sa.Column("authority_version", sa.Integer, nullable=False),
    sa.Column("cadence", sa.String(200), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("url", sa.String(limits.URL), nullable=True),
    sa.Column("secret", sa.Text, nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("instruction_version", sa.Integer, nullable=False),
    sa.Column("next_fire_at", UTCDateTime, nullable=True),
    sa.Column("state_reason", sa.String(limits.REASON), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime, nullable=True),
    sa.PrimaryKeyConstraint("tenant_id", "id"),
    sa.CheckConstraint("mode in ('record_only','webhook')", name="mode"),
    sa.CheckConstraint("state in ('active','paused','revoked')", name="state"),
)
sa.Index("ix_schedules_next_fire_at", schedules.c.next_fire_at)
sa.Index("ix_schedules_tenant_created", schedules.c.tenant_id, schedules.c.created_at)

# Every version of a schedule's standing instruction, kept: a run records the version in
# force when it started.
schedule_instructions = sa.Table(
    "schedule_instructions",
    metadata,
    _tenant(),
    sa.Column("schedule_id", Id, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("created_by", JSON, nullable=True),  # Principal.actor(): never a secret
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "schedule_id", "version"),
)

# One row per fired occurrence of a webhook schedule: the primary key is the occurrence,
# so two sweepers (or a sweep retried) record it at most once, and it is recorded before
# anything is sent. ``webhook_id`` is the Standard Webhooks id the receiver dedupes on.
schedule_firings = sa.Table(
    "schedule_firings",
    metadata,
    _tenant(),
    sa.Column("schedule_id", Id, nullable=False),
    sa.Column("due_at", UTCDateTime, nullable=False),
    sa.Column("webhook_id", sa.String(100), nullable=False),
    sa.Column("instruction_version", sa.Integer, nullable=False),
    sa.Column("authority_version", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # sending | sent | failed
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("error", sa.String(limits.REASON), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("settled_at", UTCDateTime, nullable=True),
    sa.PrimaryKeyConstraint("tenant_id", "schedule_id", "due_at"),
    sa.CheckConstraint("status in ('sending','sent','failed')", name="status"),
)
# Retention walks a tenant's firings oldest first (store.retention): migration
# 0022_schedule_pages.
sa.Index(
    "ix_schedule_firings_tenant_created",
    schedule_firings.c.tenant_id,
    schedule_firings.c.created_at,
)

# A run started under a schedule: which one, the instruction version and the authority in
# force when it started ({"version": n, "authority": {...}}); the run view flags it when
# that authority was later revoked or changed.
runs.append_column(sa.Column("schedule_id", Id, nullable=True))
runs.append_column(sa.Column("schedule_instruction_version", sa.Integer, nullable=True))
runs.append_column(sa.Column("schedule_authority", JSON, nullable=True))
# A schedule's page lists the runs it started, newest first (migration 0022_schedule_pages).
sa.Index("ix_runs_tenant_schedule", runs.c.tenant_id, runs.c.schedule_id, runs.c.created_at)
# --- scoped credentials and delegated tokens (issue 18 item 1, runbell.flows.delegations)

# A runtime key's scope (domain.capabilities): NULL capabilities and run_patterns mean
# every capability and every run (keys made before scopes existed keep working);
# ``own_runs`` limits it to the runs it created (``runs.created_by_credential``).
api_keys.append_column(sa.Column("capabilities", JSON, nullable=True))
api_keys.append_column(sa.Column("run_patterns", JSON, nullable=True))
api_keys.append_column(sa.Column("own_runs", sa.Boolean, nullable=False, server_default=sa.false()))
# The credential (key or delegated token id) that created the run; NULL for runs created
# before this was recorded, and for runs made outside the API (demo, CLI start).
runs.append_column(sa.Column("created_by_credential", Id, nullable=True))

# A token a runtime key minted for a helper: bound to one run, a subset of the key's
# capabilities, an expiry. Only the hash of its secret is kept. It stops working when it
# expires, when it is revoked, and when the key that minted it is revoked.
delegated_tokens = sa.Table(
    "delegated_tokens",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("key_id", Id, sa.ForeignKey("api_keys.id"), nullable=False),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("name", sa.String(limits.NAME), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("capabilities", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime, nullable=True),
)
sa.Index(
    "ix_delegated_tokens_tenant_run",
    delegated_tokens.c.tenant_id,
    delegated_tokens.c.run_id,
)
# --- people: viewers, approvers, amenders; subject grants (issue 18 item 4) ----------
#
# A run_access row says a member may see the run; these say what else: answer its
# requests (``may_answer``), propose amendments to it (``may_amend``). Old rows were the
# owner and ``authority.users``, who could do both: the defaults keep that.
run_access.append_column(
    sa.Column("may_answer", sa.Boolean, nullable=False, server_default=sa.true())
)
run_access.append_column(
    sa.Column("may_amend", sa.Boolean, nullable=False, server_default=sa.true())
)

# An admin's grant of a subject (the run's ``subject.type`` and ``subject.id``, any
# version) to a member in a role: every run of that subject, existing and future, gets a
# run_access row for the member (store.access materializes it).
subject_grants = sa.Table(
    "subject_grants",
    metadata,
    _tenant(),
    sa.Column("id", Id, nullable=False),
    sa.Column("user_id", Id, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("subject_type", sa.String(100), nullable=False),
    sa.Column("subject_id", sa.String(200), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),  # viewer | approver | amender
    sa.Column("created_by", Id, nullable=True),  # the admin (NULL: an admin API key)
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "id"),
    sa.UniqueConstraint(
        "tenant_id", "subject_type", "subject_id", "user_id", "role", name="uq_subject_grant"
    ),
    sa.CheckConstraint("role in ('viewer','approver','amender')", name="role"),
)
sa.Index("ix_subject_grants_user", subject_grants.c.tenant_id, subject_grants.c.user_id)

# Who may answer this request (user ids), when the runtime named them; NULL: the run's
# approvers.
input_requests.append_column(sa.Column("approvers", JSON, nullable=True))
# --- completion owner, in-flight blocking and the per-step trace (issue 18 items 2, 3, 8) --
#
# The run's completion owner (flows.ownership): the credential behind the worker that may
# report the run completed and settle its operations; the worker is ``runs.worker_id``.
# NULL: a run made before owners were recorded (anyone of the tenant acts, as before).
runs.append_column(sa.Column("owner_credential_id", Id, nullable=True))
# Who or what caused each step ({kind, credential_id?, user_id?, worker_id?, source_id?,
# role?}; never a secret). NULL on rows written before the trace existed.
transitions.append_column(sa.Column("actor", JSON, nullable=True))
responses.append_column(sa.Column("actor", JSON, nullable=True))
amendments.append_column(sa.Column("actor", JSON, nullable=True))
# Findings a non-owner reported on an operation ([{finding, evidence, actor, at}]): on the
# ledger, never its state. And the owner's explicit supersede ({reason, actor, at}): the
# operation stops blocking new work on its target (it keeps its state: nobody knows more).
operations.append_column(sa.Column("reports", JSON, nullable=True))
operations.append_column(sa.Column("superseded", JSON, nullable=True))

# One row per change of a run's completion owner (a claim naming the first worker, or a
# takeover), with who did it and whether the previous owner may still act.
owner_changes = sa.Table(
    "owner_changes",
    metadata,
    _tenant(),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),  # 1, 2, … per run
    sa.Column("kind", sa.String(16), nullable=False),  # claim | takeover
    sa.Column("from_credential_id", Id, nullable=True),
    sa.Column("from_worker_id", sa.String(limits.WORKER_ID), nullable=True),
    sa.Column("to_credential_id", Id, nullable=True),
    sa.Column("to_worker_id", sa.String(limits.WORKER_ID), nullable=False),
    sa.Column("epoch", sa.Integer, nullable=False),
    sa.Column("previous_may_still_act", sa.Boolean, nullable=False),
    sa.Column("reason", sa.String(limits.REASON), nullable=True),
    sa.Column("actor", JSON, nullable=True),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "run_id", "seq"),
    sa.CheckConstraint("kind in ('claim','takeover')", name="kind"),
)
sa.Index("ix_owner_changes_tenant_at", owner_changes.c.tenant_id, owner_changes.c.at)

# --- throttles (issue 19 item 5) ------------------------------------------------------
#
# How many notifications a throttled rule decided for one recipient and one key value in
# one epoch-aligned window (domain.notify_throttle). Counted by an upsert that returns the
# new count, so two workers can never both see themselves under the limit; rows of closed
# windows are pruned by the digest sweep (flows.pacing.prune).
throttle_counts = sa.Table(
    "throttle_counts",
    metadata,
    _tenant(),
    sa.Column("recipient_user_id", Id, nullable=False),
    sa.Column("rule_id", sa.String(limits.RULE_ID), nullable=False),
    sa.Column("throttle_key", sa.String(20), nullable=False),  # run | agent | kind | …
    sa.Column("key_value", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("window_start", UTCDateTime, nullable=False),
    sa.Column("window_end", UTCDateTime, nullable=False),
    sa.Column("hits", sa.Integer, nullable=False),
    sa.PrimaryKeyConstraint(
        "tenant_id", "recipient_user_id", "rule_id", "throttle_key", "key_value", "window_start"
    ),
)
sa.Index("ix_throttle_counts_window_end", throttle_counts.c.window_end)

# --- what a request will do (issue 19 item 1) -------------------------------------------
#
# An input request's typed action (runbell.domain.actions: a shell command, a file write or
# edit, a web fetch, a tool call) and the risks flagged in it when it was opened. Sensitive
# like details: never in the feed, logs or channels. NULL on requests without an action.
input_requests.append_column(sa.Column("action", JSON, nullable=True))
input_requests.append_column(sa.Column("risks", JSON, nullable=True))

# --- the inbox's groups (issue 19 item 7, migration 0023) ----------------------------
#
# Which digest folds a notification: the inbox lists an open digest as one entry and hides
# the notifications it folds (store.inbox).
sa.Index("ix_digest_items_notification", digest_items.c.tenant_id, digest_items.c.notification_id)
# --- edit before approving; machines that answer (issue 19 items 3, 4) -------------------
#
# A request's editable value ({schema, value}, domain.editable): the person may change it
# and approve the edited version; the response says whether it was edited.
input_requests.append_column(sa.Column("editable", JSON, nullable=True))
responses.append_column(sa.Column("edited", sa.Boolean, nullable=False, server_default=sa.false()))
# Whether machines (callback URLs, keys with input_requests.answer) may answer this
# tenant's requests.
tenants.append_column(
    sa.Column("machine_answers", sa.Boolean, nullable=False, server_default=sa.true())
)

# A pre-signed callback URL: answers one request once, at the versions it was minted at,
# until the request expires; only the hash of its token is kept.
callback_urls = sa.Table(
    "callback_urls",
    metadata,
    sa.Column("id", Id, primary_key=True),
    _tenant(),
    sa.Column("input_request_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("run_id", sa.String(limits.RUN_ID), nullable=False),
    sa.Column("run_version", sa.Integer, nullable=False),
    sa.Column("request_version", sa.Integer, nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("decisions", JSON, nullable=False),  # ["approve", "reject"] or a subset
    sa.Column("created_by", JSON, nullable=True),  # the actor that minted it
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=True),  # the request's
    sa.Column("used_at", UTCDateTime, nullable=True),
)
sa.Index(
    "ix_callback_urls_request",
    callback_urls.c.tenant_id,
    callback_urls.c.input_request_id,
)
# --- acting from a web push (issue 19 item 2, runbell.flows.push_actions) --------------

# A snooze rung (``purpose`` = 'snooze'): fired by the escalation sweep like any rung, it
# pushes the notification again to the person's browsers instead of adding a channel.
escalation_steps.append_column(sa.Column("purpose", sa.String(16), nullable=True))

# One row per push-action token used: only its hash (the token is the action's whole
# credential, made deterministically from its delivery: nothing is stored when it is made).
# The primary key is what makes a token single use; rows go once the token has expired.
push_action_uses = sa.Table(
    "push_action_uses",
    metadata,
    sa.Column("token_hash", sa.String(64), primary_key=True),
    _tenant(),
    sa.Column("notification_id", Id, nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("used_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
)
sa.Index("ix_push_action_uses_expires", push_action_uses.c.expires_at)
