"""Acknowledging a group of the inbox at once: one run's, one subject's (an agent, a
project), or the notifications named; optionally only those of a filter, and none newer
than the newest the person saw. One transaction; again, it changes nothing.

Invariants kept here (DESIGN §2):

- 6: every notification closed here cancels its pending deliveries on every channel, in
  this transaction; a digest closes the notifications it folds with it.
- 10: acknowledging is not deciding: no request is answered.
- Tenant isolation and privacy: only the person's own notifications are touched; another
  tenant's or another person's ids are counted as ``not_found`` and left alone. A subject
  matches only runs the person may see now (a lost run does not say its subject).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from runbell.domain.errors import ValidationFailed
from runbell.domain.inbox import Subject
from runbell.domain.principal import Principal
from runbell.domain.records import Notification
from runbell.flows import inbox_ack
from runbell.flows.context import Core
from runbell.flows.idempotency import Answer, IdempotencyKey, act_once
from runbell.store import inbox as inbox_store
from runbell.store import notifications as notes
from runbell.store import runs
from runbell.store.db import Tx

#: The most one call acknowledges; ``more`` says when the group holds more.
BULK_LIMIT = 1000


@dataclass(frozen=True)
class Selection:
    """Which notifications to acknowledge: exactly one of ``run_id``, ``subject`` and
    ``notification_ids``; only those of attention ``types`` (a filter of
    ``domain.inbox.FILTERS``, or the types a page's group showed) when given; ``up_to``
    the newest notification id to include (the newest the person saw)."""

    run_id: str | None = None
    subject: Subject | None = None
    notification_ids: tuple[str, ...] | None = None
    types: tuple[str, ...] | None = None
    up_to: str | None = None

    def check(self) -> None:
        named = [x for x in (self.run_id, self.subject, self.notification_ids) if x is not None]
        if len(named) != 1:
            raise ValidationFailed(
                "name exactly one of run_id, subject and notification_ids", field="run_id"
            )
        if self.notification_ids is not None and len(self.notification_ids) > BULK_LIMIT:
            raise ValidationFailed(
                f"at most {BULK_LIMIT} notification ids at once", field="notification_ids"
            )


class Acknowledged(TypedDict):
    """What a group acknowledgement did: ``acknowledged`` how many it closed (with what
    the digests among them folded: ``folded`` of those), their ``ids``; ``already_closed``
    named ids that were closed before; ``not_found`` named ids that are not the caller's;
    ``more`` whether the group holds more than one call acknowledges."""

    acknowledged: int
    folded: int
    already_closed: int
    not_found: int
    more: bool
    ids: list[str]


def acknowledge_many(
    core: Core, who: Principal, sel: Selection, key: IdempotencyKey | None = None
) -> Answer:
    """Acknowledge the selected notifications of ``who`` in one transaction (200)."""
    sel.check()

    def act(tx: Tx) -> tuple[int, Acknowledged]:
        return 200, acknowledge_many_in(tx, who, sel)

    return act_once(core.db, core.box, key, lambda: act)


def acknowledge_many_in(tx: Tx, who: Principal, sel: Selection) -> Acknowledged:
    assert who.user_id is not None
    out: Acknowledged = {
        "acknowledged": 0,
        "folded": 0,
        "already_closed": 0,
        "not_found": 0,
        "more": False,
        "ids": [],
    }
    chosen: list[Notification]
    if sel.notification_ids is not None:
        wanted = list(dict.fromkeys(sel.notification_ids))
        found = {
            n["id"]: n
            for n in notes.get_many(tx.conn, who.tenant_id, wanted)
            if n["recipient_user_id"] == who.user_id
        }
        out["not_found"] = len(wanted) - len(found)
        out["already_closed"] = sum(n["state"] != "open" for n in found.values())
        chosen = [n for n in found.values() if n["state"] == "open"]
        if sel.types is not None:
            chosen = [n for n in chosen if n["attention_type"] in sel.types]
    else:
        chosen = inbox_store.select(
            tx.conn,
            who.tenant_id,
            who.user_id,
            states=["open"],
            types=sel.types,
            run_id=sel.run_id,
            subject_type=sel.subject[0] if sel.subject else None,
            subject_id=sel.subject[1] if sel.subject else None,
            up_to=sel.up_to,
            fold=True,  # what an open digest folds goes with the digest, not the group
            limit=BULK_LIMIT + 1,
        )
        out["more"] = len(chosen) > BULK_LIMIT
        chosen = chosen[:BULK_LIMIT]
        if sel.subject is not None:
            seen = runs.visible_among(tx.conn, who, {n["run_id"] for n in chosen})
            chosen = [n for n in chosen if n["run_id"] in seen]
    reason = inbox_ack.acknowledged_by(who)
    closed: set[str] = set()
    for note in chosen:
        if note["id"] in closed:
            continue  # a digest named earlier in the list folded it
        if inbox_ack.close_one(tx, who, note, reason):
            closed.add(note["id"])
            out["ids"].append(note["id"])
            folded = inbox_ack.close_folded(tx, who, note)
            out["folded"] += len(folded)
            out["ids"] += folded
            closed.update(folded)
    out["acknowledged"] = len(out["ids"])
    return out
