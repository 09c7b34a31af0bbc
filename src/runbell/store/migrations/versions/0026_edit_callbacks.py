"""edit before approving, machines that answer: editable values, edited answers, machine
answers (a nullable response user) and callback URLs (issue 19 items 3, 4)

Revision ID: edit_callbacks
Revises: inbox_groups
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "edit_callbacks"
down_revision = "inbox_groups"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # Plain ADD COLUMNs: a batch on SQLite would copy the tenants table, which others
    # reference.
    op.add_column("input_requests", sa.Column("editable", JSON, nullable=True))
    op.add_column(
        "tenants",
        sa.Column("machine_answers", sa.Boolean(), nullable=False, server_default=sa.true()),
    )
    op.add_column(
        "responses",
        sa.Column("edited", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    # A machine's answer has no person: ``actor`` names the callback or the key. Nothing
    # references responses, so SQLite's batch copy of it is safe.
    with op.batch_alter_table("responses", schema=None) as batch_op:
        batch_op.alter_column("user_id", existing_type=sa.String(length=64), nullable=True)
    op.create_table(
        "callback_urls",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("input_request_id", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("run_version", sa.Integer(), nullable=False),
        sa.Column("request_version", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("decisions", JSON, nullable=False),
        sa.Column("created_by", JSON, nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("expires_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("used_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_callback_urls_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_callback_urls")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_callback_urls_token_hash")),
    )
    op.create_index("ix_callback_urls_request", "callback_urls", ["tenant_id", "input_request_id"])


def downgrade() -> None:
    op.drop_index("ix_callback_urls_request", table_name="callback_urls")
    op.drop_table("callback_urls")
    op.drop_column("tenants", "machine_answers")
    with op.batch_alter_table("responses", schema=None) as batch_op:
        batch_op.alter_column("user_id", existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_column("edited")
    op.drop_column("input_requests", "editable")
