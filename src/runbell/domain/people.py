"""People on a run: who may see it, who may answer its requests, who may propose
amendments — pure (issue 18 item 4).

Three roles, each a grant of what a member may do beyond seeing the run:

=========== ======= ======================== =========================
role        sees    answers requests         proposes amendments
=========== ======= ======================== =========================
viewer      yes     no                       no
approver    yes     yes (the run's requests) no
amender     yes     no                       yes
=========== ======= ======================== =========================

A run names them in its ``authority`` (``viewers``, ``approvers``, ``amenders``), next to
``users``, which keeps the meaning it always had: a named user sees the run, answers it
and may propose amendments (all three). The run's owner may do all three too. An admin
can grant a member a **subject** (the run's ``subject.type`` and ``subject.id``) in one
role; every run of that subject, existing and future, then counts the member in that role.

:func:`run_people` says what the run itself grants each user; a subject grant adds
:func:`role_grant` of its role; what a member may do is the union of their rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ROLES: tuple[str, ...] = ("viewer", "approver", "amender")
#: The authority lists that name people, and what each grants: (may answer, may amend).
AUTHORITY_LISTS: dict[str, tuple[bool, bool]] = {
    "users": (True, True),  # as before issue 18: see, answer, propose
    "viewers": (False, False),
    "approvers": (True, False),
    "amenders": (False, True),
}

NOT_AN_APPROVER = (
    "You may see this run but not answer its requests: ask its owner to name you an "
    "approver (authority.approvers) or an admin to grant you its subject as approver"
)
NOT_THIS_REQUESTS_APPROVER = (
    "You may see this run but not answer this request: it names who may answer it"
)
NOT_AN_AMENDER = (
    "You may see this run but not propose amendments to it: ask its owner to name you an "
    "amender (authority.amenders) or an admin to grant you its subject as amender"
)


@dataclass(frozen=True, slots=True)
class Grant:
    """What one source lets a member do on a run beyond seeing it."""

    may_answer: bool
    may_amend: bool

    def __or__(self, other: Grant) -> Grant:
        return Grant(self.may_answer or other.may_answer, self.may_amend or other.may_amend)


FULL = Grant(may_answer=True, may_amend=True)


def role_grant(role: str) -> Grant:
    """What a subject grant in ``role`` lets its member do on each run of the subject."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    return Grant(may_answer=role == "approver", may_amend=role == "amender")


def run_people(owner_id: str, named: Mapping[str, Iterable[str]]) -> dict[str, Grant]:
    """What the run itself grants each user: its owner everything; each user named in an
    authority list (``named``: list name → user ids) what that list grants, a user named
    in several lists the union.

    >>> people = run_people("u1", {"viewers": ["u2"], "approvers": ["u2", "u3"]})
    >>> people["u1"] == FULL, people["u2"], people["u3"].may_amend
    (True, Grant(may_answer=True, may_amend=False), False)
    """
    out: dict[str, Grant] = {owner_id: FULL}
    for name, users in named.items():
        answer, amend = AUTHORITY_LISTS[name]
        for user_id in users:
            out[user_id] = out.get(user_id, Grant(False, False)) | Grant(answer, amend)
    return out


def named_refs(authority: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """The member references (ids or emails, as given) each authority list names."""
    out: dict[str, list[str]] = {}
    for name in AUTHORITY_LISTS:
        given = (authority or {}).get(name) or []
        out[name] = [str(ref) for ref in given] if isinstance(given, list) else []
    return out


def subject_key(subject: Mapping[str, object] | None) -> tuple[str, str] | None:
    """A run's subject as a grant matches it: ``(type, id)``, any version; None when the
    run has no subject (or one without a type and id)."""
    if not isinstance(subject, Mapping):
        return None
    kind, ident = subject.get("type"), subject.get("id")
    if not isinstance(kind, str) or not isinstance(ident, str) or not kind or not ident:
        return None
    return kind, ident
