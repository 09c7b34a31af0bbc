"""stall episodes on runs; scheduled escalation steps

Revision ID: stalls
Revises: cancellation
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import runbell.store.tables

revision = "stalls"
down_revision = "cancellation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("stall_after_seconds", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("stall_clock_at", runbell.store.tables.UTCDateTime(), nullable=True)
        )
        batch.add_column(
            sa.Column("stall_due_at", runbell.store.tables.UTCDateTime(), nullable=True)
        )
        batch.add_column(sa.Column("stalled_at", runbell.store.tables.UTCDateTime(), nullable=True))
    op.create_index("ix_runs_stall_due", "runs", ["stall_due_at"])
    op.create_table(
        "escalation_steps",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("notification_id", sa.String(length=64), nullable=False),
        sa.Column("step_no", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("after_s", sa.Integer(), nullable=False),
        sa.Column("due_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("deliveries", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("settled_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_escalation_steps_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["notification_id"],
            ["notifications.id"],
            name=op.f("fk_escalation_steps_notification_id_notifications"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_escalation_steps")),
        sa.UniqueConstraint("notification_id", "step_no", name="uq_escalation_step_once"),
        sa.CheckConstraint(
            "status in ('pending','fired','cancelled')", name=op.f("ck_escalation_steps_status")
        ),
    )
    op.create_index(
        "ix_escalation_steps_due", "escalation_steps", ["status", "due_at"], unique=False
    )
    op.create_index(
        "ix_escalation_steps_tenant_created",
        "escalation_steps",
        ["tenant_id", "created_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_escalation_steps_tenant_created", table_name="escalation_steps")
    op.drop_index("ix_escalation_steps_due", table_name="escalation_steps")
    op.drop_table("escalation_steps")
    op.drop_index("ix_runs_stall_due", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("stalled_at")
        batch.drop_column("stall_due_at")
        batch.drop_column("stall_clock_at")
        batch.drop_column("stall_after_seconds")
