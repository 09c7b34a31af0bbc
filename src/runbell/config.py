"""Settings, read once from the environment (``RUNBELL_*``) or passed in by tests.

A list setting takes a comma-separated value (``RUNBELL_OUTBOUND_ALLOW_HOSTS=a,b:8080``)
or a JSON list (``["a", "b:8080"]``). A value that does not fit is reported by
:func:`setting_problems` as one line per variable, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "RUNBELL_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    data_dir: Path = Field(default=Path("data"), description="Where the SQLite file and keys live.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default sqlite:///<data_dir>/runbell.db. "
        "PostgreSQL: postgresql+psycopg://user@host/db",
    )
    listen_database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL for the one LISTEN connection per process (cross-process "
        "wake-ups); default RUNBELL_DATABASE_URL. Set it to a direct (or session-pooled) URL "
        "when RUNBELL_DATABASE_URL goes through PgBouncer in transaction mode.",
    )
    db_start_timeout_s: float = Field(
        default=60.0,
        ge=0,
        description="How long a starting process (serve, api, worker, migrate) waits for an "
        "unreachable database, retrying with backoff and logging one line per attempt, "
        "before it exits 1 with one line. 0: one attempt.",
    )
    database_prepared_statements: bool = Field(
        default=True,
        description="Let psycopg prepare statements it runs often on the server. Turn off "
        "behind PgBouncer in transaction mode older than 1.21 (or with max_prepared_statements "
        "= 0), which hands one client's prepared statements to another.",
    )
    secret_key: str | None = Field(
        default=None,
        description="Fernet key sealing stored secrets; generated into data_dir when unset.",
    )
    public_url: str = Field(
        default="http://127.0.0.1:8080",
        description="Base for links. Unset: the address `runbell serve` last served on.",
    )
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    feed_retention_s: int = Field(default=7 * 24 * 3600, ge=60)
    # Never under three days: the dedupe window a retried signal or request relies on.
    inbound_retention_s: int = Field(default=30 * 24 * 3600, ge=3 * 24 * 3600)
    # --- retention (docs/operations.md "Retention"; a tenant may override each) ---------
    retention_transitions_days: int = Field(default=90, ge=1)
    retention_notifications_days: int = Field(default=90, ge=1)
    retention_deliveries_days: int = Field(default=30, ge=1)
    retention_delivery_attempts_days: int = Field(default=30, ge=1)
    retention_receipts_days: int = Field(default=90, ge=1)
    retention_mismatches_days: int = Field(default=30, ge=1)
    retention_operator_events_days: int = Field(default=90, ge=1)
    retention_schedule_firings_days: int = Field(default=90, ge=1)
    retention_batch: int = Field(
        default=1000, ge=1, le=10_000, description="Rows per prune statement (one transaction)."
    )
    retention_interval_s: float = Field(
        default=60.0, ge=60, description="How often the leader's retention sweep runs."
    )
    longpoll_max_s: float = Field(default=30.0, gt=0, le=30.0)
    hook_wait_max_s: float = Field(
        default=3000.0,
        gt=0,
        le=3000.0,
        description="The longest POST /v1/hooks/… waits for a person's answer (seconds).",
    )
    sse_keepalive_s: float = Field(default=15.0, gt=0)
    sse_access_recheck_s: float = Field(
        default=15.0, gt=0, description="How often an open stream re-checks its credentials."
    )
    feed_fallback_poll_s: float = Field(
        default=5.0, gt=0, description="Re-check interval if a wake-up was missed."
    )
    mismatch_max_checks: int = Field(default=5, ge=1)
    writer_max_batch: int = Field(
        default=64,
        ge=1,
        le=1000,
        description="Signals one process commits together at most (group commit); 1 turns "
        "batching off.",
    )
    # NoDecode: list settings are parsed by _list_setting below, not as JSON only.
    mismatch_backoff_s: Annotated[tuple[float, ...], NoDecode] = Field(
        default=(5.0, 30.0, 120.0, 600.0, 1800.0), min_length=1
    )
    scheduler_interval_s: float = Field(default=1.0, gt=0)
    presence_ttl_s: float = Field(
        default=30.0,
        ge=3,
        description="A viewer's presence row lives this long unless its process refreshes it "
        "(every third of it); a process that died stops counting as watching after this.",
    )
    auth_cache_s: float = Field(
        default=5.0,
        ge=0,
        le=60,
        description="How long a process trusts a bearer token it verified (a revocation made "
        "by another process reaches it within this); 0 reads every request's token.",
    )
    presence_cache_s: float = Field(
        default=2.0,
        ge=0,
        description="How long a process trusts what it read about viewers on other processes.",
    )
    outbound_allow_hosts: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(),
        description="Hosts (host or host:port) outbound calls may reach over http or at "
        "private addresses. Empty in production; tests list 127.0.0.1.",
    )
    first_user_email: str = "you@example.com"
    mcp_allowed_hosts: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(),
        description="More Host names /mcp answers to (host, host:port or host:*), besides the "
        "address it is served on and RUNBELL_PUBLIC_URL's. Any other Host is refused (403): "
        "DNS-rebinding protection (docs/integrations/mcp.md).",
    )
    mcp_allowed_origins: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(),
        description="Browser origins (scheme://host[:port]) whose pages may call /mcp, besides "
        "Runbell's own; a request with any other Origin (or Origin: null) is refused (403).",
    )
    # --- failed authentication (docs/operations.md "Failed sign-ins and bad credentials") -
    auth_failure_burst: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description="Failed authentications a client address (or a credential prefix, or a "
        "webhook source) may make per window before the next ones answer 429.",
    )
    auth_failure_window_s: float = Field(
        default=60.0,
        ge=1,
        le=86_400,
        description="The window RUNBELL_AUTH_FAILURE_BURST counts failures in (seconds).",
    )

    # --- delivery ---------------------------------------------------------------------
    worker_concurrency: int = Field(default=16, ge=1, le=256)
    # 100: claims and result writes of ~50 rows instead of ~25, half the transactions per
    # delivery of 50 (bench/profile/p3-p4-delivery.md, second pass).
    worker_batch: int = Field(default=100, ge=1, le=1000)
    worker_lease_s: float = Field(
        default=60.0,
        ge=1,
        description="A claimed delivery whose worker died is re-claimed "
        "after this long (keep it above the slowest channel's timeout).",
    )
    worker_poll_s: float = Field(default=2.0, gt=0, description="Fallback if a wake-up is lost.")
    outbound_timeout_s: float = Field(default=10.0, gt=0, le=60)
    webhook_rate_per_s: float = Field(
        default=50.0, gt=0, description="Per tenant, across all workers."
    )
    webhook_disable_after_dead: int = Field(
        default=5, ge=1, description="Consecutive dead letters that disable an endpoint."
    )
    smtp_host: str | None = None
    smtp_port: int = Field(default=25, ge=1, le=65535)
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
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO",
        description="DEBUG adds one line per signal, transition and notification (the feed "
        "and the trail are their record; at thousands a second the lines cost a third of "
        "the writer's time).",
    )

    @field_validator(
        "mismatch_backoff_s",
        "outbound_allow_hosts",
        "mcp_allowed_hosts",
        "mcp_allowed_origins",
        mode="before",
    )
    @classmethod
    def _list_setting(cls, value: Any) -> Any:
        """``a,b`` or ``["a", "b"]`` from the environment; lists passed in code as they are."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"not a JSON list ({exc.msg}); a comma-separated value works too: a,b"
                ) from None
        return [part.strip() for part in text.split(",") if part.strip()]

    @field_validator("mcp_allowed_hosts")
    @classmethod
    def _hosts(cls, value: frozenset[str]) -> frozenset[str]:
        from runbell.domain.origins import host_entry_problem

        for entry in sorted(value):
            if problem := host_entry_problem(entry):
                raise ValueError(problem)
        return value

    @field_validator("mcp_allowed_origins")
    @classmethod
    def _origins(cls, value: frozenset[str]) -> frozenset[str]:
        from runbell.domain.origins import origin_entry_problem

        for entry in sorted(value):
            if problem := origin_entry_problem(entry):
                raise ValueError(problem)
        return value

    @field_validator("mismatch_backoff_s")
    @classmethod
    def _positive_delays(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(delay <= 0 for delay in value):
            raise ValueError("every delay must be more than 0 seconds")
        return value

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http:// or https:// address people can open, "
                "e.g. https://runbell.example.com"
            )
        return value.strip()

    @field_validator("database_url", "listen_database_url")
    @classmethod
    def _supported_database(cls, value: str | None) -> str | None:
        """SQLite or PostgreSQL through psycopg 3; ``postgres://`` and ``postgresql://``
        (what hosting providers hand out) mean the same."""
        if value is None or not value.strip():
            return None
        import sqlalchemy as sa

        try:
            url = sa.make_url(value.strip())
        except sa.exc.ArgumentError:
            # Never echo the value: it may hold a password.
            raise ValueError(
                "not a database URL; e.g. postgresql+psycopg://user@host/db or sqlite:///path"
            ) from None
        if url.drivername in ("postgres", "postgresql"):
            url = url.set(drivername="postgresql+psycopg")
        if url.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
            raise ValueError(
                f"{url.drivername!r} is not supported; use postgresql+psycopg://… or sqlite:///…"
            )
        return url.render_as_string(hide_password=False)

    @field_validator("secret_key")
    @classmethod
    def _fernet_key(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        from cryptography.fernet import Fernet

        try:
            Fernet(value.strip())
        except ValueError:
            raise ValueError(
                "not a key Runbell can use: 32 url-safe base64-encoded bytes, as printed by "
                "`runbell secret-key`"
            ) from None
        return value.strip()

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'runbell.db').resolve()}"


def setting_problems(exc: ValidationError) -> list[str]:
    """One line per invalid setting, naming its environment variable, e.g.
    ``RUNBELL_SMTP_PORT: Input should be less than or equal to 65535``.

    The value itself is never repeated: it may be a password or a key."""
    lines: dict[str, str] = {}
    for error in exc.errors(include_input=False, include_url=False):
        loc = error["loc"]
        name = f"{ENV_PREFIX}{str(loc[0]).upper()}" if loc else "settings"
        reason = str(error["msg"]).removeprefix("Value error, ")
        if len(loc) > 1 and isinstance(loc[1], int):
            reason = f"item {loc[1] + 1}: {reason}"
        lines.setdefault(name, f"{name}: {reason}")
    return list(lines.values())
