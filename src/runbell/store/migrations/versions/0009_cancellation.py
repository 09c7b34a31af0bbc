"""cancellation as a request (runs.cancel_*), amendments by other people

Revision ID: cancellation
Revises: operations
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "cancellation"
down_revision = "operations"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("cancel_requested_at", runbell.store.tables.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(sa.Column("cancel_requested_by", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("cancel_reason", sa.String(length=500), nullable=True))
        batch_op.add_column(sa.Column("cancel_summary", JSON, nullable=True))
    with op.batch_alter_table("input_requests", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("purpose", sa.String(length=16), server_default="run", nullable=False)
        )
    op.create_table(
        "amendments",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("input_request_id", sa.String(length=200), nullable=False),
        sa.Column("proposed_by", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("changes", JSON, nullable=True),
        sa.Column("base", JSON, nullable=True),
        sa.Column("run_version", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("decided_by", sa.String(length=64), nullable=True),
        sa.Column("decided_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("applied_version", sa.Integer(), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "state in ('pending','approved','rejected','cancelled')",
            name=op.f("ck_amendments_state"),
        ),
        sa.ForeignKeyConstraint(
            ["proposed_by"], ["users.id"], name=op.f("fk_amendments_proposed_by_users")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_amendments_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_amendments")),
    )
    op.create_index(
        "ix_amendments_run", "amendments", ["tenant_id", "run_id", "state"], unique=False
    )
    op.create_index(
        "ix_amendments_tenant_created", "amendments", ["tenant_id", "created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_amendments_tenant_created", table_name="amendments")
    op.drop_index("ix_amendments_run", table_name="amendments")
    op.drop_table("amendments")
    with op.batch_alter_table("input_requests", schema=None) as batch_op:
        batch_op.drop_column("purpose")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("cancel_summary")
        batch_op.drop_column("cancel_reason")
        batch_op.drop_column("cancel_requested_by")
        batch_op.drop_column("cancel_requested_at")
