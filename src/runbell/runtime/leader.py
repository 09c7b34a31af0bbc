"""Leader election for time-driven sweeps: one runner per sweep per tick.

On PostgreSQL several processes share the database, and a session-level advisory lock
(``pg_try_advisory_lock``) elects whichever takes it first; the others skip that sweep
this tick. On SQLite there is one process, so it always leads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from runbell.store.db import Database


@contextmanager
def leading(db: Database, key: int) -> Iterator[bool]:
    """Yield True while this process holds lock ``key`` (released on exit), else False."""
    if not db.is_postgres:
        yield True
        return
    with db.engine.connect() as conn:
        got = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        if not got:
            yield False
            return
        try:
            yield True
        finally:
            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.commit()
