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
    sse_access_recheck_s: float = Field(
        default=15.0, gt=0, description="How often an open stream re-checks its credentials."
    )
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

    # --- delivery ---------------------------------------------------------------------
    worker_concurrency: int = Field(default=16, ge=1, le=256)
    worker_batch: int = Field(default=50, ge=1, le=1000)
    worker_lease_s: float = Field(
        default=60.0,
        ge=1,
        description="A claimed delivery whose worker died is re-claimed "
        "after this long (keep it above the slowest channel's timeout).",
    )
    worker_poll_s: float = Field(default=2.0, gt=0, description="Fallback if a wake-up is lost.")
    outbound_timeout_s: float = Field(default=10.0, gt=0, le=60)
    webhook_rate_per_s: float = Field(default=50.0, gt=0, description="Per tenant, per worker.")
    webhook_disable_after_dead: int = Field(
        default=5, ge=1, description="Consecutive dead letters that disable an endpoint."
    )
    smtp_host: str | None = None
    smtp_port: int = 25
    smtp_starttls: bool = False
    smtp_tls: bool = False
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_from: str = "Runbell <runbell@localhost>"
    smtp_validate_certs: bool = True
    vapid_subject: str = "mailto:admin@localhost"
    metrics_token: str | None = Field(
        default=None, description="If set, /metrics requires Authorization: Bearer <token>."
    )
    log_json: bool = False

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'runbell.db').resolve()}"
