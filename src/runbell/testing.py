"""Test helpers shipped with the package, for Runbell's tests and for yours.

- :class:`Clock`: a controllable clock to hand to ``runbell.app.build(clock=...)``.
- :func:`make_tenant`: a tenant with an admin key, a runtime key and an owner's token.
- :class:`~runbell.ingress.readers.StaticReader`: an in-memory state reader.
- :func:`server`: a whole Runbell (real uvicorn on a loopback port, a temporary SQLite
  file, the scheduler running) for testing your agent against the real API::

      import runbell.testing
      from runbell.client import Client

      def test_my_agent() -> None:
          with runbell.testing.server() as srv:
              client = Client(srv.url, srv.runtime_key, srv.owner_email)
              client.put_run("job-1", title="Nightly", state="working")
              ...
              srv.answer("ask-1", "approve")   # as the owner, through the API
"""

from __future__ import annotations

import secrets
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.ingress.readers import StaticReader

__all__ = [
    "Clock",
    "Server",
    "StaticReader",
    "TenantCreds",
    "add_user",
    "make_tenant",
    "server",
]


class Clock:
    """Real time until frozen; then moves only when told. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._frozen = start

    def __call__(self) -> datetime:
        with self._lock:
            return self._frozen if self._frozen is not None else datetime.now(UTC)

    def freeze(self, at: datetime | None = None) -> datetime:
        with self._lock:
            self._frozen = at or datetime.now(UTC)
            return self._frozen

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            base = self._frozen or datetime.now(UTC)
            self._frozen = base + timedelta(seconds=seconds)
            return self._frozen


@dataclass(frozen=True)
class TenantCreds:
    tenant_id: str
    admin_key: str
    runtime_key: str
    owner_id: str
    owner_email: str
    owner_token: str


def make_tenant(core: Core, name: str = "acme", owner_email: str | None = None) -> TenantCreds:
    """A new tenant with an admin key, a runtime key and an owner (with a user token)."""
    email = owner_email or f"owner@{name}.test"
    tenant_id, admin = accounts.create_tenant(core, name)
    _, runtime = accounts.create_key(core, tenant_id, "runtime")
    _, user_id, token = accounts.add_member(core, tenant_id, email, "owner")
    return TenantCreds(tenant_id, admin, runtime, user_id, email, token)


def add_user(core: Core, tenant_id: str, email: str, role: str = "member") -> tuple[str, str]:
    """A new member of ``tenant_id``: returns (user id, user token)."""
    _, user_id, token = accounts.add_member(core, tenant_id, email, role)
    return user_id, token


@dataclass
class Server:
    """A running in-process Runbell (see :func:`server`). ``core`` is the server's own
    context, for assertions that look past the API."""

    url: str
    tenant_id: str
    admin_key: str
    runtime_key: str
    owner_id: str
    owner_email: str
    owner_token: str
    core: Core
    #: What a second process (``runbell user add …``, a worker) needs to reach the same
    #: database: set them as ``RUNBELL_DATABASE_URL``, ``RUNBELL_DATA_DIR`` and
    #: ``RUNBELL_SECRET_KEY``.
    database_url: str = ""
    data_dir: Path | None = None
    secret_key: str = ""
    tenant_name: str = "test"

    def env(self) -> dict[str, str]:
        """The ``RUNBELL_*`` variables a CLI or SDK process needs for this server: the
        database, data directory and secret key (admin commands), and the URL, runtime
        key and owner (`runbell report`, ``Client.from_env()``)."""
        return {
            "RUNBELL_DATABASE_URL": self.database_url,
            "RUNBELL_DATA_DIR": str(self.data_dir or ""),
            "RUNBELL_SECRET_KEY": self.secret_key,
            "RUNBELL_URL": self.url,
            "RUNBELL_KEY": self.runtime_key,
            "RUNBELL_OWNER": self.owner_email,
        }

    def answer(
        self,
        request_id: str,
        decision: str,
        value: str | None = None,
        *,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Answer an input request through the API as the owner (or ``token``'s user),
        the way the web app does: read it, then respond bound to the versions seen."""
        headers = {"Authorization": f"Bearer {token or self.owner_token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as http:
            seen = http.get(f"/v1/input-requests/{request_id}")
            seen.raise_for_status()
            body: dict[str, Any] = {
                "decision": decision,
                "expected_run_version": seen.json()["run"]["version"],
                "expected_request_version": seen.json()["input_request"]["version"],
            }
            if value is not None:
                body["value"] = value
            answered = http.post(
                f"/v1/input-requests/{request_id}/responses",
                json=body,
                headers={"Idempotency-Key": uuid.uuid4().hex},
            )
            answered.raise_for_status()
            result: dict[str, Any] = answered.json()
            return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(
    *,
    data_dir: Path | None = None,
    owner_email: str = "owner@runbell.test",
    tenant: str = "test",
    scheduler: bool = True,
    **settings: Any,
) -> Iterator[Server]:
    """A real Runbell for your tests: uvicorn on a free loopback port, over a fresh
    SQLite file in a temporary directory (or ``data_dir``), with one tenant (named
    ``tenant``), its keys and an owner, and the scheduler (expiry, stalls) running.
    ``settings`` override :class:`runbell.config.Settings` fields. Stopped and removed
    on exit. :meth:`Server.env` gives another process the same database."""
    import uvicorn

    from runbell.app import build, create_app, record_served_url
    from runbell.config import Settings
    from runbell.dispatch.scheduler import Scheduler

    with tempfile.TemporaryDirectory(prefix="runbell-test-") as tmp:
        root = data_dir or Path(tmp)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        values: dict[str, Any] = {
            "data_dir": root,
            "database_url": f"sqlite:///{root / 'runbell.db'}",
            "secret_key": _fernet_key(),
            "public_url": url,
            "outbound_allow_hosts": frozenset({"127.0.0.1"}),
        }
        values.update(settings)
        core = build(Settings(**values))
        creds = make_tenant(core, tenant, owner_email)
        record_served_url(core.db, url)  # `runbell user login-link` links here, as after `serve`
        config = uvicorn.Config(
            create_app(core), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
        uv = uvicorn.Server(config)
        thread = threading.Thread(target=uv.run, name="runbell-test-server", daemon=True)
        sched = Scheduler(core, interval_s=0.2) if scheduler else None
        thread.start()
        try:
            deadline = time.monotonic() + 15
            while not uv.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError("the test Runbell did not start")
                time.sleep(0.02)
            if sched is not None:
                sched.start()
            yield Server(
                url=url,
                tenant_id=creds.tenant_id,
                admin_key=creds.admin_key,
                runtime_key=creds.runtime_key,
                owner_id=creds.owner_id,
                owner_email=creds.owner_email,
                owner_token=creds.owner_token,
                core=core,
                database_url=str(values["database_url"]),
                data_dir=Path(values["data_dir"]),
                secret_key=str(values["secret_key"]),
                tenant_name=tenant,
            )
        finally:
            if sched is not None:
                sched.stop()
            uv.should_exit = True
            thread.join(timeout=15)
            core.db.dispose()


def _fernet_key() -> str:
    import base64

    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
