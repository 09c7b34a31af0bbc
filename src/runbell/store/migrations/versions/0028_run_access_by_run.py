"""run_access by run: an index on (tenant_id, run_id, via)

The table's primary key starts (tenant_id, user_id, …): a lookup of one run's rows (who
may answer or amend it, read and rewritten by every run create and edit) walked every row
of the tenant, so creating a run cost more the more runs the tenant had (~1 ms per
``PUT`` at 6,000 runs on SQLite, growing linearly; bench/profile/p2-put.md).

Revision ID: run_access_by_run
Revises: push_actions
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "run_access_by_run"
down_revision = "push_actions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_run_access_run", "run_access", ["tenant_id", "run_id", "via"])


def downgrade() -> None:
    op.drop_index("ix_run_access_run", table_name="run_access")
