"""Amendments: someone who can see a run proposes a change to it; the owner decides.

:func:`propose` records the proposal (free ``text`` and optional structured ``changes`` of
``objective``, ``title`` and ``done_when``) as an **input request to the run's owner** with purpose
``amendment``: an approval whose notification (attention ``amendment``) goes to the owner
only. It never moves the run — no ``input_required``, no new version, nothing blocks the
runtime — and it never changes the run by itself.

The owner answers through the one answer endpoint, ``POST /v1/input-requests/{id}/
responses`` (:mod:`runbell.flows.answers` hands amendment requests to
:func:`answer_in_tx`): ``approve`` applies ``changes`` as a new run version (a transition
of kind ``amend``, ``run.updated`` and ``amendment.approved`` on the feed); ``reject``
changes nothing but the amendment's state (``amendment.rejected``).

Which versions an answer binds to (invariant 9): the request id, the request version
(``expected_request_version``), the Idempotency-Key, and as ``expected_run_version`` the
run version **the amendment was proposed against** (``input_request.run_version``) —
not the run's current version, so the runtime's ordinary progress (each state change is a
version) does not make every pending amendment stale. What does make an approval stale
is what it is about: when a field it changes no longer holds the value it had when the
amendment was proposed (the runtime edited it, or another amendment was approved), the
approval is refused with 409 and ``current``; rejecting it is still possible. A finished
run is not amended: its finish cancels its pending amendments and resolves their alert
(``flows.transitions.apply``); one whose alert had closed already is cancelled when
someone answers it.

Who: the run's owner, tenant admins and the people who may amend it (``authority.users``,
``authority.amenders``, amender grants of its subject: :mod:`runbell.flows.amendment_changes`)
may propose (for the owner it is a two-step change, as PUT is the runtime's); a member who
may see the run but not amend it gets 403 saying so; an API key may not (403: a runtime
edits its run with ``PUT``); anyone who cannot see the run gets 404. Only the owner answers
(403 for anyone else, authority included: the run is theirs). ``changes`` may also exclude
planned operations (``exclude_operations``; see :mod:`runbell.flows.amendment_changes`).

Invariants kept here (DESIGN §2): 9 (above); 6 (the decision resolves the amendment's
notification everywhere); 1 (one amendment notification per recipient, run version and
type: a second proposal on the same run version is listed on the run and in its snapshot
under the alert the owner already has); 11 (feed and webhook events carry ids and field
names, never the proposed text).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypedDict, cast

import structlog

from runbell.domain.channels import offered
from runbell.domain.errors import Conflict, Forbidden, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import InputRequest, Run
from runbell.domain.runs import is_terminal
from runbell.flows import amendment_changes as change_rules
from runbell.flows import dependencies, idempotency, views, written
from runbell.flows.amendment_views import AmendmentView, amendment_view
from runbell.flows.attention import (
    RequestLink,
    close_notification,
    raise_attention,
    supersede_actionable,
)
from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey
from runbell.flows.input_requests import (
    Answered,
    AnswerFields,
    RequestNow,
    current_of,
    fingerprint,
)
from runbell.flows.inputs import ProposalBody
from runbell.flows.ownership import actor_of
from runbell.flows.policy import policy_in
from runbell.ids import new_id
from runbell.store import amendments as store
from runbell.store import destinations, runs
from runbell.store import input_requests as requests
from runbell.store import notifications as notes
from runbell.store.amendments import Amendment
from runbell.store.db import PendingEvent, Tx

log = structlog.get_logger(__name__)

TEXT_MAX = 2000
NOT_OWNER = "only the run's owner decides on a proposed amendment"


# --- proposing -------------------------------------------------------------------------


class Proposed(TypedDict):
    """``POST /v1/runs/{id}/amendments``: the proposal, the request put to the owner,
    the run (unchanged) and the owner's notification."""

    amendment: AmendmentView
    input_request: views.InputRequestView
    run: views.RunView
    notifications: list[views.NotificationView]


class AmendmentAnswered(Answered):
    amendment: AmendmentView


class AmendmentNow(RequestNow):
    amendment: AmendmentView


def propose(
    core: Core,
    who: Principal,
    run_id: str,
    body: ProposalBody,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Propose a change: 201 ``{amendment, input_request, run, notifications}``."""
    text, changes = _fields(body)

    def prepare() -> Act:
        return lambda tx: (201, _propose_in(core, tx, who, run_id, text, changes))

    return written.act_once(core, key, (who.tenant_id, run_id), prepare)  # a unit of the writer


def _fields(body: ProposalBody) -> tuple[str, change_rules.Changes]:
    text = body.get("text")
    if not isinstance(text, str) or not text.strip() or len(text) > TEXT_MAX:
        raise ValidationFailed(f"text is 1 to {TEXT_MAX} characters", field="text")
    return text.strip(), change_rules.parse(body.get("changes"))


def _propose_in(
    core: Core, tx: Tx, who: Principal, run_id: str, text: str, changes: change_rules.Changes
) -> Proposed:
    conn, tenant_id = tx.conn, who.tenant_id
    run = runs.get_run(conn, tenant_id, run_id, for_update=True)
    if run is None or (who.is_user and not runs.can_see_run(conn, who, run_id)):
        raise NotFound(f"no run {run_id!r}")
    if not who.is_user or who.user_id is None:
        raise Forbidden(
            "amendments are proposed by people; a runtime edits its run with PUT /v1/runs/{id}"
        )
    change_rules.check_may_amend(conn, who, run)
    if is_terminal(run.state):
        raise Conflict(
            f"run {run_id!r} is {run.state}; a finished run is not amended",
            current={"run": views.run_view(run)},
        )
    changes, base = change_rules.against(conn, run, changes)
    amendment_id = new_id("amd")
    proposer = str(destinations.email_of(conn, who.user_id))
    summary = f"{proposer} proposes a change to this run"
    if changes:
        summary += f" ({', '.join(sorted(changes))})"
    details = {"text": text, "changes": changes, "base": base, "proposed_by": proposer}
    request = {
        "tenant_id": tenant_id,
        "id": amendment_id,  # one id for the amendment and its request
        "run_id": run_id,
        "kind": "approval",
        "summary": summary[:300],
        "details": details,
        "options": None,
        "blocks_work": False,
        "expires_at": None,
        "version": 1,
        "run_version": run.version,
        "state": "pending",
        "request_hash": fingerprint({"amendment": amendment_id, **details}),
        "purpose": "amendment",
        "created_at": tx.now,
    }
    requests.insert(conn, request)
    assert who.user_id is not None  # _propose_in is reached by people only
    store.insert(
        conn,
        Amendment(
            tenant_id=tenant_id,
            id=amendment_id,
            run_id=run_id,
            input_request_id=amendment_id,
            proposed_by=who.user_id,
            text=text,
            changes=cast(dict[str, Any], changes) or None,  # JSON, as checked above
            base=cast(dict[str, Any], base) or None,
            run_version=run.version,
            state="pending",
            created_at=tx.now,
            actor=actor_of(who),
        ),
    )
    # The owner is told; the run does not move (no version, no state: nothing is blocked).
    raised = raise_attention(
        tx,
        policy_in(core, tx, tenant_id),
        run,
        attention="amendment",
        version=run.version,
        facts={},
        reason=summary[:200],
        owner_present=core.presence.is_present(tenant_id, run.owner_user_id, conn),
        request=RequestLink(amendment_id, None, blocks_work=False),
        channels=offered(core.settings),
    )
    tx.emit(
        tenant_id,
        PendingEvent(
            "amendment.proposed",
            {
                "amendment_id": amendment_id,
                "input_request_id": amendment_id,
                "run_id": run_id,
                "version": run.version,
                "fields": sorted(changes),
                "proposed_by": who.user_id,
                "state": "pending",
            },
            run_id=run_id,
        ),
    )
    log.info("amendment.proposed", run_id=run_id, amendment_id=amendment_id)
    amendment = store.get(conn, tenant_id, amendment_id)
    req = requests.get(conn, tenant_id, amendment_id)
    assert amendment is not None and req is not None
    ids = [raised.notification_id] if raised.created and raised.notification_id else []
    return {
        "amendment": amendment_view(amendment),
        "input_request": views.input_request_view(req, include_details=True),
        "run": views.run_view(run),
        "notifications": [views.notification_view(n) for n in notes.get_many(conn, tenant_id, ids)],
    }


# --- reading ---------------------------------------------------------------------------


# --- the owner decides -----------------------------------------------------------------


def answer_in_tx(
    core: Core,
    tx: Tx,
    who: Principal,
    run: Run,
    req: InputRequest,
    answer: AnswerFields,
    key: str | None,
    digest: str,
) -> Answer | Conflict:
    """Answer an amendment's request (run and request locked by the caller). A Conflict
    is *returned* when it must be raised after this transaction commits (the amendment
    was cancelled because its run has finished)."""
    ik = _owner_key(who, run, key, digest)
    replay = idempotency.stored(tx.conn, core.box, ik)
    if replay is not None:
        return replay
    amendment = store.get(tx.conn, who.tenant_id, req.id, for_update=True)
    assert amendment is not None  # written with its request
    refused = _refusal(tx, run, req, amendment, answer)
    if refused is not None:  # cancelled: its run had finished
        dependencies.tell_dependents(core, tx, run.tenant_id, [req.id])
        return refused
    _check_decision(answer)
    idempotency.claim(tx, core.box, ik)
    _record_response(tx, who, req, answer, key)
    dependencies.tell_dependents(core, tx, run.tenant_id, [req.id])
    run, state = _decide(tx, who, run, amendment, answer["decision"])
    _announce_decision(tx, who, run, req, amendment, state)
    log.info("amendment.decided", amendment_id=amendment.id, state=state)
    result = _decided_view(tx, who, run, req, amendment, answer)
    return idempotency.settle(tx, core.box, ik, 200, _sorted(result))


def _owner_key(who: Principal, run: Run, key: str | None, digest: str) -> IdempotencyKey:
    """403 unless the run's owner answers (an amendment is put to the owner alone); 422
    without an Idempotency-Key."""
    if not who.is_user or who.user_id is None or who.user_id != run.owner_user_id:
        raise Forbidden(NOT_OWNER)
    return idempotency.answer_key(who.tenant_id, who.user_id, key, digest)


def _check_decision(answer: AnswerFields) -> None:
    decision = answer["decision"]
    if decision not in ("approve", "reject"):
        raise ValidationFailed(
            f"an amendment takes decision approve or reject, not {decision}", field="decision"
        )
    if answer["value"] is not None:
        raise ValidationFailed("an approval takes no value", field="value")


def _record_response(
    tx: Tx, who: Principal, req: InputRequest, answer: AnswerFields, key: str | None
) -> None:
    requests.insert_response(
        tx.conn,
        {
            "tenant_id": who.tenant_id,
            "input_request_id": req.id,
            "id": new_id("rsp"),
            "user_id": who.user_id,
            "decision": answer["decision"],
            "value": None,
            "expected_run_version": answer["expected_run_version"],
            "expected_request_version": answer["expected_request_version"],
            "idempotency_key": key,
            "created_at": tx.now,
        },
    )
    requests.close(tx.conn, who.tenant_id, req.id, "answered", tx.now)


def _decide(
    tx: Tx, who: Principal, run: Run, amendment: Amendment, decision: str
) -> tuple[Run, str]:
    """Approved: the change applies as a new run version. Rejected: the run is as it was."""
    if decision != "approve":
        store.decide(tx.conn, who.tenant_id, amendment.id, "rejected", by=who.user_id, at=tx.now)
        return run, "rejected"
    run = _apply(tx, who, run, amendment)
    store.decide(
        tx.conn,
        who.tenant_id,
        amendment.id,
        "approved",
        by=who.user_id,
        at=tx.now,
        applied_version=run.version,
    )
    return run, "approved"


def _announce_decision(
    tx: Tx,
    who: Principal,
    run: Run,
    req: InputRequest,
    amendment: Amendment,
    state: str,
) -> None:
    """The feed hears the decision; the request's notifications resolve everywhere."""
    tx.emit(
        who.tenant_id,
        PendingEvent(
            f"amendment.{state}",
            {
                "amendment_id": amendment.id,
                "input_request_id": req.id,
                "run_id": run.run_id,
                "version": run.version,
                "fields": sorted(amendment.changes or {}),
                "decided_by": who.user_id,
                "state": state,
            },
            run_id=run.run_id,
        ),
    )
    for note in notes.open_for_run(tx.conn, who.tenant_id, run.run_id):
        if note.get("input_request_id") == req.id:
            close_notification(tx, note, "resolved", f"{state} by {who.user_id}")


def _decided_view(
    tx: Tx,
    who: Principal,
    run: Run,
    req: InputRequest,
    amendment: Amendment,
    answer: AnswerFields,
) -> AmendmentAnswered:
    answered = requests.get(tx.conn, who.tenant_id, req.id)
    decided = store.get(tx.conn, who.tenant_id, amendment.id)
    assert answered is not None and decided is not None
    assert answered.answered_by_id is not None  # answered in this transaction
    return {
        "response": {
            "input_request_id": answered.id,
            "decision": answer["decision"],
            "value": None,
            "answered_by": {
                "id": answered.answered_by_id,
                "email": answered.answered_by_email,
            },
            "answered_at": views.iso(answered.answered_at),
            "expected_run_version": answer["expected_run_version"],
            "expected_request_version": answer["expected_request_version"],
        },
        "input_request": views.input_request_view(answered),
        "amendment": amendment_view(decided),
        "run": views.run_view(run),
    }


def _refusal(
    tx: Tx,
    run: Run,
    req: InputRequest,
    amendment: Amendment,
    answer: AnswerFields,
) -> Conflict | None:
    """Raise the 409 for an amendment that cannot take this answer now; *return* it when
    the refusal changed something that must commit (a finished run cancels it)."""
    if req.state != "pending":
        raise Conflict(
            f"This amendment was already decided ({amendment.state})."
            if req.state == "answered"
            else f"This amendment is {amendment.state}.",
            current=_current(run, req, amendment),
        )
    if is_terminal(run.state):
        requests.close(tx.conn, run.tenant_id, req.id, "cancelled", tx.now)
        store.decide(tx.conn, run.tenant_id, amendment.id, "cancelled", by=None, at=tx.now)
        amendment = replace(amendment, state="cancelled")
        for note in notes.open_for_run(tx.conn, run.tenant_id, run.run_id):
            if note.get("input_request_id") == req.id:
                close_notification(tx, note, "resolved", f"run is {run.state}")
        return Conflict(
            f"The run has finished ({run.state}); a finished run is not amended, so this "
            "amendment was cancelled.",
            current=_current(run, replace(req, state="cancelled"), amendment),
        )
    if answer["expected_run_version"] != req.run_version:
        raise Conflict(
            f"This amendment was proposed against run version {req.run_version}; send "
            f"that as expected_run_version (not {answer['expected_run_version']}).",
            current=_current(run, req, amendment),
        )
    if answer["expected_request_version"] != req.version:
        raise Conflict(
            "The request changed since this page was loaded "
            f"(version {answer['expected_request_version']} → {req.version}).",
            current=_current(run, req, amendment),
        )
    moved = change_rules.moved_since(tx.conn, run, change_rules.stored_base(amendment.base))
    if moved and answer["decision"] == "approve":
        raise Conflict(
            f"The run's {' and '.join(moved)} changed since this amendment was proposed; "
            "approving it would overwrite that change. Reject it, or ask for a new proposal.",
            current=_current(run, req, amendment),
        )
    return None


def _apply(tx: Tx, who: Principal, run: Run, amendment: Amendment) -> Run:
    """The approved changes, as a new run version (transition kind ``amend``)."""
    # An amendment changes only amendment_changes.FIELDS (checked when proposed), and
    # excludes planned operations (not_started, the amendment as evidence).
    proposed = change_rules.stored(amendment.changes)
    changes = change_rules.run_fields(proposed)
    version = run.version + 1
    fields = sorted(proposed)
    assert who.user_id is not None  # only the owner decides
    change_rules.exclude(tx, run, proposed, amendment.id, who.user_id)
    changes.update({"version": version, "updated_at": tx.now})
    runs.update_run(tx.conn, run.tenant_id, run.run_id, changes)
    runs.add_transition(
        tx.conn,
        {
            "tenant_id": run.tenant_id,
            "run_id": run.run_id,
            "version": version,
            "kind": "amend",
            "from_state": run.state,
            "to_state": run.state,
            "source_id": None,
            "reason": f"amended: {', '.join(fields) or 'nothing'} "
            f"(amendment {amendment.id}, approved by the owner)",
            "at": tx.now,
            "actor": actor_of(who),
        },
    )
    # What an open request asked about may have changed: its action must not run.
    supersede_actionable(tx, run.tenant_id, run.run_id, version)
    run = replace(run, **changes)
    tx.emit(
        run.tenant_id,
        PendingEvent("run.updated", views.run_event(run), run_id=run.run_id),
    )
    return run


def _current(run: Run, req: InputRequest, amendment: Amendment) -> AmendmentNow:
    return {**current_of(run, req), "amendment": amendment_view(amendment)}


def _sorted(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _sorted(doc[k]) for k in sorted(doc)}
    if isinstance(doc, list):
        return [_sorted(v) for v in doc]
    return doc
