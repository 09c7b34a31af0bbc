"""fallback: presence from a person's app, fallback on failure (issue 18 items 9-10)

Revision ID: fallback
Revises: schedules
Create Date: 2026-12-05
"""

from __future__ import annotations

revision = "fallback"
down_revision = "schedules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
