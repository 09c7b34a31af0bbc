"""digests: items collected per recipient and key, and the digests that were sent

Revision ID: digests
Revises: stalls
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import runbell.store.tables

revision = "digests"
down_revision = "stalls"
branch_labels = None
depends_on = None


def upgrade() -> None:
    utc = runbell.store.tables.UTCDateTime
    op.create_table(
        "digest_items",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("recipient_user_id", sa.String(length=64), nullable=False),
        sa.Column("digest_key", sa.String(length=100), nullable=False),
        sa.Column("window_start", utc(), nullable=False),
        sa.Column("closes_at", utc(), nullable=False),
        sa.Column("max_items", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("transition_version", sa.Integer(), nullable=False),
        sa.Column("attention_type", sa.String(length=20), nullable=False),
        sa.Column("urgency", sa.String(length=20), nullable=False),
        sa.Column("rule_id", sa.String(length=200), nullable=False),
        sa.Column("notification_id", sa.String(length=64), nullable=True),
        sa.Column("digest_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", utc(), nullable=False),
        sa.ForeignKeyConstraint(
            ["recipient_user_id"],
            ["users.id"],
            name=op.f("fk_digest_items_recipient_user_id_users"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_digest_items_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_digest_items")),
        sa.UniqueConstraint(
            "tenant_id",
            "recipient_user_id",
            "run_id",
            "transition_version",
            "attention_type",
            name="uq_digest_item_once",
        ),
    )
    op.create_index("ix_digest_items_due", "digest_items", ["digest_id", "closes_at"])
    op.create_index("ix_digest_items_digest", "digest_items", ["tenant_id", "digest_id"])
    op.create_table(
        "digests",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("recipient_user_id", sa.String(length=64), nullable=False),
        sa.Column("digest_key", sa.String(length=100), nullable=False),
        sa.Column("window_start", utc(), nullable=False),
        sa.Column("part", sa.Integer(), nullable=False),
        sa.Column("window_end", utc(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("notification_id", sa.String(length=64), nullable=False),
        sa.Column("item_count", sa.Integer(), nullable=False),
        sa.Column("created_at", utc(), nullable=False),
        sa.ForeignKeyConstraint(
            ["recipient_user_id"], ["users.id"], name=op.f("fk_digests_recipient_user_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_digests_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_digests")),
        sa.UniqueConstraint(
            "tenant_id",
            "recipient_user_id",
            "digest_key",
            "window_start",
            "part",
            name="uq_digest_once",
        ),
    )
    op.create_index("ix_digests_notification", "digests", ["tenant_id", "notification_id"])
    op.create_index("ix_digests_tenant_created", "digests", ["tenant_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_digests_tenant_created", table_name="digests")
    op.drop_index("ix_digests_notification", table_name="digests")
    op.drop_table("digests")
    op.drop_index("ix_digest_items_digest", table_name="digest_items")
    op.drop_index("ix_digest_items_due", table_name="digest_items")
    op.drop_table("digest_items")
