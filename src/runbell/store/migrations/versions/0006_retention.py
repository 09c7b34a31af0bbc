"""retention: a tenant's retention override and the indexes prune batches walk

Revision ID: retention
Revises: presence
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "retention"
down_revision = "presence"
branch_labels = None
depends_on = None

# (table, new index, columns); the two single-column indexes they replace served only
# the old unbounded prune, which had no tenant to start from.
INDEXES = (
    ("transitions", "ix_transitions_tenant_at", ["tenant_id", "at"]),
    ("inbound_events", "ix_inbound_events_tenant_received", ["tenant_id", "received_at"]),
    ("mismatches", "ix_mismatches_tenant_created", ["tenant_id", "created_at"]),
    ("notifications", "ix_notifications_tenant_closed", ["tenant_id", "closed_at"]),
    ("deliveries", "ix_deliveries_tenant_updated", ["tenant_id", "updated_at"]),
    ("delivery_attempts", "ix_delivery_attempts_tenant_started", ["tenant_id", "started_at"]),
    ("idempotency_keys", "ix_idempotency_keys_tenant_created", ["tenant_id", "created_at"]),
    ("receipts", "ix_receipts_tenant_at", ["tenant_id", "at"]),
)
REPLACED = (
    ("inbound_events", "ix_inbound_events_received", ["received_at"]),
    ("idempotency_keys", "ix_idempotency_keys_created", ["created_at"]),
)


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "retention", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
            )
        )
    for table, name, columns in INDEXES:
        op.create_index(name, table, columns, unique=False)
    for table, name, _ in REPLACED:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for table, name, columns in REPLACED:
        op.create_index(name, table, columns, unique=False)
    for table, name, _ in INDEXES:
        op.drop_index(name, table_name=table)
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("retention")
