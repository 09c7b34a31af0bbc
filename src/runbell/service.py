"""Wiring: build the database, the secret box and the core from settings."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

from runbell.config import Settings
from runbell.core import Runbell
from runbell.crypto import SecretBox, load_or_create_key
from runbell.store.db import Database
from runbell.store.migrate import upgrade


def utcnow() -> datetime:
    return datetime.now(UTC)


def build(
    settings: Settings, *, clock: Callable[[], datetime] = utcnow, migrate: bool = True
) -> Runbell:
    url = settings.resolved_database_url()
    if url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(url, clock=clock)
    if migrate:
        upgrade(db.engine)
    key = settings.secret_key or load_or_create_key(settings.data_dir)
    box = SecretBox(key)
    if migrate:
        check_secret_key(db, box)
    return Runbell(settings, db, box=box)


KEY_CHECK = "secret_key_check"


def check_secret_key(db: Database, box: SecretBox) -> None:
    """Refuse to start with a secret key other than the one that sealed the stored
    secrets (a second host without RUNBELL_SECRET_KEY would otherwise fail every signed
    webhook, reader and chat send at runtime)."""
    import sqlalchemy as sa

    from runbell.domain.errors import RunbellError
    from runbell.store import tables as t

    with db.read() as conn:
        sealed = conn.execute(sa.select(t.kv.c.value).where(t.kv.c.key == KEY_CHECK)).scalar()
    if sealed is None:
        with contextlib.suppress(sa.exc.IntegrityError), db.transaction() as tx:
            tx.conn.execute(t.kv.insert().values(key=KEY_CHECK, value={"sealed": box.seal("ok")}))
        return
    try:
        box.open(sealed["sealed"])
    except RunbellError as exc:
        raise SystemExit(
            "runbell: this process's secret key is not the one that sealed the stored "
            "secrets. Set RUNBELL_SECRET_KEY (or share the data directory's secret.key) "
            "to the same value in every process."
        ) from exc
