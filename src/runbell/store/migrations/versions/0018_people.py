"""people: viewers, approvers, amenders; subject grants (issue 18 item 4)

Revision ID: people
Revises: trace
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "people"
down_revision = "trace"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # Old rows are the owner and ``authority.users``: they could see, answer and propose,
    # and the defaults keep that. One row per source: ``via`` joins the primary key.
    with op.batch_alter_table("run_access", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("via", sa.String(length=64), server_default="run", nullable=False)
        )
        batch_op.add_column(
            sa.Column("may_answer", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
        batch_op.add_column(
            sa.Column("may_amend", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
    with op.batch_alter_table("run_access", schema=None) as batch_op:
        batch_op.drop_constraint("pk_run_access", type_="primary")
        batch_op.create_primary_key("pk_run_access", ["tenant_id", "user_id", "run_id", "via"])
    op.create_table(
        "subject_grants",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("subject_type", sa.String(length=100), nullable=False),
        sa.Column("subject_id", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "role in ('viewer','approver','amender')", name=op.f("ck_subject_grants_role")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_subject_grants_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_subject_grants_user_id_users")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_subject_grants")),
        sa.UniqueConstraint(
            "tenant_id", "subject_type", "subject_id", "user_id", "role", name="uq_subject_grant"
        ),
    )
    op.create_index(
        "ix_subject_grants_user", "subject_grants", ["tenant_id", "user_id"], unique=False
    )
    with op.batch_alter_table("input_requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("approvers", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("input_requests", schema=None) as batch_op:
        batch_op.drop_column("approvers")
    op.drop_index("ix_subject_grants_user", table_name="subject_grants")
    op.drop_table("subject_grants")
    op.execute("DELETE FROM run_access WHERE via <> 'run'")
    with op.batch_alter_table("run_access", schema=None) as batch_op:
        batch_op.drop_constraint("pk_run_access", type_="primary")
        batch_op.create_primary_key("pk_run_access", ["tenant_id", "user_id", "run_id"])
    with op.batch_alter_table("run_access", schema=None) as batch_op:
        batch_op.drop_column("via")
        batch_op.drop_column("may_amend")
        batch_op.drop_column("may_answer")
