"""schedules: scheduled work (issue 18 item 6)

Revision ID: schedules
Revises: jobs
Create Date: 2026-12-05
"""

from __future__ import annotations

revision = "schedules"
down_revision = "jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
