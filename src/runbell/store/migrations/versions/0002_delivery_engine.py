"""delivery engine

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.create_index("ix_notifications_expiry", ["state", "expires_at"], unique=False)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "report", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
            )
        )
    with op.batch_alter_table("transitions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("reported_at", runbell.store.tables.UTCDateTime(), nullable=True)
        )
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.create_index("ix_tenants_name", ["name"], unique=True)
    op.create_table(
        "operator_events",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("kind", sa.String(length=50), nullable=False),
        sa.Column(
            "detail", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operator_events")),
    )
    with op.batch_alter_table("operator_events", schema=None) as batch_op:
        batch_op.create_index("ix_operator_events_created", ["created_at"], unique=False)

    op.create_table(
        "chat_destinations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=True),
        sa.Column("url_sealed", sa.Text(), nullable=False),
        sa.Column("url_hint", sa.String(length=200), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_chat_destinations_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_chat_destinations_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chat_destinations")),
    )
    with op.batch_alter_table("chat_destinations", schema=None) as batch_op:
        batch_op.create_index("ix_chat_destinations_user", ["tenant_id", "user_id"], unique=False)

    op.create_table(
        "push_subscriptions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("endpoint", sa.String(length=2000), nullable=False),
        sa.Column("p256dh", sa.String(length=200), nullable=False),
        sa.Column("auth", sa.String(length=100), nullable=False),
        sa.Column("user_agent", sa.String(length=300), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("last_success_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_push_subscriptions_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_push_subscriptions_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_push_subscriptions")),
    )
    with op.batch_alter_table("push_subscriptions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_push_subscriptions_endpoint", ["tenant_id", "endpoint"], unique=True
        )
        batch_op.create_index("ix_push_subscriptions_user", ["tenant_id", "user_id"], unique=False)

    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("description", sa.String(length=500), nullable=True),
        sa.Column(
            "event_types", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column(
            "secrets", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("disabled_reason", sa.String(length=500), nullable=True),
        sa.Column("dead_streak", sa.Integer(), server_default="0", nullable=False),
        sa.Column("rate_limit_per_s", sa.Float(), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("updated_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_webhook_endpoints_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_endpoints")),
    )
    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.create_index("ix_webhook_endpoints_tenant", ["tenant_id"], unique=False)

    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_id", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("event_type", sa.String(length=50), nullable=True))
        batch_op.add_column(sa.Column("event_key", sa.String(length=300), nullable=True))
        batch_op.add_column(
            sa.Column(
                "payload", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
            )
        )
        batch_op.add_column(sa.Column("urgency", sa.String(length=20), nullable=True))
        batch_op.alter_column("notification_id", existing_type=sa.VARCHAR(length=64), nullable=True)
        batch_op.create_unique_constraint(
            "uq_delivery_event_once", ["tenant_id", "channel", "destination", "event_key"]
        )


def downgrade() -> None:
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.drop_index("ix_notifications_expiry")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("report")
    with op.batch_alter_table("transitions", schema=None) as batch_op:
        batch_op.drop_column("reported_at")
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_index("ix_tenants_name")
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.drop_constraint("uq_delivery_event_once", type_="unique")
        batch_op.alter_column(
            "notification_id", existing_type=sa.VARCHAR(length=64), nullable=False
        )
        batch_op.drop_column("urgency")
        batch_op.drop_column("payload")
        batch_op.drop_column("event_key")
        batch_op.drop_column("event_type")
        batch_op.drop_column("run_id")

    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_endpoints_tenant")

    op.drop_table("webhook_endpoints")
    with op.batch_alter_table("push_subscriptions", schema=None) as batch_op:
        batch_op.drop_index("ix_push_subscriptions_user")
        batch_op.drop_index("ix_push_subscriptions_endpoint")

    op.drop_table("push_subscriptions")
    with op.batch_alter_table("chat_destinations", schema=None) as batch_op:
        batch_op.drop_index("ix_chat_destinations_user")

    op.drop_table("chat_destinations")
    with op.batch_alter_table("operator_events", schema=None) as batch_op:
        batch_op.drop_index("ix_operator_events_created")

    op.drop_table("operator_events")
