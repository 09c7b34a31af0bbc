"""action previews: an input request's typed action and its flagged risks (issue 19 item 1)

Revision ID: action_previews
Revises: throttle
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "action_previews"
down_revision = "throttle"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # What approving lets happen (sensitive, like details) and the risks flagged in it
    # when the request was opened. Older requests have neither.
    op.add_column("input_requests", sa.Column("action", JSON, nullable=True))
    op.add_column("input_requests", sa.Column("risks", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("input_requests") as batch:
        batch.drop_column("risks")
        batch.drop_column("action")
