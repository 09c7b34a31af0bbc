"""fallback: presence from a person's app, fallback on failure (issue 18 items 9-10)

Revision ID: fallback
Revises: schedules
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "fallback"
down_revision = "schedules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # An escalation rung that may fire at once when an earlier channel failed for good
    # (flows.fallback); existing rungs keep firing on time only.
    op.add_column(
        "escalation_steps",
        sa.Column("on_failure", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column("escalation_steps", sa.Column("unknown_after_s", sa.Integer, nullable=True))
    op.add_column("escalation_steps", sa.Column("trigger", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("escalation_steps") as batch:
        batch.drop_column("trigger")
        batch.drop_column("unknown_after_s")
        batch.drop_column("on_failure")
