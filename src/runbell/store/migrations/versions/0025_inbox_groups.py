"""inbox groups: which digest folds a notification

Revision ID: inbox_groups
Revises: action_previews
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "inbox_groups"
down_revision = "action_previews"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The inbox hides a notification an open digest folds: one probe of this index per
    # notification listed, however many digests were ever sent.
    op.create_index(
        "ix_digest_items_notification", "digest_items", ["tenant_id", "notification_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_digest_items_notification", table_name="digest_items")
