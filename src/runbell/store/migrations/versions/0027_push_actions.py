"""push actions: acting from a web push notification (issue 19 item 2)

Revision ID: push_actions
Revises: edit_callbacks
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import runbell.store.tables

revision = "push_actions"
down_revision = "edit_callbacks"
branch_labels = None
depends_on = None

When = runbell.store.tables.UTCDateTime


def upgrade() -> None:
    # A snooze rung pushes the notification again instead of adding a channel.
    op.add_column("escalation_steps", sa.Column("purpose", sa.String(16), nullable=True))
    # Used push-action tokens, by hash only: a second use is refused.
    op.create_table(
        "push_action_uses",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("notification_id", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("used_at", When(), nullable=False),
        sa.Column("expires_at", When(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_push_action_uses_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_push_action_uses")),
    )
    op.create_index("ix_push_action_uses_expires", "push_action_uses", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_push_action_uses_expires", table_name="push_action_uses")
    op.drop_table("push_action_uses")
    with op.batch_alter_table("escalation_steps") as batch:
        batch.drop_column("purpose")
