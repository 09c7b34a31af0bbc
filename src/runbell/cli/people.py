"""Subject grants (issue 18 item 4): ``runbell grant add|list|revoke``. A member granted a
subject in a role sees (answers, amends) every run of that subject, existing and future;
the same as ``/v1/subject-grants`` with an admin key."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from runbell.cli import common
from runbell.cli.specs import Argument, Group, Option
from runbell.domain.errors import RunbellError

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from collections.abc import Iterator

    from runbell.domain.principal import Principal
    from runbell.flows.context import Core

group = Group("grant", "Subject grants: members and a subject's runs.")
TENANT = Option("--tenant", "the tenant's id or name", metavar="TENANT")


@contextmanager
def _operator(tenant: str) -> Iterator[tuple[Core, Principal]]:
    """The server and the tenant's administrator as the command line acts (an operator
    with the database's credentials, recorded like an admin API key); the database is
    closed after the command."""
    from runbell.domain.principal import Principal
    from runbell.flows import accounts

    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        yield core, Principal(tenant_id=tenant_id, kind="key", role="admin")
    finally:
        core.db.dispose()


def _print(doc: object) -> None:
    import json

    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


@group.command(
    Argument("user", "the member's email or user id"),
    TENANT,
    Option("--subject", "the subject as type:id, e.g. project:launch", metavar="SUBJECT"),
    Option("--role", "viewer, approver or amender", metavar="ROLE"),
    name="add",
)
def grant_add(user: str, tenant: str, subject: str, role: str = "viewer") -> None:
    """Grant a member a subject in a role; prints the grant."""
    from runbell.api.responses import answer_json
    from runbell.flows import grants

    kind, sep, ident = subject.partition(":")
    if not sep or not kind or not ident:
        common.fail(f"--subject {subject!r} is not TYPE:ID", "e.g. --subject project:launch")
    body: grants.GrantBody = {"user": user, "subject": {"type": kind, "id": ident}, "role": role}
    try:
        with _operator(tenant) as (core, who):
            res = answer_json(grants.grant(core, who, body))
    except RunbellError as exc:
        common.fail(exc)
    _print(res)


@group.command(
    TENANT, Option("--user", "only this member's (email or id)", metavar="USER"), name="list"
)
def grant_list(tenant: str, user: str | None = None) -> None:
    """List a tenant's subject grants, oldest first."""
    from runbell.flows import grants

    try:
        with _operator(tenant) as (core, who):
            res = grants.list_grants(core, who, user)
    except RunbellError as exc:
        common.fail(exc)
    _print(res)


@group.command(Argument("grant_id", "the grant's id (sgr_…)"), TENANT, name="revoke")
def grant_revoke(grant_id: str, tenant: str) -> None:
    """Revoke a subject grant at once, on every run of its subject."""
    from runbell.flows import grants

    try:
        with _operator(tenant) as (core, who):
            grants.revoke(core, who, grant_id)
    except RunbellError as exc:
        common.fail(exc)
    common.out.print(f"revoked {grant_id}")
