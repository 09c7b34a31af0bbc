"""What every flow is given: the process's dependencies, and no use cases of its own.

:class:`Runbell` is built once per process by :func:`runbell.app.build` and handed to the
faces (API, web app, CLI, worker, scheduler), which pass it to the flow they call. It holds
the database (with its clock), the process's runtime machinery (the wake-up hub, the
group-commit writer, the presence registry; ``runbell.runtime``), the secret box, the
settings, how state readers are built, and the per-process policy cache. A flow module
takes it as its first argument (``core``) and owns the transaction it opens.

Invariants kept here (DESIGN §2): none of its own — it only makes sure every unit of work
registers the tenant-webhook fan-out (``flows.fanout``), so invariant 12 holds for webhook
messages whichever flow committed the events.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from runbell.config import Settings
from runbell.crypto import SecretBox
from runbell.domain.policy import Policy, TenantPolicy
from runbell.flows.fanout import make_hook
from runbell.ingress import reader_kinds
from runbell.ingress.readers import StateReader
from runbell.runtime.hub import Hub
from runbell.runtime.leader import leading
from runbell.runtime.presence import Presence
from runbell.runtime.writer import GroupCommitter
from runbell.store.accounts import Source
from runbell.store.db import Database

#: A source (with a reader config) → its state reader (tests inject their own).
ReaderFactory = Callable[[Source], StateReader]


class PolicyCache:
    """Parsed tenant policies by (tenant, document hash): a stored document is parsed once
    per process, and an edited one is a new key, so nothing here can go stale."""

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str], Policy] = {}

    def get(self, tenant_id: str, doc: TenantPolicy | None) -> Policy:
        if not doc:
            return Policy.default()
        key = (tenant_id, hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest())
        policy = self._parsed.get(key)
        if policy is None:
            policy = self._parsed[key] = Policy.from_mapping(doc, base=Policy.default())
        return policy


class Core:
    """The dependencies of one Runbell process (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        box: SecretBox,
        presence: Presence | None = None,
        hub: Hub | None = None,
        reader_factory: ReaderFactory | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.box = box
        self.hub = hub or Hub()
        db.after_commit.append(self.hub.committed)
        self._writer: GroupCommitter | None = None
        self._writer_lock = threading.Lock()
        db.on_dispose.append(self._stop_writer)
        self.presence = presence or Presence(
            db, ttl_s=settings.presence_ttl_s, cache_s=settings.presence_cache_s
        )
        self.policies = PolicyCache()
        self.reader_factory: ReaderFactory = reader_factory or self._http_reader
        # Tests and embedders may pin a reader per source id (e.g. a StaticReader).
        self.reader_overrides: dict[str, StateReader] = {}
        # Small per-process memos with their own expiry rules (e.g. a key's source,
        # flows.signals.api_source); flows that change what they remember clear them.
        self.memo: dict[Any, Any] = {}
        # Tenant-webhook messages are written in the same transaction as their events.
        db.before_flush.append(make_hook(lambda: self.public_url))

    @property
    def writer(self) -> GroupCommitter:
        """The process's group committer (:mod:`runbell.runtime.writer`), started on first
        use and stopped when the database is disposed of."""
        if self._writer is None:
            with self._writer_lock:
                if self._writer is None:
                    self._writer = GroupCommitter(self.db, max_batch=self.db.writer_max_batch)
        return self._writer

    def leading(self, key: int) -> AbstractContextManager[bool]:
        """True inside while this process holds the sweep lock ``key``
        (:mod:`runbell.runtime.leader`): one process runs each sweep per tick."""
        return leading(self.db, key)

    def _stop_writer(self) -> None:
        if self._writer is not None:
            self._writer.stop()

    @property
    def public_url(self) -> str:
        """The base of every link Runbell hands out, without a trailing slash."""
        return self.settings.public_url.rstrip("/")

    def _http_reader(self, source: Source) -> StateReader:
        """A source's registered reader config, its sealed secrets opened, on an SSRF-safe
        client (``mcp_tasks`` guards its own connections with the same allow-list)."""
        config = source.reader
        assert config is not None  # flows.reconcile.reader_for asks only for a reader's source
        from runbell.outbound import safe_client

        opened = reader_kinds.opened(config, self.box.open)
        client = safe_client(
            allow_hosts=self.settings.outbound_allow_hosts,
            timeout=float(config.get("timeout", 5.0)),
        )
        return reader_kinds.build(opened, client, allow_hosts=self.settings.outbound_allow_hosts)
