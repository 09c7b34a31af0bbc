"""Settings, read once from the environment (``RUNBELL_*``) or passed in by tests."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RUNBELL_", extra="ignore")

    data_dir: Path = Field(default=Path("data"), description="Where the SQLite file and keys live.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default sqlite:///<data_dir>/runbell.db. "
        "PostgreSQL: postgresql+psycopg://user@host/db",
    )
    secret_key: str | None = Field(
        default=None,
        description="Fernet key sealing stored secrets; generated into data_dir when unset.",
    )
    public_url: str = Field(default="http://127.0.0.1:8080", description="Base for deep links.")
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    feed_retention_s: int = Field(default=7 * 24 * 3600, ge=60)
    inbound_retention_s: int = Field(default=30 * 24 * 3600, ge=3600)
    longpoll_max_s: float = Field(default=30.0, gt=0, le=30.0)
    sse_keepalive_s: float = Field(default=15.0, gt=0)
    feed_fallback_poll_s: float = Field(
        default=5.0, gt=0, description="Re-check interval if a wake-up was missed."
    )
    mismatch_max_checks: int = Field(default=5, ge=1)
    mismatch_backoff_s: tuple[float, ...] = (5.0, 30.0, 120.0, 600.0, 1800.0)
    scheduler_interval_s: float = Field(default=1.0, gt=0)
    outbound_allow_hosts: frozenset[str] = Field(
        default=frozenset(),
        description="Hosts (host or host:port) outbound calls may reach over http or at "
        "private addresses. Empty in production; tests list 127.0.0.1.",
    )
    first_user_email: str = "you@example.com"
    log_json: bool = False

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'runbell.db').resolve()}"
