"""credentials: scoped agent keys, delegated tokens (issue 18 item 1)

Revision ID: credentials
Revises: auth_failures
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "credentials"
down_revision = "auth_failures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    # NULL scope: every capability on every run, so keys made before this keep working.
    op.add_column("api_keys", sa.Column("capabilities", json, nullable=True))
    op.add_column("api_keys", sa.Column("run_patterns", json, nullable=True))
    op.add_column(
        "api_keys",
        sa.Column("own_runs", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("runs", sa.Column("created_by_credential", sa.String(length=64), nullable=True))
    op.create_table(
        "delegated_tokens",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("capabilities", json, nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("expires_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_delegated_tokens_key_id_api_keys")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_delegated_tokens_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delegated_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_delegated_tokens_token_hash")),
    )
    op.create_index("ix_delegated_tokens_tenant_run", "delegated_tokens", ["tenant_id", "run_id"])


def downgrade() -> None:
    op.drop_index("ix_delegated_tokens_tenant_run", table_name="delegated_tokens")
    op.drop_table("delegated_tokens")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("created_by_credential")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("own_runs")
        batch.drop_column("run_patterns")
        batch.drop_column("capabilities")
