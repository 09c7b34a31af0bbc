"""people act

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=100), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column(
            "response", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_idempotency_keys_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "principal", "key", name=op.f("pk_idempotency_keys")),
    )
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.create_index("ix_idempotency_keys_created", ["created_at"], unique=False)

    op.create_table(
        "input_requests",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.String(length=300), nullable=False),
        sa.Column(
            "details", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column(
            "options", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
        sa.Column("blocks_work", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("expires_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("run_version", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("superseded_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("closed_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.CheckConstraint(
            "state in ('pending','answered','expired','cancelled','superseded')",
            name=op.f("ck_input_requests_state"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_input_requests_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_input_requests")),
    )
    with op.batch_alter_table("input_requests", schema=None) as batch_op:
        batch_op.create_index("ix_input_requests_expiry", ["state", "expires_at"], unique=False)
        batch_op.create_index(
            "ix_input_requests_run", ["tenant_id", "run_id", "state"], unique=False
        )

    op.create_table(
        "login_links",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("expires_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("used_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_login_links_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_login_links_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_links")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_login_links_token_hash")),
    )
    op.create_table(
        "receipts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("notification_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=True),
        sa.Column("at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_receipts_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_receipts")),
    )
    with op.batch_alter_table("receipts", schema=None) as batch_op:
        batch_op.create_index("ix_receipts_notification", ["notification_id"], unique=False)

    op.create_table(
        "responses",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("input_request_id", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("value", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True),
        sa.Column("expected_run_version", sa.Integer(), nullable=False),
        sa.Column("expected_request_version", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_responses_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_responses_user_id_users")),
        sa.PrimaryKeyConstraint("tenant_id", "input_request_id", name=op.f("pk_responses")),
        sa.UniqueConstraint("id", name=op.f("uq_responses_id")),
    )
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("expires_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_web_sessions_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_web_sessions_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_web_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_web_sessions_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("web_sessions")
    op.drop_table("responses")
    with op.batch_alter_table("receipts", schema=None) as batch_op:
        batch_op.drop_index("ix_receipts_notification")

    op.drop_table("receipts")
    op.drop_table("login_links")
    with op.batch_alter_table("input_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_input_requests_run")
        batch_op.drop_index("ix_input_requests_expiry")

    op.drop_table("input_requests")
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_idempotency_keys_created")

    op.drop_table("idempotency_keys")
