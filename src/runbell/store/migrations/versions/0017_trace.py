"""trace: the completion owner, in-flight blocking and who caused each step (issue 18
items 2, 3, 8)

Revision ID: trace
Revises: credentials
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from runbell.store.tables import JSON, Id, UTCDateTime

revision = "trace"
down_revision = "credentials"
branch_labels = None
depends_on = None

WORKER_ID = 200
RUN_ID = 200
REASON = 500

#: (table, a function making the new column): made fresh for each use.
COLUMNS = (
    ("runs", lambda: sa.Column("owner_credential_id", Id, nullable=True)),
    ("transitions", lambda: sa.Column("actor", JSON, nullable=True)),
    ("responses", lambda: sa.Column("actor", JSON, nullable=True)),
    ("amendments", lambda: sa.Column("actor", JSON, nullable=True)),
    ("operations", lambda: sa.Column("reports", JSON, nullable=True)),
    ("operations", lambda: sa.Column("superseded", JSON, nullable=True)),
)


def upgrade() -> None:
    # NULL on every existing run: no owner recorded, so anyone of the tenant acts as before.
    for table, column in COLUMNS:
        with op.batch_alter_table(table) as batch:
            batch.add_column(column())
    op.create_table(
        "owner_changes",
        sa.Column("tenant_id", Id, nullable=False),
        sa.Column("run_id", sa.String(RUN_ID), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("from_credential_id", Id, nullable=True),
        sa.Column("from_worker_id", sa.String(WORKER_ID), nullable=True),
        sa.Column("to_credential_id", Id, nullable=True),
        sa.Column("to_worker_id", sa.String(WORKER_ID), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("previous_may_still_act", sa.Boolean, nullable=False),
        sa.Column("reason", sa.String(REASON), nullable=True),
        sa.Column("actor", JSON, nullable=True),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.CheckConstraint("kind in ('claim','takeover')", name=op.f("ck_owner_changes_kind")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_owner_changes_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", "seq", name=op.f("pk_owner_changes")),
    )
    op.create_index(
        "ix_owner_changes_tenant_at", "owner_changes", ["tenant_id", "at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_owner_changes_tenant_at", table_name="owner_changes")
    op.drop_table("owner_changes")
    for table, column in reversed(COLUMNS):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(column().name)
