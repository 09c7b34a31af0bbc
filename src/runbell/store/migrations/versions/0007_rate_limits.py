"""rate limits shared by all workers

Revision ID: rate_limits
Revises: retention
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import runbell.store.tables

revision = "rate_limits"
down_revision = "retention"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_limits",
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("tat", runbell.store.tables.UTCDateTime(), nullable=True),
        sa.Column("updated_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_rate_limits")),
    )


def downgrade() -> None:
    op.drop_table("rate_limits")
