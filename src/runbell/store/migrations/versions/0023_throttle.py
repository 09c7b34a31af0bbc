"""throttle: per-recipient push counts of throttled policy rules (issue 19 item 5)

Revision ID: throttle
Revises: schedule_pages
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import runbell.store.tables

revision = "throttle"
down_revision = "schedule_pages"
branch_labels = None
depends_on = None

When = runbell.store.tables.UTCDateTime


def upgrade() -> None:
    # One row per (recipient, rule, key value, window): its count is bumped by an upsert
    # that returns it, so concurrent workers agree on which notification is over the limit.
    op.create_table(
        "throttle_counts",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("recipient_user_id", sa.String(length=64), nullable=False),
        sa.Column("rule_id", sa.String(length=200), nullable=False),
        sa.Column("throttle_key", sa.String(length=20), nullable=False),
        sa.Column("key_value", sa.String(length=200), nullable=False),
        sa.Column("window_start", When(), nullable=False),
        sa.Column("window_end", When(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_throttle_counts_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "recipient_user_id",
            "rule_id",
            "throttle_key",
            "key_value",
            "window_start",
            name=op.f("pk_throttle_counts"),
        ),
    )
    op.create_index("ix_throttle_counts_window_end", "throttle_counts", ["window_end"])


def downgrade() -> None:
    op.drop_index("ix_throttle_counts_window_end", table_name="throttle_counts")
    op.drop_table("throttle_counts")
