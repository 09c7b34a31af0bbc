"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kv",
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column(
            "value", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_kv")),
    )
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("feed_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("feed_pruned_through", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column(
            "policy", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
    )
    op.create_table(
        "feed_events",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=50), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=True),
        sa.Column("notification_id", sa.String(length=64), nullable=True),
        sa.Column("user_id", sa.String(length=64), nullable=True),
        sa.Column("data", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_feed_events_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "seq", name=op.f("pk_feed_events")),
    )
    with op.batch_alter_table("feed_events", schema=None) as batch_op:
        batch_op.create_index("ix_feed_events_created", ["tenant_id", "created_at"], unique=False)
        batch_op.create_index("ix_feed_events_notification", ["notification_id"], unique=False)

    op.create_table(
        "inbound_events",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("source_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("claimed_state", sa.String(length=20), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column("run_version", sa.Integer(), nullable=True),
        sa.Column(
            "notification_ids",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=True,
        ),
        sa.Column("received_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_inbound_events_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "source_id", "event_id", name=op.f("pk_inbound_events")
        ),
    )
    with op.batch_alter_table("inbound_events", schema=None) as batch_op:
        batch_op.create_index("ix_inbound_events_received", ["received_at"], unique=False)

    op.create_table(
        "memberships",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.CheckConstraint("role in ('owner','admin','member')", name=op.f("ck_memberships_role")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_memberships_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_memberships_user_id_users")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", name=op.f("pk_memberships")),
    )
    op.create_table(
        "mismatches",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("source_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=False),
        sa.Column(
            "claimed", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column(
            "observed", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("checks", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_check_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("resolved_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_mismatches_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mismatches")),
    )
    with op.batch_alter_table("mismatches", schema=None) as batch_op:
        batch_op.create_index("ix_mismatches_due", ["status", "next_check_at"], unique=False)
        batch_op.create_index("ix_mismatches_run", ["tenant_id", "run_id"], unique=False)

    op.create_table(
        "notifications",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("recipient_user_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("transition_version", sa.Integer(), nullable=False),
        sa.Column("attention_type", sa.String(length=20), nullable=False),
        sa.Column("urgency", sa.String(length=20), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("rule_id", sa.String(length=200), nullable=False),
        sa.Column(
            "inputs", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("summary", sa.String(length=300), nullable=False),
        sa.Column("subject_version", sa.String(length=200), nullable=True),
        sa.Column("input_request_id", sa.String(length=200), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column("expires_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("closed_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("closed_reason", sa.String(length=500), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("first_delivered_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("first_seen_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.CheckConstraint(
            "state in ('open','acknowledged','resolved','expired','superseded','revoked')",
            name=op.f("ck_notifications_state"),
        ),
        sa.ForeignKeyConstraint(
            ["recipient_user_id"],
            ["users.id"],
            name=op.f("fk_notifications_recipient_user_id_users"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_notifications_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
        sa.UniqueConstraint(
            "tenant_id",
            "recipient_user_id",
            "run_id",
            "transition_version",
            "attention_type",
            name="uq_notification_once",
        ),
    )
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.create_index(
            "ix_notifications_inbox", ["tenant_id", "recipient_user_id", "id"], unique=False
        )
        batch_op.create_index(
            "ix_notifications_run_state", ["tenant_id", "run_id", "state"], unique=False
        )

    op.create_table(
        "preferences",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column(
            "consent", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column(
            "quiet_hours", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column("timezone", sa.String(length=64), server_default="UTC", nullable=False),
        sa.Column("locale", sa.String(length=32), server_default="en", nullable=False),
        sa.Column("updated_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_preferences_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_preferences_user_id_users")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", name=op.f("pk_preferences")),
    )
    op.create_table(
        "run_access",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_run_access_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_run_access_user_id_users")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", "run_id", name=op.f("pk_run_access")),
    )
    op.create_table(
        "runs",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("owner_user_id", sa.String(length=64), nullable=False),
        sa.Column("title", sa.String(length=500), nullable=True),
        sa.Column("kind", sa.String(length=100), nullable=True),
        sa.Column(
            "subject", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column("objective", sa.Text(), nullable=True),
        sa.Column(
            "authority", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=True),
        sa.Column("notify_on_complete", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column(
            "metadata", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column(
            "details", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column(
            "progress", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column("stop_reason", sa.String(length=500), nullable=True),
        sa.Column("error", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("updated_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("started_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("finished_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("last_progress_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["owner_user_id"], ["users.id"], name=op.f("fk_runs_owner_user_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_runs_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_tenant_state", ["tenant_id", "state"], unique=False)
        batch_op.create_index("ix_runs_tenant_updated", ["tenant_id", "updated_at"], unique=False)

    op.create_table(
        "sources",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("mapper", sa.String(length=32), nullable=True),
        sa.Column("trust", sa.String(length=16), nullable=False),
        sa.Column(
            "reader", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column(
            "secrets", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.CheckConstraint("kind in ('api','webhook')", name=op.f("ck_sources_kind")),
        sa.CheckConstraint("trust in ('authoritative','advisory')", name=op.f("ck_sources_trust")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_sources_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sources")),
    )
    with op.batch_alter_table("sources", schema=None) as batch_op:
        batch_op.create_index("ix_sources_tenant_name", ["tenant_id", "name"], unique=True)

    op.create_table(
        "transitions",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("from_state", sa.String(length=20), nullable=True),
        sa.Column("to_state", sa.String(length=20), nullable=False),
        sa.Column("source_id", sa.String(length=64), nullable=True),
        sa.Column("event_id", sa.String(length=200), nullable=True),
        sa.Column("sequence", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column(
            "decision", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column("at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_transitions_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", "version", name=op.f("pk_transitions")),
    )
    op.create_table(
        "user_tokens",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("expires_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("revoked_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_user_tokens_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_user_tokens_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_user_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_user_tokens_token_hash")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("source_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.CheckConstraint("role in ('runtime','admin')", name=op.f("ck_api_keys_role")),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name=op.f("fk_api_keys_source_id_sources")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_api_keys_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "deliveries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("notification_id", sa.String(length=64), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("destination", sa.String(length=500), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempt_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("lease_until", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("claimed_by", sa.String(length=100), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("updated_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["notification_id"],
            ["notifications.id"],
            name=op.f("fk_deliveries_notification_id_notifications"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_deliveries_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deliveries")),
        sa.UniqueConstraint("notification_id", "channel", "destination", name="uq_delivery_once"),
    )
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_deliveries_due", ["status", "next_attempt_at"], unique=False)
        batch_op.create_index("ix_deliveries_tenant_status", ["tenant_id", "status"], unique=False)

    op.create_table(
        "delivery_attempts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("delivery_id", sa.String(length=64), nullable=False),
        sa.Column("attempt_no", sa.Integer(), nullable=False),
        sa.Column("started_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("finished_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("provider_message_id", sa.String(length=300), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("response_excerpt", sa.String(length=1000), nullable=True),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["deliveries.id"],
            name=op.f("fk_delivery_attempts_delivery_id_deliveries"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_delivery_attempts_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery_attempts")),
    )
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_delivery_attempts_delivery", ["delivery_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_delivery_attempts_delivery")

    op.drop_table("delivery_attempts")
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_deliveries_tenant_status")
        batch_op.drop_index("ix_deliveries_due")

    op.drop_table("deliveries")
    op.drop_table("api_keys")
    op.drop_table("user_tokens")
    op.drop_table("transitions")
    with op.batch_alter_table("sources", schema=None) as batch_op:
        batch_op.drop_index("ix_sources_tenant_name")

    op.drop_table("sources")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_tenant_updated")
        batch_op.drop_index("ix_runs_tenant_state")

    op.drop_table("runs")
    op.drop_table("run_access")
    op.drop_table("preferences")
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.drop_index("ix_notifications_run_state")
        batch_op.drop_index("ix_notifications_inbox")

    op.drop_table("notifications")
    with op.batch_alter_table("mismatches", schema=None) as batch_op:
        batch_op.drop_index("ix_mismatches_run")
        batch_op.drop_index("ix_mismatches_due")

    op.drop_table("mismatches")
    op.drop_table("memberships")
    with op.batch_alter_table("inbound_events", schema=None) as batch_op:
        batch_op.drop_index("ix_inbound_events_received")

    op.drop_table("inbound_events")
    with op.batch_alter_table("feed_events", schema=None) as batch_op:
        batch_op.drop_index("ix_feed_events_notification")
        batch_op.drop_index("ix_feed_events_created")

    op.drop_table("feed_events")
    op.drop_table("users")
    op.drop_table("tenants")
    op.drop_table("kv")
