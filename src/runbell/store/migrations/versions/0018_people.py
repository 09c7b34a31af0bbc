"""people: viewers, approvers, amenders; subject grants (issue 18 item 4)

Revision ID: people
Revises: trace
Create Date: 2026-12-05
"""

from __future__ import annotations

revision = "people"
down_revision = "trace"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
