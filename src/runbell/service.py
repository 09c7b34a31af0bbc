"""Wiring: build the database, the secret box and the core from settings."""

from __future__ import annotations

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
    return Runbell(settings, db, box=SecretBox(key))
