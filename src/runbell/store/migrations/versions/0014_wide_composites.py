"""Composite columns as wide as the widest composite the API accepts (issue 16 row 1)

notifications.subject_version holds f"{subject type}:{id}:{version}" (100 + 1 + 200 + 1 +
100 = 402); deliveries.event_key holds f"{event type}:{run_id}:{id}:{id}" (50 + 1 + 200 +
1 + 200 + 1 + 200 = 653). Both were narrower than what the API accepts, so PostgreSQL
refused the insert (a 500) where SQLite, which ignores varchar widths, took it. Widened
here rather than shrinking the API; the widths come from runbell.domain.limits, frozen
here as numbers.

Revision ID: wide_composites
Revises: ledger_flag
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "wide_composites"
down_revision = "ledger_flag"
branch_labels = None
depends_on = None

_WIDENED = (
    ("notifications", "subject_version", 200, 402),
    ("deliveries", "event_key", 300, 653),
)


def upgrade() -> None:
    _alter(widen=True)


def downgrade() -> None:
    # Values wider than the old width would not fit: cut them (they are derived keys).
    for table, column, old, _new in _WIDENED:
        op.execute(
            sa.text(
                f"UPDATE {table} SET {column} = substr({column}, 1, {old}) "  # noqa: S608 (constants)
                f"WHERE length({column}) > {old}"
            )
        )
    _alter(widen=False)


def _alter(*, widen: bool) -> None:
    bind = op.get_bind()
    for table, column, old, new in _WIDENED:
        before, after = (old, new) if widen else (new, old)
        if bind.dialect.name != "sqlite":
            op.alter_column(table, column, existing_type=sa.String(before), type_=sa.String(after))
            continue
        # SQLite ignores varchar widths, so only the declared type changes (the same TEXT
        # affinity: nothing on disk changes). A batch rebuild would DROP the table, which
        # with foreign keys on deletes the rows that reference it (escalation steps
        # cascade). SQLite documents this in-place edit for changes that leave the stored
        # content alone (https://sqlite.org/lang_altertable.html, "otheralter").
        version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
        bind.exec_driver_sql("PRAGMA writable_schema=ON")
        bind.execute(
            sa.text(
                "UPDATE sqlite_master SET sql = replace(sql, :was, :now) "
                "WHERE type = 'table' AND name = :table"
            ),
            {
                "was": f"{column} VARCHAR({before})",
                "now": f"{column} VARCHAR({after})",
                "table": table,
            },
        )
        bind.exec_driver_sql(f"PRAGMA schema_version={int(version) + 1}")
        bind.exec_driver_sql("PRAGMA writable_schema=OFF")
