"""Who may do what on a run: the ``run_access`` rows (issue 18 item 4).

One row per member and source: ``via = 'run'`` for what the run itself grants (its owner
and the people its authority names; :func:`set_run_people`), a subject grant's id for
what that grant gives on each run of its subject (:func:`apply_grants` when a run is
created or its subject changes, :func:`add_grant` / :func:`drop_grant` when an admin
grants or revokes). Seeing a run is having any row; answering or amending is having one
that says so. Reads that filter by visibility (feed, inbox, overview) stay one indexed
join on ``(tenant_id, user_id, …)``: see ``store.runs.visible_run_ids``.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runbell.domain.people import Grant, role_grant, subject_key
from runbell.domain.principal import Principal
from runbell.store import fast
from runbell.store import tables as t
from runbell.store.grants import SubjectGrant, for_subject

_RA = t.run_access
RUN = "run"

# Compiled once (store.fast): every run creation runs these (issue 21, P2-put).
_PEOPLE = fast.Statement(
    lambda: sa.select(_RA.c.user_id, _RA.c.may_answer, _RA.c.may_amend).where(
        _RA.c.tenant_id == sa.bindparam("tenant_id"),
        _RA.c.run_id == sa.bindparam("run_id"),
        _RA.c.via == sa.bindparam("via"),
    )
)
_DROP_GRANTED = fast.Statement(
    lambda: sa.delete(_RA).where(
        _RA.c.tenant_id == sa.bindparam("tenant_id"),
        _RA.c.run_id == sa.bindparam("run_id"),
        _RA.c.via != sa.bindparam("via"),
    )
)
_INSERT = fast.insert(_RA, ("tenant_id", "run_id", "user_id", "via", "may_answer", "may_amend"))


def set_run_people(
    conn: Connection, tenant_id: str, run_id: str, people: Mapping[str, Grant]
) -> None:
    """The run's own rows (``via = 'run'``) become ``people``: gone ones deleted, new ones
    inserted, changed ones updated."""
    current = {
        r["user_id"]: Grant(bool(r["may_answer"]), bool(r["may_amend"]))
        for r in _PEOPLE.rows(conn, tenant_id=tenant_id, run_id=run_id, via=RUN)
    }
    gone = set(current) - set(people)
    if gone:
        conn.execute(
            sa.delete(_RA).where(
                _RA.c.tenant_id == tenant_id,
                _RA.c.run_id == run_id,
                _RA.c.via == RUN,
                _RA.c.user_id.in_(gone),
            )
        )
    for user_id in sorted(u for u in people if u in current and people[u] != current[u]):
        conn.execute(
            sa.update(_RA)
            .where(
                _RA.c.tenant_id == tenant_id,
                _RA.c.run_id == run_id,
                _RA.c.via == RUN,
                _RA.c.user_id == user_id,
            )
            .values(may_answer=people[user_id].may_answer, may_amend=people[user_id].may_amend)
        )
    new = sorted(set(people) - set(current))
    _INSERT.many(conn, [_row(tenant_id, run_id, u, RUN, people[u]) for u in new])


def apply_grants(
    conn: Connection, tenant_id: str, run_id: str, subject: Mapping[str, object] | None
) -> None:
    """The run's rows from subject grants become those of the grants of ``subject`` (a new
    run, or a run whose subject changed)."""
    _DROP_GRANTED.execute(conn, tenant_id=tenant_id, run_id=run_id, via=RUN)
    key = subject_key(subject)
    if key is None:
        return
    grants = for_subject(conn, tenant_id, *key)
    if grants:
        conn.execute(
            _RA.insert(),
            [_row(tenant_id, run_id, g.user_id, g.id, role_grant(g.role)) for g in grants],
        )


def add_grant(conn: Connection, grant: SubjectGrant) -> int:
    """A row for the grant's member on every run of its subject (existing runs; future
    ones get theirs from :func:`apply_grants`). Returns how many runs."""
    r = t.runs
    given = role_grant(grant.role)
    runs_of_subject = sa.select(
        r.c.tenant_id,
        r.c.run_id,
        sa.literal(grant.user_id, t.run_access.c.user_id.type).label("user_id"),
        sa.literal(grant.id, _RA.c.via.type).label("via"),
        sa.literal(given.may_answer, sa.Boolean).label("may_answer"),
        sa.literal(given.may_amend, sa.Boolean).label("may_amend"),
    ).where(
        r.c.tenant_id == grant.tenant_id,
        r.c.subject["type"].as_string() == grant.subject_type,
        r.c.subject["id"].as_string() == grant.subject_id,
    )
    conn.execute(
        _RA.insert().from_select(
            ["tenant_id", "run_id", "user_id", "via", "may_answer", "may_amend"], runs_of_subject
        )
    )
    # (INSERT … SELECT's rowcount is not reliable across drivers: counted instead.)
    return rows_of_grant(conn, grant.tenant_id, grant.id)


def drop_grant(conn: Connection, tenant_id: str, grant_id: str) -> int:
    """The rows a grant gave, deleted (what the run itself grants stays)."""
    res = conn.execute(sa.delete(_RA).where(_RA.c.tenant_id == tenant_id, _RA.c.via == grant_id))
    return int(res.rowcount or 0)


def rows_of_grant(conn: Connection, tenant_id: str, grant_id: str) -> int:
    """How many runs a grant covers now."""
    found = conn.execute(
        sa.select(sa.func.count()).where(_RA.c.tenant_id == tenant_id, _RA.c.via == grant_id)
    ).scalar()
    return int(found or 0)


def granted(conn: Connection, who: Principal, run_id: str) -> Grant | None:
    """What ``who``'s rows on the run let them do (the union of their sources); None when
    no row names them (they do not see the run through access rows)."""
    if not who.is_user or who.user_id is None:
        return None
    rows = conn.execute(
        sa.select(_RA.c.may_answer, _RA.c.may_amend).where(
            _RA.c.tenant_id == who.tenant_id,
            _RA.c.user_id == who.user_id,
            _RA.c.run_id == run_id,
        )
    ).all()
    if not rows:
        return None
    out = Grant(False, False)
    for row in rows:
        out = out | Grant(bool(row.may_answer), bool(row.may_amend))
    return out


def _row(tenant_id: str, run_id: str, user_id: str, via: str, grant: Grant) -> dict[str, object]:
    return {
        "tenant_id": tenant_id,
        "run_id": run_id,
        "user_id": user_id,
        "via": via,
        "may_answer": grant.may_answer,
        "may_amend": grant.may_amend,
    }
