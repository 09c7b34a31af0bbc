"""auth_failures: failed authentication counted across API processes

Revision ID: auth_failures
Revises: wide_composites
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import runbell.store.tables

revision = "auth_failures"
down_revision = "wide_composites"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "auth_failures",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("window_start", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_auth_failures")),
    )


def downgrade() -> None:
    op.drop_table("auth_failures")
