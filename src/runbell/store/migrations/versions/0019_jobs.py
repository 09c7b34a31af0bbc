"""jobs: done_when, links, dependencies (issue 18 item 5)

Revision ID: jobs
Revises: people
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import runbell.store.tables

revision = "jobs"
down_revision = "people"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # All nullable: a run made before this has no done_when, no dependency, no links.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("done_when", JSON, nullable=True))
        batch_op.add_column(sa.Column("depends_on_run", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("depends_on_request", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("depends_on_version", sa.Integer(), nullable=True))
    op.create_index("ix_runs_depends_on", "runs", ["tenant_id", "depends_on_request"])
    op.create_table(
        "run_links",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("link_id", sa.String(length=200), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("created_at", runbell.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_run_links_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "run_id", "kind", "link_id", name=op.f("pk_run_links")
        ),
    )
    op.create_index("ix_run_links_target", "run_links", ["tenant_id", "kind", "link_id"])


def downgrade() -> None:
    op.drop_index("ix_run_links_target", table_name="run_links")
    op.drop_table("run_links")
    op.drop_index("ix_runs_depends_on", table_name="runs")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("depends_on_version")
        batch_op.drop_column("depends_on_request")
        batch_op.drop_column("depends_on_run")
        batch_op.drop_column("done_when")
