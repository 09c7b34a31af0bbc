"""Accounts: the first start, tenants, API keys, members, sign-in links, and who a bearer
token is.

These are the administrator's use cases (the CLI and ``runbell.testing`` call them) and
authentication (every face calls :func:`authenticate`). Some take only the
:class:`~runbell.store.db.Database`: a sign-in link needs no secret key, so a terminal
without ``RUNBELL_SECRET_KEY`` can still make one.

Invariants kept here (DESIGN §2 and §3): secrets (API keys, user tokens, sign-in links)
are stored only as hashes and shown once; a revoked key, token or membership stops at the
next request (8); another tenant's id answers 404.
"""

from __future__ import annotations

from dataclasses import dataclass

from runbell.domain.errors import NotFound
from runbell.domain.principal import Principal
from runbell.flows.context import Core
from runbell.store import accounts
from runbell.store import sessions as links
from runbell.store.db import Database


@dataclass(frozen=True)
class FirstRun:
    """What the first start created, each secret shown once."""

    tenant_id: str
    admin_key: str
    runtime_key: str
    user_email: str
    user_token: str
    login_token: str  # a one-time browser sign-in link for the first user


def bootstrap_if_empty(core: Core, email: str) -> FirstRun | None:
    """Create the first tenant (``default``), its keys and first user when the database
    has no tenant yet; None when it has one."""
    with core.db.transaction() as tx:
        if accounts.count_tenants(tx.conn) > 0:
            return None
        tenant_id = accounts.create_tenant(tx.conn, "default", tx.now)
        _, admin = accounts.create_api_key(tx.conn, tenant_id, "admin", tx.now, name="admin")
        _, runtime = accounts.create_api_key(tx.conn, tenant_id, "runtime", tx.now, name="runtime")
        user_id = accounts.ensure_user(tx.conn, email, tx.now)
        accounts.add_member(tx.conn, tenant_id, user_id, "owner", tx.now)
        token = accounts.create_user_token(tx.conn, tenant_id, user_id, tx.now)
        login = links.create_login_link(tx.conn, tenant_id, user_id, tx.now)
    return FirstRun(tenant_id, admin, runtime, accounts.normalize_email(email), token, login)


def has_tenant(db: Database, ref: str) -> bool:
    """Whether exactly one tenant has this id or name."""
    with db.read() as conn:
        try:
            accounts.resolve_tenant(conn, ref)
        except NotFound:
            return False
    return True


def resolve_tenant(db: Database, ref: str) -> str:
    """A tenant's id from its id or unique name (404 otherwise)."""
    with db.read() as conn:
        return accounts.resolve_tenant(conn, ref)


def create_tenant(core: Core, name: str) -> tuple[str, str]:
    """A new tenant and its first admin API key: (tenant id, key shown once)."""
    with core.db.transaction() as tx:
        tenant_id = accounts.create_tenant(tx.conn, name, tx.now)
        _, secret = accounts.create_api_key(tx.conn, tenant_id, "admin", tx.now, name="admin")
    return tenant_id, secret


def create_key(
    core: Core,
    tenant: str,
    role: str,
    *,
    name: str | None = None,
    source_id: str | None = None,
) -> tuple[str, str]:
    """A new API key of ``tenant`` (id or name): (key id, key shown once)."""
    with core.db.transaction() as tx:
        tenant_id = accounts.resolve_tenant(tx.conn, tenant)
        return accounts.create_api_key(
            tx.conn, tenant_id, role, tx.now, name=name, source_id=source_id
        )


def revoke_key(core: Core, tenant: str, key_id: str) -> None:
    """Revoke an API key at once (its next request is refused)."""
    with core.db.transaction() as tx:
        accounts.revoke_api_key(tx.conn, accounts.resolve_tenant(tx.conn, tenant), key_id, tx.now)


def add_member(core: Core, tenant: str, email: str, role: str) -> tuple[str, str, str]:
    """Add (or re-activate) a member: (tenant id, user id, a user token shown once)."""
    with core.db.transaction() as tx:
        tenant_id = accounts.resolve_tenant(tx.conn, tenant)
        user_id = accounts.ensure_user(tx.conn, email, tx.now)
        accounts.add_member(tx.conn, tenant_id, user_id, role, tx.now)
        token = accounts.create_user_token(tx.conn, tenant_id, user_id, tx.now)
    return tenant_id, user_id, token


def find_member(db: Database, tenant: str, ref: str) -> tuple[str, str]:
    """(tenant id, user id) of a current member named by email or user id (404 otherwise)."""
    with db.read() as conn:
        tenant_id = accounts.resolve_tenant(conn, tenant)
        return tenant_id, accounts.find_user(conn, tenant_id, ref)


def login_link_token(db: Database, tenant: str, ref: str | None) -> str:
    """A one-time sign-in token for a member (``ref`` None: the tenant's first owner)."""
    with db.transaction() as tx:
        tenant_id = accounts.resolve_tenant(tx.conn, tenant)
        if ref is None:
            user_id = accounts.first_owner(tx.conn, tenant_id)
        else:
            user_id = accounts.find_user(tx.conn, tenant_id, ref)
        return links.create_login_link(tx.conn, tenant_id, user_id, tx.now)


def first_tenant_owner(db: Database) -> tuple[str, str] | None:
    """(tenant id, user id) of the oldest tenant and its longest-standing current owner
    (on a first start: ``default`` and its first user); None when there is neither."""
    with db.read() as conn:
        tenant_id = accounts.first_tenant(conn)
        if tenant_id is None:
            return None
        try:
            return tenant_id, accounts.first_owner(conn, tenant_id)
        except NotFound:
            return None


def authenticate(core: Core, token: str) -> Principal | None:
    """Who a bearer token (API key or user token) is, or None if unknown, revoked or
    expired."""
    with core.db.read() as conn:
        return accounts.authenticate(conn, token, core.db.clock())
