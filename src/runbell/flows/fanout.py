"""Feed events → tenant-webhook deliveries, in the transaction that made the events.

Runs as a ``Database.before_flush`` hook, so a webhook message exists if and only if
its event committed (no flush-after-commit gap, no message for a rolled-back change).
Each message is deduped in the database by (tenant, channel, endpoint, event key) and
its payload is fixed now, so retries and replays send identical bytes under one id.

Invariants kept here (DESIGN §2): 12 (a message commits with its event, or not at all),
14 (one stable message identity, so a retried or replayed webhook is the same message),
5 (progress events are never forwarded), 11 (thin payloads: ids, states, public reason,
report texts, links — never details or errors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from runbell.domain.operations import NO_OPERATIONS
from runbell.flows.views import iso
from runbell.ids import new_id
from runbell.store import endpoints, outbox
from runbell.store.db import PendingEvent, Tx
from runbell.store.endpoints import WEBHOOK_EVENT_TYPES

# Feed events that become webhook messages: every webhook event type but run.finished,
# which is derived from a terminal run.transitioned. Progress stays live-only (inv. 5).
FORWARDED = frozenset(WEBHOOK_EVENT_TYPES) - {"run.finished"}


class Message(NamedTuple):
    """One webhook message a feed event makes: its type, its dedupe key, and its data
    (the event's JSON payload as the feed carries it, with the tenant's id)."""

    event_type: str
    key: str
    data: dict[str, Any]


def messages(tenant_id: str, ev: PendingEvent, public_url: str) -> list[Message]:
    """(event type, event key, data) for each webhook message one feed event makes.

    Every message's data names its ``tenant_id``: an integrator who points several
    tenants' endpoints at one receiver must be able to tell them apart (the feed needs no
    such field: a feed reader's credential is already one tenant's).
    """
    if ev.type not in FORWARDED:
        return []
    data = {**ev.data, "tenant_id": tenant_id}
    if ev.notification_id:
        key = f"{ev.type}:{ev.notification_id}"
    elif ev.type == "operation.updated":
        # An operation reaches each state at most once (its moves form no cycle).
        key = f"{ev.type}:{ev.run_id}:{data.get('operation_id')}:{data.get('state')}"
    elif ev.type == "operation.superseded":
        # An operation is superseded at most once.
        key = f"{ev.type}:{ev.run_id}:{data.get('operation_id')}"
    elif ev.type == "run.owner_changed":
        # A claim does not bump the run's version; every ownership change bumps the epoch.
        key = f"{ev.type}:{ev.run_id}:{data.get('epoch')}"
    else:
        # Several requests can end at one run version (expiry does not bump it).
        which = data.get("mismatch_id") or data.get("input_request_id") or ""
        key = f"{ev.type}:{ev.run_id}:{data.get('version')}:{which}"
    out = [Message(ev.type, key, data)]
    if ev.type == "run.transitioned" and data.get("terminal"):
        report = data.get("report") or {}
        out.append(
            Message(
                "run.finished",
                f"run.finished:{ev.run_id}:{data.get('version')}",
                {
                    "tenant_id": tenant_id,
                    "run_id": ev.run_id,
                    "kind": data.get("kind"),
                    "status": data.get("state"),
                    "stop_reason": data.get("stop_reason"),
                    "version": data.get("version"),
                    "iterations": report.get("iterations"),
                    "spend": report.get("spend"),
                    "summary": report.get("summary"),
                    "trace_id": report.get("trace_id"),
                    "links": report.get("links"),
                    # What the counts count (flows.completion): never "9 of 15".
                    "operations": data.get("operations") or {"counts": {}, "text": NO_OPERATIONS},
                    "outcome": data.get("outcome"),
                    "deep_link": f"{public_url}/runs/{ev.run_id}",
                },
            )
        )
    return out


def make_hook(public_url: Callable[[], str]) -> Callable[[Tx], None]:
    def fanout(tx: Tx) -> None:
        rows = []
        for tenant_id, events in tx.events.items():
            found: list[dict[str, Any]] | None = None
            for ev in events:
                if found == []:  # the tenant has no endpoint: its other events make no rows
                    break
                for event_type, key, data in messages(tenant_id, ev, public_url()):
                    if found is None:  # read once per tenant per transaction (batch)
                        found = endpoints.for_fanout(tx.conn, tenant_id)
                    for ep in found:
                        if not endpoints.wants(ep, event_type):
                            continue
                        row = outbox.delivery_row(
                            tenant_id,
                            None,
                            "webhook",
                            ep["id"],
                            "queued",
                            tx.now,
                        )
                        if ep["status"] != "enabled":
                            row.update(
                                {
                                    "status": "cancelled",
                                    "next_attempt_at": None,
                                    "last_error": "endpoint disabled",
                                }
                            )
                        row.update(
                            {
                                "id": new_id("dlv"),
                                "run_id": ev.run_id,
                                "event_type": event_type,
                                "event_key": key,
                                "payload": {
                                    "type": event_type,
                                    "timestamp": iso(tx.now),
                                    "data": data,
                                },
                            }
                        )
                        rows.append(row)
        if rows:
            outbox.add_deliveries(tx.conn, rows)
            tx.wake_outbox = True

    return fanout
