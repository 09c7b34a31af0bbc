"""credentials: scoped agent keys, delegated tokens, completion owner (issue 18 items 1-2)

Revision ID: credentials
Revises: auth_failures
Create Date: 2026-12-05
"""

from __future__ import annotations

revision = "credentials"
down_revision = "auth_failures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
