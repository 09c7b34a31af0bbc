"""Verified bearer tokens remembered by one process for a few seconds.

Every API call names its credential; reading it from the database is one indexed lookup,
but on the event loop that lookup is a hop to a worker thread and back — per request, on
the hottest path (``POST /v1/runs/{id}/signals``). A process therefore remembers each
token it verified for ``ttl_s`` seconds (``RUNBELL_AUTH_CACHE_S``, 5 by default):

- keyed by the token's SHA-256 (what the database stores), never the token itself;
- only tokens that verified: an unknown, revoked or expired one is read every time (and
  counted by ``flows.auth_failures``);
- never past the credential's own expiry (user and delegated tokens);
- forgotten at once by the flows of this process that revoke or change a credential
  (``flows.accounts``, ``flows.members``, ``flows.delegations``), so only *another*
  process (the CLI, a second API) waits: a revocation reaches every process within
  ``ttl_s``.

Ages are read from the database's clock (injected in tests), so a test moves time
instead of sleeping; a clock that steps backwards ends the entry.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from runbell.domain.principal import Principal
from runbell.ids import token_hash

__all__ = ["Credentials"]


class Credentials:
    """token hash → (principal, verified at, good until). Safe to share between threads."""

    def __init__(self, ttl_s: float, *, max_entries: int = 10_000) -> None:
        self.ttl = timedelta(seconds=ttl_s)
        self.max_entries = max_entries
        self._entries: dict[str, tuple[Principal, datetime, datetime]] = {}
        self._lock = threading.Lock()
        # Bumped by forget(): a lookup that read the database before a revocation in this
        # process committed must not remember what it read (see put's ``generation``).
        self.generation = 0

    @property
    def enabled(self) -> bool:
        return self.ttl > timedelta(0)

    def get(self, token: str, now: datetime) -> Principal | None:
        """The principal ``token`` verified as less than ``ttl_s`` ago, or None."""
        if not self.enabled:
            return None
        entry = self._entries.get(token_hash(token))
        if entry is None:
            return None
        who, verified_at, until = entry
        if verified_at <= now < until:
            return who
        return None

    def put(
        self,
        token: str,
        who: Principal,
        now: datetime,
        expires_at: datetime | None,
        *,
        generation: int,
    ) -> None:
        """Remember a principal the database confirmed at ``now``; ``generation`` is
        :attr:`generation` as it was before that read (a stale read is not kept)."""
        if not self.enabled:
            return
        until = now + self.ttl
        if expires_at is not None and expires_at < until:
            until = expires_at
        with self._lock:
            if generation != self.generation:
                return
            if len(self._entries) >= self.max_entries:
                self._entries = {
                    k: v for k, v in self._entries.items() if v[1] <= now < v[2]
                }  # a burst of distinct tokens (delegations) must not grow it without bound
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()
            self._entries[token_hash(token)] = (who, now, until)

    def forget(self) -> None:
        """Drop everything: a credential changed in this process (revoked, re-roled)."""
        with self._lock:
            self.generation += 1
            self._entries = {}
