"""schedules: scheduled work (issue 18 item 6)

Revision ID: schedules
Revises: jobs
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "schedules"
down_revision = "jobs"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
When = runbell.store.tables.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=True),
        sa.Column("owner_user_id", sa.String(length=64), nullable=False),
        sa.Column("authority", JSON, nullable=True),
        sa.Column("authority_version", sa.Integer(), nullable=False),
        sa.Column("cadence", sa.String(length=200), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=True),
        sa.Column("secret", sa.Text(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("instruction_version", sa.Integer(), nullable=False),
        sa.Column("next_fire_at", When(), nullable=True),
        sa.Column("state_reason", sa.String(length=500), nullable=True),
        sa.Column("created_at", When(), nullable=False),
        sa.Column("updated_at", When(), nullable=False),
        sa.Column("revoked_at", When(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_schedules_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["owner_user_id"], ["users.id"], name=op.f("fk_schedules_owner_user_id_users")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_schedules")),
        sa.CheckConstraint("mode in ('record_only','webhook')", name=op.f("ck_schedules_mode")),
        sa.CheckConstraint(
            "state in ('active','paused','revoked')", name=op.f("ck_schedules_state")
        ),
    )
    op.create_index("ix_schedules_next_fire_at", "schedules", ["next_fire_at"])
    op.create_index("ix_schedules_tenant_created", "schedules", ["tenant_id", "created_at"])
    op.create_table(
        "schedule_instructions",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_by", JSON, nullable=True),
        sa.Column("created_at", When(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_schedule_instructions_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "schedule_id", "version", name=op.f("pk_schedule_instructions")
        ),
    )
    op.create_table(
        "schedule_firings",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=64), nullable=False),
        sa.Column("due_at", When(), nullable=False),
        sa.Column("webhook_id", sa.String(length=100), nullable=False),
        sa.Column("instruction_version", sa.Integer(), nullable=False),
        sa.Column("authority_version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("created_at", When(), nullable=False),
        sa.Column("settled_at", When(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_schedule_firings_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "schedule_id", "due_at", name=op.f("pk_schedule_firings")
        ),
        sa.CheckConstraint(
            "status in ('sending','sent','failed')", name=op.f("ck_schedule_firings_status")
        ),
    )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("schedule_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("schedule_instruction_version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("schedule_authority", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("schedule_authority")
        batch.drop_column("schedule_instruction_version")
        batch.drop_column("schedule_id")
    op.drop_table("schedule_firings")
    op.drop_table("schedule_instructions")
    op.drop_index("ix_schedules_tenant_created", table_name="schedules")
    op.drop_index("ix_schedules_next_fire_at", table_name="schedules")
    op.drop_table("schedules")
