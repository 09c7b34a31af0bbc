"""Wiring: build the database, the secret box and the core from settings."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

from runbell.config import Settings
from runbell.core import Runbell
from runbell.crypto import SecretBox, load_or_create_key
from runbell.store import kv
from runbell.store.db import Database
from runbell.store.migrate import upgrade


def utcnow() -> datetime:
    return datetime.now(UTC)


def build(
    settings: Settings, *, clock: Callable[[], datetime] = utcnow, migrate: bool = True
) -> Runbell:
    db = open_database(settings, clock=clock, migrate=migrate)
    key = settings.secret_key or load_or_create_key(settings.data_dir)
    box = SecretBox(key)
    if migrate:
        check_secret_key(db, box)
    return Runbell(settings, db, box=box)


def prepare_data_dir(settings: Settings) -> None:
    """Create the SQLite data directory private (0700): it holds the database, which keeps
    run and request details in clear, and the secret key. An existing one is left as is."""
    if settings.resolved_database_url().startswith("sqlite"):
        settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)


def open_database(
    settings: Settings, *, clock: Callable[[], datetime] = utcnow, migrate: bool = True
) -> Database:
    """The database alone (no secret key needed), migrated unless told otherwise."""
    prepare_data_dir(settings)
    db = Database(settings.resolved_database_url(), clock=clock)
    if migrate:
        upgrade(db.engine)
    return db


SERVED_URL = "served_url"


def record_served_url(db: Database, url: str) -> None:
    """Remember the base of links `runbell serve` uses (RUNBELL_PUBLIC_URL, or where it
    listens), so commands run from another terminal link to the same place."""
    with db.transaction() as tx:
        kv.put(tx.conn, SERVED_URL, {"url": url, "at": tx.now.isoformat()})


def links_base(settings: Settings, db: Database) -> str:
    """The base of links a command prints or sends: RUNBELL_PUBLIC_URL when it is set,
    else what `runbell serve` last recorded, else the default."""
    if "public_url" in settings.model_fields_set:
        return settings.public_url.rstrip("/")
    with db.read() as conn:
        served = kv.get(conn, SERVED_URL)
    return str(served["url"] if served else settings.public_url).rstrip("/")


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
