"""Fire due webhook schedules: the scheduler's ``schedules`` sweep (issue 18 item 6).

For each active ``webhook`` schedule whose ``next_fire_at`` has come, in one transaction
under the schedule's row lock: re-check it is still active and due, record the occurrence
(``schedule_firings``, keyed by the occurrence, so it is recorded at most once whoever
sweeps) and move ``next_fire_at`` to the next occurrence after now. Only after that commit
is the request sent: a Standard Webhooks POST signed with the schedule's secret, under a
``webhook-id`` made from the schedule and the occurrence, so a receiver can dedupe. What
the runtime answered is recorded on the occurrence.

Runbell starts nothing itself: the request asks the runtime to start a run, which it does
with ``PUT /v1/runs/{id}`` naming the schedule (``flows.schedule_start``).

Invariants kept here (DESIGN §2):

- 12 (doubles nothing): an occurrence is fired at most once, across processes (the
  scheduler's leader lock, the row lock and the occurrence's primary key); a crash after
  the record and before the send loses that one request rather than sending it twice.
  Occurrences missed while nothing swept are one firing, the latest.
- 14: the URL passes the SSRF guard on every send (``runbell.outbound``), redirects are
  not followed, and the signing secret is opened only to sign; no secret is logged.
- A paused, revoked or ``record_only`` schedule fires nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import httpx
import structlog

from runbell.domain import schedules as rules
from runbell.domain.errors import UnsafeDestination
from runbell.domain.text import public_text
from runbell.flows.context import Core
from runbell.flows.views import iso
from runbell.outbound import safe_client
from runbell.signatures import sign_headers
from runbell.store import schedules as store

log = structlog.get_logger(__name__)

EVENT_TYPE = "schedule.due"
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Occurrence:
    """One occurrence recorded as being sent, and what to send."""

    tenant_id: str
    schedule_id: str
    due_at: datetime
    webhook_id: str
    url: str
    sealed_secret: str
    body: bytes


def webhook_id(schedule_id: str, due_at: datetime) -> str:
    """The same id for the same occurrence, whoever fires it: receivers dedupe on it."""
    return f"msg_{schedule_id}_{int(due_at.timestamp())}"


def sweep(core: Core, now: datetime, limit: int = 100) -> int:
    """Fire every due occurrence (one batch of at most ``limit``); returns how many."""
    with core.db.read() as conn:
        due = store.due(conn, now, limit)
    fired = 0
    for tenant_id, schedule_id in due:
        claimed = claim(core, tenant_id, schedule_id, now)
        if claimed is not None:
            send(core, claimed)
            fired += 1
    return fired


def claim(core: Core, tenant_id: str, schedule_id: str, now: datetime) -> Occurrence | None:
    """Record the due occurrence of one schedule and move its clock on; None when there is
    nothing to fire (no longer active or due, or another sweeper recorded it)."""
    with core.db.transaction(now=now) as tx:
        s = store.get(tx.conn, tenant_id, schedule_id, for_update=True)
        if (
            s is None
            or s.state != "active"
            or s.mode != "webhook"
            or s.next_fire_at is None
            or s.next_fire_at > now
            or not s.url
            or not s.secret
        ):
            return None
        due_at = max(rules.latest_due(s.cadence, now), s.next_fire_at)
        msg_id = webhook_id(s.id, due_at)
        store.update(
            tx.conn,
            tenant_id,
            s.id,
            next_fire_at=rules.next_after(s.cadence, max(now, due_at)),
            updated_at=tx.now,
        )
        if not store.record_firing(tx.conn, s, due_at, msg_id, tx.now):
            return None
        text = store.instruction(tx.conn, tenant_id, s.id, s.instruction_version).text
        payload = {
            "type": EVENT_TYPE,
            "timestamp": iso(now),
            "data": {
                "schedule_id": s.id,
                "name": s.name,
                "occurrence": iso(due_at),
                "owner": s.owner_user_id,
                "instruction": {"version": s.instruction_version, "text": text},
                "authority": {"version": s.authority_version, "authority": s.authority},
                # What to send back to start a run under this schedule.
                "start_with": {"schedule": {"id": s.id}},
            },
        }
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        return Occurrence(tenant_id, s.id, due_at, msg_id, s.url, s.secret, body)


def send(core: Core, claimed: Occurrence) -> str:
    """POST the occurrence, signed; record what happened (sent | failed) and return it."""
    status_code: int | None = None
    error: str | None = None
    try:
        secret = core.box.open(claimed.sealed_secret)
        headers = sign_headers(claimed.body, secret, claimed.webhook_id, core.db.clock())
        headers["content-type"] = "application/json"
        with safe_client(core.settings.outbound_allow_hosts, TIMEOUT_S) as client:
            response = client.post(claimed.url, content=claimed.body, headers=headers)
        status_code = response.status_code
        if not 200 <= status_code < 300:
            error = f"the runtime answered {status_code}"
    except UnsafeDestination as exc:
        error = f"refused by the SSRF guard: {exc.detail}"
    except httpx.HTTPError as exc:
        error = f"not delivered: {type(exc).__name__}"
    status = "sent" if error is None else "failed"
    with core.db.transaction() as tx:
        store.settle_firing(
            tx.conn,
            claimed.tenant_id,
            claimed.schedule_id,
            claimed.due_at,
            status=status,
            status_code=status_code,
            error=public_text(error, 200),
            now=tx.now,
        )
    log.info(
        "schedule.fired",
        schedule_id=claimed.schedule_id,
        webhook_id=claimed.webhook_id,
        status=status,
        status_code=status_code,
    )
    return status
