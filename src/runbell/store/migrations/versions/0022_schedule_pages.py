"""schedule pages: the runs a schedule started, and retention of its firings

Revision ID: schedule_pages
Revises: fallback
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "schedule_pages"
down_revision = "fallback"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The schedule page lists the runs it started, newest first, without walking every run
    # of the tenant.
    op.create_index("ix_runs_tenant_schedule", "runs", ["tenant_id", "schedule_id", "created_at"])
    # Retention prunes a tenant's firings oldest first, a bounded walk of this index.
    op.create_index(
        "ix_schedule_firings_tenant_created", "schedule_firings", ["tenant_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_schedule_firings_tenant_created", table_name="schedule_firings")
    op.drop_index("ix_runs_tenant_schedule", table_name="runs")
