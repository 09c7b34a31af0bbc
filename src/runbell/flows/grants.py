"""Subject grants: an admin grants a member a subject in a role (issue 18 item 4).

A grant names a member, a subject (``{type, id}``, as a run's ``subject`` names it; any
version) and a role (``viewer``, ``approver``, ``amender``: ``domain.people``). The
member then sees — and, per role, answers or amends — every run of that subject in the
tenant, those that exist and those created later: the grant is materialized as
``run_access`` rows (``store.access``), written with the grant in one transaction (and
by ``flows.runs`` for a run created, or moved, under the subject), so the feed, inbox and
overview keep filtering by one indexed join. Revoking deletes the grant and its rows in
one transaction; what the run itself grants the member stays.

Who: tenant owners and admins (a person or an admin API key); 403 for anyone else.
Granting is idempotent: the same member, subject and role answer the existing grant
(200); a create also takes an Idempotency-Key. Invariants (DESIGN §2): tenant isolation
(another tenant's grant or member answers 404/422, never acts); 8 (a revoked grant stops
what reaches the member: deliveries re-check access at dispatch).
"""

from __future__ import annotations

from typing import TypedDict

import structlog

from runbell.domain.errors import Forbidden, NotFound, ValidationFailed
from runbell.domain.people import ROLES
from runbell.domain.principal import Principal
from runbell.flows import views
from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey, act_once
from runbell.ids import new_id
from runbell.store import access, accounts, destinations
from runbell.store import grants as store
from runbell.store.db import Tx
from runbell.store.grants import SubjectGrant

log = structlog.get_logger(__name__)


class SubjectRef(TypedDict):
    type: str
    id: str


class GrantBody(TypedDict, total=False):
    """``POST /v1/subject-grants``: who, which subject, in which role."""

    user: str  # a user id or the email of a current member
    subject: SubjectRef
    role: str


class GrantView(TypedDict):
    id: str
    user: views.Person
    subject: SubjectRef
    role: str
    created_by: str | None
    created_at: str | None


class Granted(GrantView):
    """A grant's 201 (or 200 for one that already existed): how many runs it covers now."""

    runs: int
    created: bool


class GrantList(TypedDict):
    grants: list[GrantView]


def grant(core: Core, who: Principal, body: GrantBody, key: IdempotencyKey | None = None) -> Answer:
    """Grant a member a subject in a role: 201 ``Granted`` (200 when it existed)."""
    role = body.get("role")
    if role not in ROLES:
        raise ValidationFailed(f"role must be one of {', '.join(ROLES)}", field="role")
    subject = body.get("subject")
    kind = subject.get("type") if isinstance(subject, dict) else None
    ident = subject.get("id") if isinstance(subject, dict) else None
    if not isinstance(kind, str) or not kind.strip() or not isinstance(ident, str) or not ident:
        raise ValidationFailed("subject is {type, id}, both non-empty", field="subject")
    ref = body.get("user")
    if not isinstance(ref, str) or not ref.strip():
        raise ValidationFailed("user is a user id or the email of a member", field="user")

    def prepare() -> Act:
        def act(tx: Tx) -> tuple[int, Granted]:
            return _grant_in(tx, who, ref, kind, ident, role)

        return act

    return act_once(core.db, core.box, key, prepare)


def _grant_in(
    tx: Tx, who: Principal, ref: str, kind: str, ident: str, role: str
) -> tuple[int, Granted]:
    try:
        user_id = accounts.find_user(tx.conn, who.tenant_id, ref)
    except NotFound as exc:
        raise ValidationFailed(
            f"user: {ref!r} is not a member of this tenant", field="user"
        ) from exc
    found = store.find(tx.conn, who.tenant_id, kind, ident, user_id, role)
    if found is not None:
        return 200, {**_view(tx, found), "runs": _count(tx, found), "created": False}
    made = SubjectGrant(
        tenant_id=who.tenant_id,
        id=new_id("sgr"),
        user_id=user_id,
        subject_type=kind,
        subject_id=ident,
        role=role,
        created_by=who.user_id,
        created_at=tx.now,
    )
    store.insert(tx.conn, made)
    covered = access.add_grant(tx.conn, made)
    log.info("subject_grant.created", grant_id=made.id, role=role, runs=covered)
    return 201, {**_view(tx, made), "runs": covered, "created": True}


def list_grants(core: Core, who: Principal, user: str | None = None) -> GrantList:
    """The tenant's grants, oldest first (``user``: one member's, by id or email)."""
    with core.db.read() as conn:
        user_id = None
        if user is not None:
            try:
                user_id = accounts.find_user(conn, who.tenant_id, user)
            except NotFound:
                return {"grants": []}
        rows = store.listed(conn, who.tenant_id, user_id=user_id)
        emails = {g.user_id: destinations.email_of(conn, g.user_id) for g in rows}
    return {"grants": [_shown(g, emails.get(g.user_id)) for g in rows]}


class MemberGrants(TypedDict):
    """A current member of the tenant with their role and their subject grants."""

    id: str
    email: str
    name: str | None
    role: str  # owner | admin | member
    grants: list[GrantView]


class People(TypedDict):
    """The web app's people page: every current member with their grants, and the grants
    of people who are no longer members (still listed, so an admin can revoke them)."""

    members: list[MemberGrants]
    former: list[GrantView]
    roles: list[str]


def people(core: Core, who: Principal) -> People:
    """The tenant's members and their subject grants: admins only (403), as the API's
    ``/v1/subject-grants``."""
    if not who.is_admin:
        raise Forbidden("only administrators manage subject grants")
    with core.db.read() as conn:
        members = accounts.current_members(conn, who.tenant_id)
        rows = store.listed(conn, who.tenant_id)
        current = {m.user_id for m in members}
        emails: dict[str, str | None] = {m.user_id: m.email for m in members}
        for g in rows:
            if g.user_id not in emails:
                emails[g.user_id] = destinations.email_of(conn, g.user_id)
    shown = [_shown(g, emails.get(g.user_id)) for g in rows]
    return {
        "members": [
            {
                "id": m.user_id,
                "email": m.email,
                "name": m.name,
                "role": m.role,
                "grants": [g for g in shown if g["user"]["id"] == m.user_id],
            }
            for m in members
        ],
        "former": [g for g in shown if g["user"]["id"] not in current],
        "roles": list(ROLES),
    }


def revoke(core: Core, who: Principal, grant_id: str) -> GrantView:
    """Revoke a grant: it and the access it gave go in one transaction (404 unknown)."""
    with core.db.transaction() as tx:
        found = store.get(tx.conn, who.tenant_id, grant_id)
        if found is None:
            raise NotFound(f"no subject grant {grant_id!r}")
        shown = _view(tx, found)
        removed = access.drop_grant(tx.conn, who.tenant_id, grant_id)
        store.delete(tx.conn, who.tenant_id, grant_id)
    log.info("subject_grant.revoked", grant_id=grant_id, rows=removed)
    return shown


def _count(tx: Tx, g: SubjectGrant) -> int:
    return access.rows_of_grant(tx.conn, g.tenant_id, g.id)


def _view(tx: Tx, g: SubjectGrant) -> GrantView:
    return _shown(g, destinations.email_of(tx.conn, g.user_id))


def _shown(g: SubjectGrant, email: object) -> GrantView:
    return {
        "id": g.id,
        "user": {"id": g.user_id, "email": None if email is None else str(email)},
        "subject": {"type": g.subject_type, "id": g.subject_id},
        "role": g.role,
        "created_by": g.created_by,
        "created_at": views.iso(g.created_at),
    }
