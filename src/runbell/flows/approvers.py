"""Who answers a request (issue 18 item 4): the people a request names
(``approvers``), else the run's approvers — its owner, members of the roles its
authority names, and anyone whose access rows say they may answer (``authority.users``,
``authority.approvers``, approver grants of its subject). A viewer sees a run and its
requests but answers none; :func:`answer_refusal` says why, for a 403 and the page.
Who is told of a new request: :func:`paged`.
"""

from __future__ import annotations

from typing import Any

from runbell.domain.errors import NotFound, ValidationFailed
from runbell.domain.people import NOT_AN_APPROVER, NOT_THIS_REQUESTS_APPROVER
from runbell.domain.principal import Principal
from runbell.domain.records import InputRequest, Run
from runbell.i18n import N_
from runbell.store import access, accounts, runs

NOT_A_PERSON = N_("only a person answers a request")  # worded for the reader by the page


def may_answer(conn: Any, who: Principal, run: Run, req: InputRequest | None = None) -> bool:
    """Whether ``who`` may answer the run's request ``req`` (issue 18 item 4): the people
    the request names, when it names them (``approvers``); otherwise the run's approvers —
    its owner, members of the roles its authority names, and anyone whose access rows say
    they may answer (``authority.users`` and ``authority.approvers``, approver grants of
    its subject). A viewer sees the run but does not answer.

    Tenant owners and admins see every run but answer only when named.
    """
    return answer_refusal(conn, who, run, req) is None


def answer_refusal(
    conn: Any, who: Principal, run: Run, req: InputRequest | None = None
) -> str | None:
    """None when ``who`` may answer ``req`` (:func:`may_answer`), else why not, in one
    sentence for a 403 and the page."""
    if not who.is_user or who.user_id is None:
        return NOT_A_PERSON
    if req is not None and req.approvers:
        return None if who.user_id in req.approvers else NOT_THIS_REQUESTS_APPROVER
    if who.user_id == run.owner_user_id:
        return None
    if who.role in ((run.authority or {}).get("roles") or []):
        return None
    granted = access.granted(conn, who, run.run_id)
    if granted is not None and granted.may_answer:
        return None
    return NOT_AN_APPROVER


def refs(given: object) -> list[str] | None:
    if given is None:
        return None
    if (
        not isinstance(given, list)
        or not given
        or not all(isinstance(ref, str) and ref.strip() for ref in given)
    ):
        raise ValidationFailed(
            "approvers is a non-empty list of user ids or emails", field="approvers"
        )
    return list(given)


def paged(conn: Any, run: Run, approvers: list[str] | None) -> tuple[str, ...]:
    """Who is told of a new request: the people it names, else the run's owner and the
    members ``authority.approvers`` names. Viewers are never told of what they cannot
    answer; ``authority.users`` and subject grants are not paged (as before issue 18:
    they find the request under "Needs you")."""
    if approvers:
        return tuple(approvers)
    out = [run.owner_user_id]
    for ref in (run.authority or {}).get("approvers") or []:
        try:
            user_id = accounts.find_user(conn, run.tenant_id, ref)
        except NotFound:
            continue  # named, but no longer a member
        if user_id not in out:
            out.append(user_id)
    return tuple(out)


def resolve(conn: Any, who: Principal, run: Run, refs: list[str] | None) -> list[str] | None:
    """The request's own approvers as member ids, each one who may see the run (its owner,
    a tenant admin, or one its access rows name): 422 naming the first who is not."""
    if refs is None:
        return None
    out: list[str] = []
    for ref in refs:
        try:
            user_id = accounts.find_user(conn, who.tenant_id, ref)
        except NotFound as exc:
            raise ValidationFailed(
                f"approvers: {ref!r} is not a member of this tenant", field="approvers"
            ) from exc
        role = accounts.membership_role(conn, who.tenant_id, user_id) or "member"
        person = Principal(tenant_id=who.tenant_id, kind="user", role=role, user_id=user_id)
        if user_id != run.owner_user_id and not runs.can_see_run(conn, person, run.run_id):
            raise ValidationFailed(
                f"approvers: {ref!r} may not see run {run.run_id!r}; name people who may "
                "(the run's authority, or a grant of its subject)",
                field="approvers",
            )
        if user_id not in out:
            out.append(user_id)
    return out
