"""indexes for the runs overview

Revision ID: overview
Revises: digests
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "overview"
down_revision = "digests"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # "finished": a tenant's terminal runs, most recent first, paged.
    op.create_index("ix_runs_tenant_finished", "runs", ["tenant_id", "finished_at"])
    # "needs review" (and any group keyed on an attention type): a tenant's notifications
    # of one type in one state, without reading the tenant's whole history.
    op.create_index(
        "ix_notifications_tenant_attention",
        "notifications",
        ["tenant_id", "attention_type", "state"],
    )


def downgrade() -> None:
    op.drop_index("ix_notifications_tenant_attention", table_name="notifications")
    op.drop_index("ix_runs_tenant_finished", table_name="runs")
