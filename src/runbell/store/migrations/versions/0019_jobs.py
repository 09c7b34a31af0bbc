"""jobs: done_when, links, dependencies (issue 18 item 5)

Revision ID: jobs
Revises: people
Create Date: 2026-12-05
"""

from __future__ import annotations

revision = "jobs"
down_revision = "people"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
