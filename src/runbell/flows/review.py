"""The review decision: a completed run that needs review asks its owner what to do.

A completion the ledger does not verify (conflicts, failures, effects nobody can confirm:
``flows.completion``) leaves a person with a decision, so the run's ``needs_review``
notification carries a proper input request — purpose ``review``, kind ``choice`` — put
to the run's owner and the people who may answer it:

- ``accept``: keep what was confirmed, as it is (nothing is undone or retried);
- ``retry_conflicts``: ask the agent to retry the conflicted and failed operations
  (offered only when there are some);
- ``wait``: wait for the lookups of the operations in doubt (offered only when some are);
- ``revise``: revise the objective and start again (the run is finished: a new run).

Runbell records the decision and tells the runtime (``run.review_decided`` on the feed and
webhooks, naming the operations it concerns); it never retries anything itself. The run's
state and version do not move: a finished run stays finished.

The request is bound to the run version it was opened at. A later ledger change (a lookup
settles an uncertain operation) makes a new review version: the open request is
superseded by a new one with the options the ledger now calls for, and an answer made
against the old one is refused (409) with the new one as ``current``. When the ledger
becomes verified, the open request is cancelled: nothing is left to decide.

Invariants kept here (DESIGN §2): 9 (an answer binds to one request, its versions and an
Idempotency-Key; stale or repeated answers are refused or replayed), 6 (the decision
resolves the request's notifications everywhere), 11 (only ids and counts reach the feed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import structlog

from runbell.domain.badges import IN_DOUBT, WRONG
from runbell.domain.operations import counts_text, normalized
from runbell.domain.records import InputRequest, Run
from runbell.flows.attention import RequestLink
from runbell.ids import new_id
from runbell.store import input_requests as requests
from runbell.store.db import Tx

log = structlog.get_logger(__name__)

PURPOSE = "review"


def options_for(counts: Mapping[str, int]) -> list[dict[str, str]]:
    """The review's options for a ledger with these counts (pure): always accept and
    revise; retry only with conflicts or failures; wait only with effects in doubt."""
    shown = normalized(counts)
    kept = shown.get("confirmed", 0) + shown.get("absent", 0)
    wrong = sum(shown.get(s, 0) for s in WRONG)
    doubt = sum(shown.get(s, 0) for s in IN_DOUBT)
    out = [{"id": "accept", "label": f"Accept what was confirmed ({kept}) and stop here"}]
    if wrong:
        out.append(
            {
                "id": "retry_conflicts",
                "label": f"Ask the agent to retry the {wrong} that went wrong",
            }
        )
    if doubt:
        out.append({"id": "wait", "label": f"Wait for the {doubt} in doubt to be looked up"})
    out.append({"id": "revise", "label": "Revise the objective and start a new run"})
    return out


def open_review(tx: Tx, run: Run, counts: Mapping[str, int], version: int) -> RequestLink:
    """Open the review request for ``run`` at ``version`` (inside the caller's
    transaction, before the ``needs_review`` notification that links to it), superseding
    an open one of an earlier version."""
    tenant_id = run.tenant_id
    request_id = new_id("rvw")
    for old in requests.pending_for_run(tx.conn, tenant_id, run.run_id, purpose=PURPOSE):
        requests.close(tx.conn, tenant_id, old.id, "superseded", tx.now, superseded_by=request_id)
    shown = normalized(counts)
    text = counts_text(shown) if shown else "the agent reported its effects are not verified"
    summary = f"Review the outcome: {text}"[:300]
    options = options_for(shown)
    requests.insert(
        tx.conn,
        {
            "tenant_id": tenant_id,
            "id": request_id,
            "run_id": run.run_id,
            "kind": "choice",
            "summary": summary,
            "details": {"counts": shown},
            "options": options,
            "blocks_work": False,
            "expires_at": None,
            "version": 1,
            "run_version": version,
            "state": "pending",
            "request_hash": _hash({"review": request_id, "counts": shown}),
            "purpose": PURPOSE,
            "created_at": tx.now,
        },
    )
    log.debug("review.opened", run_id=run.run_id, version=version)
    return RequestLink(request_id, None, blocks_work=False)


def last_decided(conn: Any, run: Run) -> InputRequest | None:
    """The run's most recently decided review, with its answer."""
    return requests.last_answered(conn, run.tenant_id, run.run_id, PURPOSE)


def close_reviews(tx: Tx, run: Run, why: str) -> None:
    """The ledger is verified (or the review was decided): no open review is left."""
    for old in requests.pending_for_run(tx.conn, run.tenant_id, run.run_id, purpose=PURPOSE):
        requests.close(tx.conn, run.tenant_id, old.id, "cancelled", tx.now)
        log.debug("review.closed", run_id=run.run_id, why=why)


def pending(conn: Any, run: Run) -> InputRequest | None:
    """The run's open review request, if any."""
    found = requests.pending_for_run(conn, run.tenant_id, run.run_id, purpose=PURPOSE)
    return found[-1] if found else None


def _hash(doc: object) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
