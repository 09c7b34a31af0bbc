"""operations ledger, worker fencing and the completion's outcome

Revision ID: operations
Revises: rate_limits
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "operations"
down_revision = "rate_limits"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("worker_id", sa.String(length=200), nullable=True))
        batch_op.add_column(
            sa.Column("worker_epoch", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(sa.Column("outcome", sa.String(length=16), nullable=True))
    op.create_table(
        "operations",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("operation_id", sa.String(length=200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("target_type", sa.String(length=100), nullable=False),
        sa.Column("target_id", sa.String(length=200), nullable=False),
        sa.Column("target_version", sa.String(length=100), nullable=True),
        sa.Column("intent", sa.String(length=200), nullable=False),
        sa.Column("details", JSON, nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=True),
        sa.Column("evidence", JSON, nullable=True),
        sa.Column("history", JSON, nullable=False),
        sa.Column("body_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("updated_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "state in ('planned','sent','confirmed','conflict','failed','uncertain','absent',"
            "'unresolved','not_started')",
            name=op.f("ck_operations_state"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_operations_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", "operation_id", name=op.f("pk_operations")),
    )
    op.create_index(
        "ix_operations_target",
        "operations",
        ["tenant_id", "target_type", "target_id", "state"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_operations_target", table_name="operations")
    op.drop_table("operations")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("outcome")
        batch_op.drop_column("worker_epoch")
        batch_op.drop_column("worker_id")
