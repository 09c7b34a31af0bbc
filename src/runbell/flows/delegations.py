"""Delegated tokens: a runtime key mints a token for a helper, bound to one run, with a
subset of its own capabilities and an expiry; revocable (issue 18 item 1).

Invariants kept here (DESIGN §2 and §3): a token's secret is shown once and stored only
as a hash; a token is never wider than the credential that minted it (403 naming the
capability); it answers 401 once expired or revoked, and once the key that minted it is
revoked (store.delegations.authenticate joins the key); a run outside the minting
credential's scope answers 404, as a run that does not exist (8, another tenant's id).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypedDict

from sqlalchemy.engine import Connection

from runbell.domain import capabilities, limits
from runbell.domain.errors import Forbidden, NotFound, ValidationFailed
from runbell.domain.principal import Principal
from runbell.domain.records import Run
from runbell.domain.text import public_text
from runbell.flows import scope, views
from runbell.flows.accounts import forget_credentials
from runbell.flows.context import Core
from runbell.flows.inputs import DelegationBody
from runbell.store import credential_names, delegations, runs
from runbell.store.delegations import Delegation


class DelegationView(TypedDict):
    """A delegated token as shown (never its secret but once, in :class:`Minted`)."""

    id: str
    run_id: str
    name: str
    capabilities: list[str]
    minted_by: str  # the key's id
    created_at: str | None
    expires_at: str | None
    revoked_at: str | None
    state: str  # active | expired | revoked


class Minted(DelegationView):
    token: str  # rbd_…, shown once


class DelegationList(TypedDict):
    run_id: str
    delegations: list[DelegationView]


def view(d: Delegation, now: datetime) -> DelegationView:
    state = "revoked" if d.revoked_at else "expired" if d.expires_at <= now else "active"
    return {
        "id": d.id,
        "run_id": d.run_id,
        "name": d.name,
        "capabilities": list(d.capabilities),
        "minted_by": d.key_id,
        "created_at": views.iso(d.created_at),
        "expires_at": views.iso(d.expires_at),
        "revoked_at": views.iso(d.revoked_at),
        "state": state,
    }


def may_delegate(conn: Connection, who: Principal, run: Run, wanted: frozenset[str]) -> None:
    """Whether ``who`` may hand ``wanted`` on ``run`` to a helper; raises if not.

    Today: a runtime (or admin) API key — not a delegated token, not a person — with the
    run in its scope (checked before this) holding every capability it delegates. The one
    place to tighten (a run's completion owner, issue 18 item 2)."""
    if who.kind != "key" or who.token_id is not None:
        raise Forbidden("delegated tokens are minted by a runtime API key")
    wider = capabilities.wider_than(who.scope, wanted)
    if wider is not None:
        raise Forbidden(
            f"a delegated token is never wider than the key that mints it; this key "
            f"lacks the capability {wider!r}",
            missing_capability=wider,
        )


def _checked(body: DelegationBody) -> tuple[frozenset[str], int, str]:
    raw = body.get("capabilities")
    if not isinstance(raw, list) or not raw:
        raise ValidationFailed("name at least one capability to delegate", field="capabilities")
    wanted = capabilities.parse_capabilities(raw)
    seconds = body.get("expires_in")
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise ValidationFailed("expires_in (seconds) is required", field="expires_in")
    lifetime = capabilities.delegation_lifetime(seconds)
    name = public_text(body.get("name"), limits.NAME)
    if not name:
        raise ValidationFailed("a delegated token needs a name (who it is for)", field="name")
    return wanted, lifetime, name


def mint(core: Core, who: Principal, run_id: str, body: DelegationBody) -> Minted:
    """A new token for ``run_id``: 201 with the token (shown once). 403 naming a
    capability the minting key lacks; 404 for a run it may not see."""
    wanted, lifetime, name = _checked(body)
    with core.db.transaction() as tx:
        run = scope.check_run(who, runs.get_run(tx.conn, who.tenant_id, run_id), run_id)
        may_delegate(tx.conn, who, run, wanted)
        assert who.key_id is not None  # a key (may_delegate)
        made, secret = delegations.create(
            tx.conn,
            tenant_id=who.tenant_id,
            key_id=who.key_id,
            run_id=run.run_id,
            name=name,
            capabilities=wanted,
            now=tx.now,
            expires_at=tx.now + timedelta(seconds=lifetime),
        )
        return {**view(made, tx.now), "token": secret}


def list_for_run(core: Core, who: Principal, run_id: str) -> DelegationList:
    """The run's delegated tokens (never a secret). A runtime credential needs
    ``runs.read`` and the run in its scope; people do not see them (404)."""
    who.require(capabilities.READ)
    with core.db.read() as conn:
        run = runs.get_run(conn, who.tenant_id, run_id)
        if who.kind != "key" and not who.is_admin:
            run = None
        run = scope.check_run(who, run, run_id)
        found = delegations.for_run(conn, who.tenant_id, run.run_id)
    now = core.db.clock()
    if who.token_id is not None:  # a helper sees only its own token
        found = [d for d in found if d.id == who.token_id]
    return {"run_id": run_id, "delegations": [view(d, now) for d in found]}


class DelegationShown(DelegationView):
    """A delegated token on the run page: with the name of the key that minted it, and
    whether this caller may revoke it (:func:`revoke` decides the same way)."""

    minted_by_name: str | None
    may_revoke: bool


def _may_revoke(who: Principal, key_id: str) -> bool:
    """The key that minted a token, or an admin (a person or an admin key)."""
    minter = who.kind == "key" and who.token_id is None and who.key_id == key_id
    return minter or who.is_admin


def shown_for_run(core: Core, who: Principal, run_id: str) -> list[DelegationShown]:
    """The run page's Delegated tokens: :func:`list_for_run`'s (the same 404 for whoever
    may not see them), each with the name of the key that minted it (never a secret)."""
    listed = list_for_run(core, who, run_id)["delegations"]
    with core.db.read() as conn:
        names = credential_names.key_names(conn, who.tenant_id, {d["minted_by"] for d in listed})
    return [
        {
            **d,
            "minted_by_name": names.get(d["minted_by"]),
            "may_revoke": _may_revoke(who, d["minted_by"]),
        }
        for d in listed
    ]


def revoke(core: Core, who: Principal, delegation_id: str) -> DelegationView:
    """Revoke a token at once (its next request is 401; another process within
    ``RUNBELL_AUTH_CACHE_S``): by the key that minted it or an
    admin. 404 for an unknown token, another tenant's, or one of a run outside the
    caller's scope; revoking a revoked token answers it as it is."""
    with core.db.transaction() as tx:
        try:
            found = delegations.get(tx.conn, who.tenant_id, delegation_id)
        except NotFound:
            raise NotFound(f"no delegated token {delegation_id!r}") from None
        run = runs.get_run(tx.conn, who.tenant_id, found.run_id)
        if run is not None and not scope.in_scope(who, run):
            raise NotFound(f"no delegated token {delegation_id!r}")
        if not _may_revoke(who, found.key_id):
            raise Forbidden("only the key that minted a delegated token, or an admin, revokes it")
        if found.revoked_at is None:
            delegations.revoke(tx.conn, who.tenant_id, delegation_id, tx.now)
            found = delegations.get(tx.conn, who.tenant_id, delegation_id)
        answer = view(found, tx.now)
    forget_credentials(core)  # stops here at once, in other processes within the TTL
    return answer
