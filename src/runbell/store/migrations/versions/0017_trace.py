"""trace: who or what caused each change (issue 18 items 3, 8)

Revision ID: trace
Revises: credentials
Create Date: 2026-12-05
"""

from __future__ import annotations

revision = "trace"
down_revision = "credentials"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
