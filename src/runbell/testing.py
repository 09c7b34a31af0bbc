"""Test helpers shipped with the package, for Runbell's tests and for yours.

- :class:`Clock`: a controllable clock to hand to ``runbell.app.build(clock=...)``.
- :func:`make_tenant`: a tenant with an admin key, a runtime key and an owner's token.
- :class:`~runbell.ingress.readers.StaticReader`: an in-memory state reader.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from runbell.flows import accounts
from runbell.flows.context import Runbell
from runbell.ingress.readers import StaticReader

__all__ = ["Clock", "StaticReader", "TenantCreds", "add_user", "make_tenant"]


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


def make_tenant(core: Runbell, name: str = "acme", owner_email: str | None = None) -> TenantCreds:
    """A new tenant with an admin key, a runtime key and an owner (with a user token)."""
    email = owner_email or f"owner@{name}.test"
    tenant_id, admin = accounts.create_tenant(core, name)
    _, runtime = accounts.create_key(core, tenant_id, "runtime")
    _, user_id, token = accounts.add_member(core, tenant_id, email, "owner")
    return TenantCreds(tenant_id, admin, runtime, user_id, email, token)


def add_user(core: Runbell, tenant_id: str, email: str, role: str = "member") -> tuple[str, str]:
    """A new member of ``tenant_id``: returns (user id, user token)."""
    _, user_id, token = accounts.add_member(core, tenant_id, email, role)
    return user_id, token
