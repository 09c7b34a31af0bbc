"""What an operator's probes read: whether the database answers and at which schema
revision (readiness), the delivery counts behind ``/metrics``, and how long a client
should wait out a database outage.

Invariants kept here (DESIGN §2): 12 — an outage is the database's state, not a lost
record: callers are told to retry after a delay with the same event id or
Idempotency-Key, and a request that did commit is then answered as a duplicate. The
counts cover every tenant, so only the operator's ``/metrics`` reads them.
"""

from __future__ import annotations

from runbell.flows.context import Core
from runbell.store import outbox
from runbell.store.db import RETRY_AFTER_S, unavailable_reason
from runbell.store.migrate import current_revision, ping


def schema_revision(core: Core) -> str | None:
    """The database's schema revision after a round trip to it (None: not migrated);
    raises whatever the driver raises when the database does not answer."""
    with core.db.read() as conn:
        ping(conn)
    return current_revision(core.db.engine)


def delivery_counts(core: Core) -> list[tuple[str, str, int]]:
    """(channel, status, how many) over every tenant's deliveries."""
    with core.db.read() as conn:
        return outbox.counts_by_status(conn)


def retry_after_s(core: Core, exc: BaseException) -> int | None:
    """Seconds to tell a client to wait when ``exc`` says the database is unavailable
    (logged once per outage); None when it is another error (a bug: a 500)."""
    reason = core.db.availability.observe(exc)
    return None if reason is None else RETRY_AFTER_S[reason]


def unavailable(exc: BaseException) -> str | None:
    """Why ``exc`` means the database cannot serve right now (``"unreachable"``,
    ``"busy"``, ``"pool_timeout"``), or None when it is another error; for faces that
    report an outage without a running :class:`Runbell` (a CLI command's one line)."""
    return unavailable_reason(exc)
