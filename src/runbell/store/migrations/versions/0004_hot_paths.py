"""hot paths: an index that keeps count_recent bounded as history grows

Revision ID: hot_paths
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "hot_paths"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_notifications_recent",
        "notifications",
        ["tenant_id", "recipient_user_id", "attention_type", "created_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_notifications_recent", table_name="notifications")
