"""What the inbox page shows: the person's open notifications (without those an open
digest folds: the digest lists them), narrowed by a filter, a run or a subject; each open
digest's folded notifications; how many each filter and each subject would show; and what
closed recently.

Read-only, in one read transaction. Invariants kept here (DESIGN §2):

- 8: access is judged now: a run the person may no longer see gives no title and no
  subject (its notifications group under "runs you cannot see"); a digest names only the
  runs the person may see.
- 10: reading is not deciding: nothing here answers, acknowledges or marks seen.
- 17: ``head_cursor`` is read before what the page shows.
- Privacy: only the caller's own notifications.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from sqlalchemy.engine import Connection

from runbell.domain.inbox import FILTERS, InboxFilter, Subject, shows, subject_of
from runbell.domain.principal import Principal
from runbell.domain.records import Notification
from runbell.flows import digests
from runbell.flows.context import Core
from runbell.flows.input_requests import get_for_notification
from runbell.flows.pages import CLOSED_STATES, INBOX_CLOSED_LIMIT, Standing, standing
from runbell.store import feed, runs
from runbell.store import inbox as inbox_store
from runbell.store import notifications as notes

#: The most open notifications one page reads; ``truncated`` says when there are more.
OPEN_LIMIT = 1000


class FoldedItem(TypedDict):
    """A notification a digest folds: the run only when the person may see it."""

    notification_id: str
    attention_type: str
    state: str | None
    title: str | None  # None: a run the person may not see
    link: str | None


class SubjectCount(TypedDict):
    type: str
    id: str
    open: int


class InboxShown(TypedDict):
    """The inbox page's reads (see the module docstring). ``open`` and ``closed`` newest
    first; ``titles`` run id → title (None: not visible); ``subjects`` run id → subject
    (visible runs only); ``counts`` open notifications per filter (``all`` too) before the
    filter; ``agents`` the subjects of the open notifications with their counts."""

    head_cursor: int
    open: list[Standing]
    closed: list[Standing]
    titles: dict[str, str | None]
    subjects: dict[str, Subject | None]
    folds: dict[str, list[FoldedItem]]
    counts: dict[str, int]
    agents: list[SubjectCount]
    truncated: bool


def inbox_view(core: Core, who: Principal, now: datetime, only: InboxFilter) -> InboxShown:
    assert who.user_id is not None
    with core.db.read() as conn:
        head, _ = feed.bounds(conn, who.tenant_id)  # before the reads: no gap to the stream
        opened = inbox_store.select(
            conn, who.tenant_id, who.user_id, states=["open"], fold=True, limit=OPEN_LIMIT + 1
        )
        truncated = len(opened) > OPEN_LIMIT
        opened = opened[:OPEN_LIMIT]
        closed = notes.list_for_recipient(
            conn,
            who.tenant_id,
            who.user_id,
            states=list(CLOSED_STATES),
            before=None,
            limit=INBOX_CLOSED_LIMIT,
        )
        run_ids = {n["run_id"] for n in opened + closed if not digests.is_digest(n)}
        run_rows = runs.runs_by_id(conn, who.tenant_id, run_ids)
        visible = runs.visible_among(conn, who, run_ids)
        subjects = {
            rid: subject_of(run_rows[rid].subject) if rid in run_rows else None for rid in visible
        }

        def narrowed(run_id: str) -> bool:
            if only.run_id is not None and run_id != only.run_id:
                return False
            return only.subject_matches(subjects.get(run_id))

        counts = {"all": 0, **dict.fromkeys(FILTERS, 0)}
        by_subject: dict[Subject, int] = {}
        shown = []
        for n in opened:
            if not narrowed(n["run_id"]):
                continue
            counts["all"] += 1
            for name, types in FILTERS.items():
                counts[name] += n["attention_type"] in types
            subject = subjects.get(n["run_id"])
            if subject is not None:
                by_subject[subject] = by_subject.get(subject, 0) + 1
            if shows(only.show, n["attention_type"]):
                shown.append(n)
        asks = {n["id"]: get_for_notification(conn, n) for n in shown}
        folds = {n["id"]: _folded(conn, who, n) for n in shown if digests.is_digest(n)}
    return {
        "head_cursor": head,
        "open": [
            standing(n, run_rows.get(n["run_id"]), n["run_id"] in visible, now, asks[n["id"]])
            for n in shown
        ],
        "closed": [
            standing(n, run_rows.get(n["run_id"]), n["run_id"] in visible, now)
            for n in closed
            if narrowed(n["run_id"]) and shows(only.show, n["attention_type"])
        ],
        "titles": {
            **{rid: (run_rows[rid].title or rid) if rid in visible else None for rid in run_ids},
            # A digest's synthetic run id is never a run: its group is the digest itself.
            **{n["run_id"]: "Digest" for n in opened + closed if digests.is_digest(n)},
        },
        "subjects": subjects,
        "folds": folds,
        "counts": counts,
        "agents": [
            {"type": s[0], "id": s[1], "open": c}
            for s, c in sorted(by_subject.items(), key=lambda sc: (-sc[1], sc[0]))
        ],
        "truncated": truncated,
    }


def _folded(conn: Connection, who: Principal, digest: Notification) -> list[FoldedItem]:
    shown = digests.digest_view(conn, who, digest)
    ids = [i["notification_id"] for i in shown["items"]]
    states = {n["id"]: n["state"] for n in notes.get_many(conn, who.tenant_id, ids)}
    return [
        {
            "notification_id": i["notification_id"],
            "attention_type": i["attention_type"],
            "state": states.get(i["notification_id"]),
            "title": i["title"],
            "link": i["link"],
        }
        for i in shown["items"]
    ]
