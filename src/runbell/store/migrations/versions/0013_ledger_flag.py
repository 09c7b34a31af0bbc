"""runs.has_operations: whether a run ever declared an operation

Revision ID: ledger_flag
Revises: overview
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "ledger_flag"
down_revision = "overview"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Set on the first declaration; a transition reads the run row anyway, so a run that
    # declared nothing (most runs) costs its terminal transition no ledger query.
    op.add_column(
        "runs",
        sa.Column("has_operations", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.execute(
        "UPDATE runs SET has_operations = true WHERE EXISTS (SELECT 1 FROM operations o "
        "WHERE o.tenant_id = runs.tenant_id AND o.run_id = runs.run_id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("has_operations")
