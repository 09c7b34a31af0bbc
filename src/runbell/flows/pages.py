"""What the web app's pages show: the reads behind the viewer bar and a run page (the
inbox's are ``flows.inbox_view``), as plain dicts the web face turns into template context
(wording, local times).

Read-only: nothing here changes a row. Each page is read in one read transaction, after
the access check where the page has one.

Invariants kept here (DESIGN §2):

- 8: access is checked now, not when the notification was made: a run the person can no
  longer see gives its notifications only "access lost" and no title, and a run page
  opens through the same check as ``GET /v1/runs/{id}`` (404 for anyone else).
- 10: reading is not deciding: nothing here answers, acknowledges or marks seen.
- 17: a page's live-update cursor (``head_cursor``) is read before what the page shows,
  so the stream that resumes from it misses nothing the page did not show.
- Tenant isolation and privacy: only the caller's tenant; only their own notifications.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, TypedDict
from urllib.parse import urlsplit

from runbell.domain.errors import Forbidden
from runbell.domain.principal import Principal
from runbell.domain.records import (
    DeliveryAttempts,
    Endpoint,
    InputRequest,
    Notification,
    Run,
    Transition,
)
from runbell.flows import amendment_changes as change_rules
from runbell.flows import review, views
from runbell.flows.approvers import answer_refusal, may_answer
from runbell.flows.context import Core
from runbell.flows.operation_views import OperationView, operation_view
from runbell.flows.run_history import TraceStep, run_history
from runbell.flows.runs import RunSnapshot, get_run
from runbell.flows.trail import members
from runbell.store import (
    amendments,
    credential_names,
    destinations,
    endpoints,
    feed,
    operations,
    runs,
)
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store.amendments import Amendment

CLOSED_STATES = ("acknowledged", "resolved", "expired", "superseded", "revoked")
INBOX_CLOSED_LIMIT = 20
RUN_NOTES_LIMIT = 50


class Standing(Notification):
    """An inbox row: the notification and whether its action can still run, and why."""

    actionable: bool
    actionable_reason: str


class NotificationDeliveries(Notification):
    """A person's notification about the run, with its deliveries and their attempts."""

    deliveries: list[DeliveryAttempts]


class RunPageShown(TypedDict):
    """A run as its page shows it (see :func:`run_page`)."""

    head_cursor: int
    snapshot: RunSnapshot
    run: Run  # the stored row: times as datetimes
    owner_email: str
    cancel_requested_by_email: str | None
    pending_amendments: list[Amendment]
    transitions: list[Transition]
    pending_request: InputRequest | None
    may_answer: bool
    answer_refusal: str | None  # why this person may not answer the pending request
    amend_refusal: str | None  # why this person may not propose amendments
    my_notifications: list[NotificationDeliveries]
    answered_request: InputRequest | None
    decided_review: InputRequest | None  # the last review decision, once one was made
    operations: list[OperationView]
    people: dict[str, str]  # user id -> email (members only)
    credentials: dict[str, str]  # credential id -> its name (keys and tokens that have one)
    asked: dict[str, str]  # input request id -> its summary
    endpoints: dict[str, str]  # webhook endpoint id -> its label
    trace: list[TraceStep]  # every step, oldest first, with who caused it (flows.run_history)


def viewer(core: Core, who: Principal) -> dict[str, str]:
    """Who is looking: ``{email, timezone, locale}`` (the timezone name and locale as
    stored, ``UTC`` and ``en`` when never set; whether the zone is valid and the language
    one we have is the page's concern)."""
    assert who.user_id is not None
    with core.db.read() as conn:
        timezone, locale = destinations.timezone_and_locale(conn, who.tenant_id, who.user_id)
        email = destinations.email_of(conn, who.user_id)
    return {"email": str(email), "timezone": timezone, "locale": locale}


def standing(
    note: Notification,
    run: Run | None,
    visible: bool,
    now: datetime,
    request: InputRequest | None = None,
) -> Standing:
    ok, reason = (False, "access lost")
    if note["attention_type"] == "digest":
        ok, reason = views.actionable(note, None, now)  # no run of its own: informational
    elif run is not None and visible:
        ok, reason = views.actionable(note, run, now, request)
    return {**note, "actionable": ok, "actionable_reason": reason}


def run_page(
    core: Core, who: Principal, run_id: str, answered_request: str | None = None
) -> RunPageShown:
    """A run as its page shows it; :class:`~runbell.domain.errors.NotFound` when ``who``
    may not see it.

    ``{head_cursor, snapshot, run, owner_email, cancel_requested_by_email,
    pending_amendments, transitions, pending_request, may_answer, my_notifications,
    answered_request, operations, people, asked, endpoints}``: ``snapshot`` is what
    ``GET /v1/runs/{id}`` answers; ``run`` the stored row (times as datetimes);
    ``transitions`` oldest first;
    ``pending_request`` the newest pending input request or None; ``my_notifications``
    this person's own about the run (up to 50, newest first), each with its
    ``deliveries``; ``answered_request`` the request named by ``answered_request`` when
    it is of this run and this person answered it, else None; ``operations`` the
    run's ledger in declaration order (``flows.operation_views.operation_view``);
    ``people`` maps the user ids named in the ledger's evidence and the notifications'
    closing reasons to emails (members of the tenant only); ``credentials`` the API keys
    and delegated tokens the trace names to their names (those that have one); ``asked``
    maps the input requests the timeline names (``input request <id>``) to their summaries;
    ``endpoints`` maps the webhook endpoints the deliveries went to to a label.
    """
    snapshot = get_run(core, who, run_id)  # the access check, and the API's view of the run
    trace = run_history(core, who, run_id)["steps"]
    with core.db.read() as conn:
        head, _ = feed.bounds(conn, who.tenant_id)
        run = runs.require_run(conn, who.tenant_id, run_id)
        transitions = runs.list_transitions(conn, who.tenant_id, run_id)
        # The runtime's own question first; else a finished run's open review.
        waiting = requests.pending_for_run(conn, who.tenant_id, run_id)
        if not waiting and (open_review := review.pending(conn, run)) is not None:
            waiting = [open_review]
        decided = review.last_decided(conn, run) if run.state == "completed" else None
        may = may_answer(conn, who, run)
        refusal = answer_refusal(conn, who, run, waiting[-1]) if waiting else None
        try:
            change_rules.check_may_amend(conn, who, run)
            amend_refusal = None
        except Forbidden as exc:
            amend_refusal = exc.detail
        mine: list[NotificationDeliveries] = [
            {**note, "deliveries": notes.deliveries_for(conn, who.tenant_id, note["id"])}
            for note in notes.for_recipient_on_run(
                conn, who.tenant_id, who.user_id, run_id, limit=RUN_NOTES_LIMIT
            )
        ]
        owner = destinations.email_of(conn, run.owner_user_id)
        proposed = amendments.for_run(conn, who.tenant_id, run_id)
        asked_by = run.cancel_requested_by
        cancel_by = destinations.email_of(conn, asked_by) if asked_by else None
        ledger = [operation_view(op) for op in operations.for_run(conn, who.tenant_id, run_id)]
        named = views.user_ids_in(_ledger_texts(ledger))
        named |= views.user_ids_in(n.get("closed_reason") for n in mine)
        for step in trace:
            user_id = (step.get("actor") or {}).get("user_id")
            if user_id:
                named.add(str(user_id))
        people = members(conn, who.tenant_id, named)
        owner_credential = snapshot["completion_owner"].get("credential_id")
        credentials = credential_names.credential_names(
            conn,
            who.tenant_id,
            {
                str(c)
                for c in (
                    owner_credential,
                    *((step.get("actor") or {}).get("credential_id") for step in trace),
                )
                if c
            },
        )
        asked = {}
        for tr in transitions:
            m = _ASKED.fullmatch(str(tr.reason or ""))
            if m and m[1] not in asked:
                req = requests.get(conn, who.tenant_id, m[1])
                if req is not None and req.run_id == run_id:
                    asked[m[1]] = str(req.summary)
        hooks = {
            d["destination"] for n in mine for d in n["deliveries"] if d["channel"] == "webhook"
        }
        labels = (
            {e["id"]: _endpoint_label(e) for e in endpoints.list_all(conn, who.tenant_id)}
            if hooks
            else {}
        )
        answered = None
        if answered_request:
            answered = requests.get(conn, who.tenant_id, answered_request)
            if (
                answered is None
                or answered.run_id != run_id
                or answered.answered_by_id != who.user_id
            ):
                answered = None
    return {
        "head_cursor": head,
        "snapshot": snapshot,
        "run": run,
        "owner_email": str(owner),
        "cancel_requested_by_email": None if cancel_by is None else str(cancel_by),
        "pending_amendments": proposed,
        "transitions": transitions,
        "pending_request": waiting[-1] if waiting else None,
        "may_answer": may,
        "answer_refusal": refusal,
        "amend_refusal": amend_refusal,
        "my_notifications": mine,
        "answered_request": answered,
        "decided_review": decided,
        "operations": ledger,
        "people": people,
        "credentials": credentials,
        "asked": asked,
        "endpoints": {k: v for k, v in labels.items() if k in hooks},
        "trace": trace,
    }


#: The reason ``flows.input_requests`` records on the transition a request opens.
_ASKED = re.compile(r"input request (\S+)")


def _ledger_texts(ledger: list[OperationView]) -> list[Any]:
    """Every string value of the operations' evidence, current and in their history."""
    out: list[Any] = []
    for op in ledger:
        for evidence in [op.get("evidence"), *(s.get("evidence") for s in op.get("history", []))]:
            if isinstance(evidence, dict):
                out.extend(evidence.values())
    return out


def _endpoint_label(endpoint: Endpoint) -> str:
    """What a person can tell one webhook endpoint from another by: its description, else
    its host."""
    description = (endpoint["description"] or "").strip()
    return description or (urlsplit(endpoint["url"]).hostname or "a webhook")


def unseen_notifications(core: Core, who: Principal, run_id: str) -> list[str]:
    """The ids of ``who``'s open notifications about ``run_id`` that were never seen
    (no ``first_seen_at``): what opening the run page marks seen."""
    with core.db.read() as conn:
        mine = notes.for_recipient_on_run(
            conn, who.tenant_id, who.user_id, run_id, limit=RUN_NOTES_LIMIT
        )
    return [n["id"] for n in mine if n["state"] == "open" and n.get("first_seen_at") is None]
