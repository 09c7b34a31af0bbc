"""The runs overview's reads: one bounded, indexed query per group.

Each function answers the rows of one group for one viewer, newest first, at most
``limit`` (the caller asks for one more to know whether there are more). Visibility is
the same as :func:`runbell.store.runs.list_runs`: tenant owners, admins and API keys see
every run of the tenant, everyone else the runs ``run_access`` names them on (their own
and those whose authority names them).

Where each group's rows come from (and the index that keeps it independent of history):

=============  ===========================================================================
needs_you      ``input_required`` runs with a pending input request (``ix_runs_tenant_state``,
               then ``ix_input_requests_run``); whether the viewer may answer is decided
               by the flow from the ``answerable`` and ``authority`` columns
stalled        active runs with an open ``stalled`` notification (``ix_runs_tenant_state``,
               then ``ix_notifications_run_state``)
needs_review   the newest ``needs_review`` notifications still open or acknowledged
               (``ix_notifications_tenant_attention``), then their runs at that version
               (``pk_runs``)
working        active runs without an open ``stalled`` notification (``ix_runs_tenant_state``)
finished       terminal runs by ``finished_at`` (``ix_runs_tenant_finished``), paged by
               ``(finished_at, run_id)``, without the runs in ``needs_review``
=============  ===========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.principal import Principal
from runbell.domain.records import Run
from runbell.store import tables as t
from runbell.store.runs import new_run, visible_run_ids

ACTIVE_STATES = ("queued", "working", "input_required", "stopping")
TERMINAL_STATES = ("completed", "failed", "cancelled")
#: A review stays to do until it is resolved or replaced: acknowledging it says "I saw
#: it", not "the effects were checked" (DESIGN §2, 10).
REVIEW_STATES = ("open", "acknowledged")

_R = t.runs
_N = t.notifications

#: Every column of a run but its sensitive ``details``.
ROW_COLUMNS = tuple(c for c in _R.c if c.name != "details")


def _visible(q: sa.Select[Any], who: Principal) -> sa.Select[Any]:
    q = q.where(_R.c.tenant_id == who.tenant_id)
    if not who.sees_all_runs:
        q = q.where(_R.c.run_id.in_(visible_run_ids(who)))
    return q


def _states(q: sa.Select[Any], states: list[str] | None) -> sa.Select[Any]:
    return q if not states else q.where(_R.c.state.in_(states))


def _open_note(*types: str) -> sa.Exists:
    n = _N.alias("o_note")
    return sa.exists().where(
        n.c.tenant_id == _R.c.tenant_id,
        n.c.run_id == _R.c.run_id,
        n.c.state == "open",
        n.c.attention_type.in_(types),
    )


@dataclass(frozen=True, slots=True)
class OverviewRow:
    """One run of the overview (its ``details`` left out: None) and what its group's
    query adds: the pending request of a "needs you" row and whether the viewer is named
    (``answerable``), the review time of a "needs review" row."""

    run: Run
    request_id: str | None = None
    request_summary: str | None = None
    request_expires_at: datetime | None = None
    answerable: bool = False
    review_at: datetime | None = None
    request_approvers: list[str] | None = None  # who may answer it, when it names them


_EXTRA = (
    "request_id",
    "request_summary",
    "request_expires_at",
    "answerable",
    "review_at",
    "request_approvers",
)


def _rows(conn: Connection, q: sa.Select[Any]) -> list[OverviewRow]:
    out = []
    for r in conn.execute(q).all():
        m = r._mapping
        run = new_run(**{c.name: m[c.name] for c in ROW_COLUMNS})
        out.append(OverviewRow(run, **{k: m[k] for k in _EXTRA if k in m}))
    return out


def needs_you(
    conn: Connection, who: Principal, *, states: list[str] | None, limit: int
) -> list[OverviewRow]:
    """``input_required`` runs with a pending request the viewer may be able to answer:
    each row with ``request_id``, ``request_summary``, ``request_expires_at``,
    ``answerable`` (the viewer is the owner or named in the authority) and ``authority``
    (for the roles it names). A viewer who is neither, and whose role the authority does
    not name, is filtered out by the flow; an API key has nobody to ask."""
    if not who.is_user or who.user_id is None:
        return []
    req = t.input_requests
    access = t.run_access.alias("me")
    named = (
        sa.exists()
        .where(
            access.c.tenant_id == _R.c.tenant_id,
            access.c.run_id == _R.c.run_id,
            access.c.user_id == who.user_id,
            access.c.may_answer == sa.true(),  # a viewer is not asked (issue 18)
        )
        .correlate(_R)
    )
    mine = _N.alias("mine")
    notified = (
        sa.exists()
        .where(
            mine.c.tenant_id == _R.c.tenant_id,
            mine.c.run_id == _R.c.run_id,
            mine.c.state == "open",
            mine.c.attention_type == "input_required",
            mine.c.recipient_user_id == who.user_id,
        )
        .correlate(_R)
    )
    q: sa.Select[Any] = (
        sa.select(
            *ROW_COLUMNS,
            req.c.id.label("request_id"),
            req.c.summary.label("request_summary"),
            req.c.expires_at.label("request_expires_at"),
            req.c.approvers.label("request_approvers"),
            sa.or_(_R.c.owner_user_id == who.user_id, named, notified).label("answerable"),
        )
        .select_from(
            _R.join(
                req,
                sa.and_(
                    req.c.tenant_id == _R.c.tenant_id,
                    req.c.run_id == _R.c.run_id,
                    req.c.state == "pending",
                ),
            )
        )
        .where(_R.c.state == "input_required")
        # Only rows the flow can keep: the viewer is named, notified, or a role may be.
        .where(
            sa.or_(
                _R.c.owner_user_id == who.user_id,
                named,
                notified,
                _R.c.authority.is_not(None),
            )
        )
    )
    q = _states(_visible(q, who), states)
    q = q.order_by(req.c.created_at.desc(), _R.c.run_id).limit(limit)
    return _rows(conn, q)


def stalled(
    conn: Connection, who: Principal, *, states: list[str] | None, limit: int
) -> list[OverviewRow]:
    """Active runs with an open ``stalled`` notification (whoever it was for), the
    longest silent first."""
    q = sa.select(*ROW_COLUMNS).where(_R.c.state.in_(ACTIVE_STATES), _open_note("stalled"))
    q = _states(_visible(q, who), states)
    q = q.order_by(
        sa.func.coalesce(_R.c.last_progress_at, _R.c.started_at, _R.c.created_at),
        _R.c.run_id,
    ).limit(limit)
    return _rows(conn, q)


def needs_review(
    conn: Connection, who: Principal, *, states: list[str] | None, limit: int
) -> list[OverviewRow]:
    """Runs whose current version has a ``needs_review`` notification still to do (open,
    or acknowledged but not resolved), the most recent review first. Each row carries
    ``review_at`` (when the review was raised)."""
    n = _N.alias("review")
    # The newest reviews first, bounded before the join (so the join is ``limit`` primary
    # key reads of runs, not a pass over them); twice as many as asked, for those that
    # fall out after it (an older version of the run, a state filter).
    recent = sa.select(n.c.run_id, n.c.transition_version, n.c.created_at.label("review_at")).where(
        n.c.tenant_id == who.tenant_id,
        n.c.attention_type == "needs_review",
        n.c.state.in_(REVIEW_STATES),
    )
    if not who.sees_all_runs:
        recent = recent.where(n.c.run_id.in_(visible_run_ids(who)))
    reviews = recent.order_by(n.c.created_at.desc()).limit(limit * 2).subquery("reviews")
    q: sa.Select[Any] = sa.select(*ROW_COLUMNS, reviews.c.review_at).select_from(
        reviews.join(
            _R,
            sa.and_(
                _R.c.tenant_id == who.tenant_id,
                _R.c.run_id == reviews.c.run_id,
                _R.c.version == reviews.c.transition_version,
            ),
        )
    )
    q = _states(q, states)
    q = q.order_by(reviews.c.review_at.desc(), _R.c.run_id).limit(limit)
    # One review per recipient: a run whose owner changed may have two; keep the newest.
    seen: set[str] = set()
    out = []
    for row in _rows(conn, q):
        if row.run.run_id not in seen:
            seen.add(row.run.run_id)
            out.append(row)
    return out


def working(
    conn: Connection, who: Principal, *, states: list[str] | None, limit: int
) -> list[OverviewRow]:
    """Active runs without an open ``stalled`` notification, most recently changed
    first (the flow removes those that are in ``needs_you``)."""
    q = sa.select(*ROW_COLUMNS).where(_R.c.state.in_(ACTIVE_STATES), ~_open_note("stalled"))
    q = _states(_visible(q, who), states)
    q = q.order_by(_R.c.updated_at.desc(), _R.c.run_id).limit(limit)
    return _rows(conn, q)


def finished(
    conn: Connection,
    who: Principal,
    *,
    states: list[str] | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[OverviewRow]:
    """Terminal runs, most recently finished first, after the ``(finished_at, run_id)``
    of the previous page's last row; without those still in ``needs_review``."""
    n = _N.alias("f_review")
    in_review = sa.exists().where(
        n.c.tenant_id == _R.c.tenant_id,
        n.c.run_id == _R.c.run_id,
        n.c.transition_version == _R.c.version,
        n.c.attention_type == "needs_review",
        n.c.state.in_(REVIEW_STATES),
    )
    q = sa.select(*ROW_COLUMNS).where(
        _R.c.state.in_(TERMINAL_STATES), _R.c.finished_at.is_not(None), ~in_review
    )
    if after is not None:
        at, run_id = after
        q = q.where(
            sa.or_(
                _R.c.finished_at < at,
                sa.and_(_R.c.finished_at == at, _R.c.run_id < run_id),
            )
        )
    q = _states(_visible(q, who), states)
    q = q.order_by(_R.c.finished_at.desc(), _R.c.run_id.desc()).limit(limit)
    return _rows(conn, q)
