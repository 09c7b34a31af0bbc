"""Digests that are sent: the flush sweep, and what a digest notification shows.

A policy rule that decides ``digest`` leaves an item (``store.digests``) next to the
transition's own inbox notification, in the transition's transaction
(``flows.attention``). :func:`flush_due` — a scheduler sweep, one leader — turns each
recipient's items of one key and window into ONE ``digest`` notification when the window
closes or the items reach the rule's maximum, with its outbox rows for the channels the
recipient consented to at the digest's urgency (the highest of its items').

Invariants kept here (DESIGN §2):

- 1: a digest notification is unique like every other: its ``run_id`` is the synthetic
  ``digest:<key>`` (no run page serves it; a digest is known by its attention type) and its
  ``transition_version`` the recipient's digest ordinal for that key.
- 12: exactly once. The digest's identity (tenant, recipient, key, window start, part) is
  unique, its items are claimed in the same transaction, and its notification, outbox
  rows and feed event commit with it; a flusher that loses a race (two schedulers, a retry
  after a crash) rolls back and creates nothing.
- 11: the digest's texts say how many, never which; its items (links to their runs)
  load after authentication, through ``GET /v1/notifications/{id}`` and ``/n/{id}``.
- 8: an item whose run the person may no longer see is listed as hidden; a former
  member's waiting items are dropped, never sent.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import NotRequired, TypedDict

import structlog
from sqlalchemy.engine import Connection

from runbell import metrics
from runbell.domain import digests as rules
from runbell.domain.channels import INBOX, offered
from runbell.domain.principal import Principal
from runbell.domain.records import DigestGroup, Notification
from runbell.flows import pacing
from runbell.flows.attention import _push_deliveries, notification_event
from runbell.flows.context import Core
from runbell.flows.views import iso
from runbell.ids import new_id
from runbell.store import accounts, digests, outbox, runs
from runbell.store import notifications as notes
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)


class _Lost(Exception):
    """Another flusher made this digest first: roll back, create nothing."""


def flush_due(core: Core, now: datetime, limit: int = 100) -> int:
    """Send every digest whose window closed by ``now`` or that is full; returns how many
    were created. Each in its own transaction; a lost race counts nothing. Throttle
    counts of closed windows are pruned here too."""
    pacing.prune(core, now)
    with core.db.read() as conn:
        groups = digests.due_groups(conn, now, limit)
    sent = 0
    for group in groups:
        # A full window sends a part per max_items; what is left waits for the close.
        for _ in range(MAX_PARTS_PER_SWEEP):
            try:
                with core.db.transaction(now=now) as tx:
                    made = _flush(core, tx, group, closed=group["closes_at"] <= now)
            except _Lost:
                log.info("digest.lost_race", digest_key=group["digest_key"])
                break
            if made is None:
                break
            sent += 1
    return sent


MAX_PARTS_PER_SWEEP = 20


def _flush(core: Core, tx: Tx, group: DigestGroup, *, closed: bool) -> str | None:
    items = digests.unclaimed(tx.conn, group, int(group["max_items"]), lock=True)
    if not items or (not closed and len(items) < int(group["max_items"])):
        # Nothing left (another flusher claimed it), or an open window not yet full.
        return None
    tenant_id, recipient, key = group["tenant_id"], group["recipient_user_id"], group["digest_key"]
    if accounts.membership_role(tx.conn, tenant_id, recipient) is None:
        # The owner left the tenant (their open notifications were revoked): nobody to
        # tell, and nothing is sent to a former member (invariant 8).
        digests.drop(tx.conn, tenant_id, [i["id"] for i in items])
        log.info("digest.recipient_gone", digest_key=key, items=len(items))
        return None
    window_start = group["window_start"]
    note_id, digest_id = new_id("ntf"), new_id("dig")
    ordinal = digests.next_ordinal(tx.conn, tenant_id, recipient, key)
    part = digests.parts_sent(tx.conn, group) + 1
    if not digests.insert_digest(
        tx.conn,
        {
            "id": digest_id,
            "tenant_id": tenant_id,
            "recipient_user_id": recipient,
            "digest_key": key,
            "window_start": window_start,
            "part": part,
            "window_end": group["closes_at"],
            "ordinal": ordinal,
            "notification_id": note_id,
            "item_count": len(items),
            "created_at": tx.now,
        },
    ):
        raise _Lost(key)
    if digests.claim(tx.conn, tenant_id, digest_id, [i["id"] for i in items]) != len(items):
        raise _Lost(key)
    types = [i["attention_type"] for i in items]
    urgency = rules.highest([i["urgency"] for i in items])
    values: Notification = {
        "id": note_id,
        "tenant_id": tenant_id,
        "recipient_user_id": recipient,
        "run_id": rules.run_id_for(key),
        "transition_version": ordinal,
        "attention_type": "digest",
        "urgency": urgency,
        "decision": "push",
        "rule_id": items[0]["rule_id"],
        "inputs": {
            "digest_key": key,
            "window_start": iso(window_start),
            "window_end": iso(group["closes_at"]),
            "part": part,
            "items": len(items),
            "attention_types": dict(Counter(types)),
            "rule_ids": sorted({i["rule_id"] for i in items}),
        },
        "summary": rules.summary(types),
        "subject_version": None,
        "input_request_id": None,
        "reason": None,
        "expires_at": None,
        "state": "open",
        "closed_at": None,
        "closed_reason": None,
        "created_at": tx.now,
        "first_delivered_at": None,
        "first_seen_at": None,
    }
    if not notes.insert_once(tx.conn, values)[1]:
        raise _Lost(key)  # a digest of another window took this ordinal: next tick
    rows = [outbox.delivery_row(tenant_id, note_id, INBOX, recipient, "accepted", tx.now)]
    rows += _push_deliveries(
        tx, tenant_id, recipient, note_id, urgency, channels=offered(core.settings)
    )
    for row in rows:
        row.update({"run_id": values["run_id"], "urgency": urgency})
    outbox.add_deliveries(tx.conn, rows)
    tx.emit(
        tenant_id,
        PendingEvent(
            "notification.created",
            {**notification_event(values), "digest_key": key, "items": len(items)},
            notification_id=note_id,
            user_id=recipient,
        ),
    )
    tx.written[note_id] = values
    tx.after_commit.append(lambda: metrics.NOTIFICATIONS.labels("digest", "push").inc())
    log.info("digest.sent", notification_id=note_id, digest_key=key, items=len(items))
    return note_id


def is_digest(note: Notification) -> bool:
    return bool(note["attention_type"] == "digest")


class DigestItem(TypedDict):
    """One run a digest named; ``run_id``, ``title``, ``state`` and ``link`` only for a
    viewer who may see it."""

    run_id: str | None
    transition_version: int
    attention_type: str
    urgency: str
    rule_id: str
    notification_id: str
    at: str | None
    visible: bool
    title: str | None
    state: str | None
    link: str | None


class DigestView(TypedDict):
    key: str | None
    window_start: NotRequired[str | None]
    window_end: NotRequired[str | None]
    part: NotRequired[int]
    count: int
    items: list[DigestItem]


def digest_view(conn: Connection, viewer: Principal, note: Notification) -> DigestView:
    """The digest a notification sent: its window and its items, each a link to its run.

    ``viewer``: whose access decides which runs are named (the recipient's, for a trail).
    """
    found = digests.for_notification(conn, note["tenant_id"], note["id"])
    if found is None:
        return {"key": None, "items": [], "count": 0}
    items = digests.items_of(conn, note["tenant_id"], found["id"])
    run_ids = {i["run_id"] for i in items}
    visible = runs.visible_among(conn, viewer, run_ids)
    rows = runs.runs_by_id(conn, note["tenant_id"], run_ids)
    listed: list[DigestItem] = []
    for item in items:
        run = rows.get(item["run_id"]) if item["run_id"] in visible else None
        listed.append(
            {
                "run_id": item["run_id"] if run is not None else None,
                "transition_version": item["transition_version"],
                "attention_type": item["attention_type"],
                "urgency": item["urgency"],
                "rule_id": item["rule_id"],
                "notification_id": item["notification_id"],
                "at": iso(item["created_at"]),
                "visible": run is not None,
                "title": (run.title or run.run_id) if run is not None else None,
                "state": run.state if run is not None else None,
                "link": f"/runs/{item['run_id']}" if run is not None else None,
            }
        )
    return {
        "key": found["digest_key"],
        "window_start": iso(found["window_start"]),
        "window_end": iso(found["window_end"]),
        "part": found["part"],
        "count": len(items),
        "items": listed,
    }


def recipient(note: Notification, role: str) -> Principal:
    """The recipient as a principal (a trail judges by the recipient's access)."""
    return Principal(
        tenant_id=note["tenant_id"], kind="user", role=role, user_id=note["recipient_user_id"]
    )
