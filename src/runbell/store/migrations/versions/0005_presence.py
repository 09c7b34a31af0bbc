"""presence shared across processes

Revision ID: presence
Revises: hot_paths
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import runbell.store.tables

revision = "presence"
down_revision = "hot_paths"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "presence",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("expires_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", "holder", name=op.f("pk_presence")),
    )


def downgrade() -> None:
    op.drop_table("presence")
