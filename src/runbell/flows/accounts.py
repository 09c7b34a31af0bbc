"""Accounts: the first start, tenants, API keys, members, sign-in links, and who a bearer
token is.

These are the administrator's use cases (the CLI and ``runbell.testing`` call them) and
authentication (every face calls :func:`authenticate`). Some take only the
:class:`~runbell.store.db.Database`: a sign-in link needs no secret key, so a terminal
without ``RUNBELL_SECRET_KEY`` can still make one.

Invariants kept here (DESIGN §2 and §3): secrets (API keys, user tokens, sign-in links)
are stored only as hashes and shown once; a revoked key, token or membership stops at the
next request to the process that revoked it, and within ``RUNBELL_AUTH_CACHE_S`` (5 s)
everywhere else (8); another tenant's id answers 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from runbell.domain import capabilities as caps
from runbell.domain import limits
from runbell.domain.errors import Forbidden, NotFound
from runbell.domain.principal import Principal
from runbell.domain.text import public_text
from runbell.flows.context import Core
from runbell.flows.inputs import KeyBody
from runbell.runtime.credentials import Credentials
from runbell.store import accounts
from runbell.store import sessions as links
from runbell.store.db import Database

_CREDENTIALS = "accounts.credentials"  # core.memo[_CREDENTIALS]: runtime.credentials


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
    capabilities: list[str] | None = None,
    run_patterns: list[str] | None = None,
    own_runs: bool = False,
) -> tuple[str, str]:
    """A new API key of ``tenant`` (id or name): (key id, key shown once). A runtime key
    may be scoped: ``capabilities`` (None: all), ``run_patterns`` (None: any run id),
    ``own_runs`` (only the runs it creates); see :mod:`runbell.domain.capabilities`."""
    held = None if capabilities is None else caps.parse_capabilities(capabilities)
    patterns = None if run_patterns is None else caps.parse_patterns(run_patterns)
    with core.db.transaction() as tx:
        tenant_id = accounts.resolve_tenant(tx.conn, tenant)
        return accounts.create_api_key(
            tx.conn,
            tenant_id,
            role,
            tx.now,
            name=name,
            source_id=source_id,
            capabilities=held,
            run_patterns=patterns,
            own_runs=own_runs,
        )


class KeyCreated(TypedDict):
    """``POST /v1/keys``: the key, its secret shown once, and its scope."""

    id: str
    key: str
    role: str
    name: str | None
    capabilities: list[str] | None  # None: every capability
    run_patterns: list[str] | None  # None: any run id
    own_runs: bool


def create_key_for(core: Core, who: Principal, body: KeyBody) -> KeyCreated:
    """An admin makes a key of its own tenant (``POST /v1/keys``)."""
    if not who.is_admin:
        raise Forbidden("creating API keys needs an admin API key or an admin member")
    role = body.get("role") or "runtime"
    name = public_text(body.get("name"), limits.NAME)
    held, patterns = body.get("capabilities"), body.get("run_patterns")
    own = bool(body.get("own_runs"))
    key_id, secret = create_key(
        core,
        who.tenant_id,
        role,
        name=name,
        capabilities=held,
        run_patterns=patterns,
        own_runs=own,
    )
    return {
        "id": key_id,
        "key": secret,
        "role": role,
        "name": name,
        "capabilities": None if held is None else caps.ordered(held),
        "run_patterns": None if patterns is None else list(caps.parse_patterns(patterns)),
        "own_runs": own,
    }


def revoke_key_for(core: Core, who: Principal, key_id: str) -> None:
    """An admin revokes a key of its own tenant (``DELETE /v1/keys/{id}``); the delegated
    tokens it minted stop with it."""
    if not who.is_admin:
        raise Forbidden("revoking API keys needs an admin API key or an admin member")
    revoke_key(core, who.tenant_id, key_id)


def revoke_key(core: Core, tenant: str, key_id: str) -> None:
    """Revoke an API key: its next request to this process is refused, to any other
    within ``RUNBELL_AUTH_CACHE_S`` (:mod:`runbell.runtime.credentials`)."""
    with core.db.transaction() as tx:
        accounts.revoke_api_key(tx.conn, accounts.resolve_tenant(tx.conn, tenant), key_id, tx.now)
    forget_credentials(core)


def add_member(core: Core, tenant: str, email: str, role: str) -> tuple[str, str, str]:
    """Add (or re-activate) a member: (tenant id, user id, a user token shown once)."""
    with core.db.transaction() as tx:
        tenant_id = accounts.resolve_tenant(tx.conn, tenant)
        user_id = accounts.ensure_user(tx.conn, email, tx.now)
        accounts.add_member(tx.conn, tenant_id, user_id, role, tx.now)
        token = accounts.create_user_token(tx.conn, tenant_id, user_id, tx.now)
    forget_credentials(core)  # a member's role may have changed
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
    """Who a bearer token (API key, user or delegated token) is, or None if unknown,
    revoked or expired. Reads the database unless this process verified the token less
    than ``RUNBELL_AUTH_CACHE_S`` ago (:func:`remembered`)."""
    memo = credentials(core)
    now = core.db.clock()
    who = memo.get(token, now)
    if who is not None:
        return who
    generation = memo.generation
    with core.db.read() as conn:
        found = accounts.authenticate_until(conn, token, now)
    if found is None:
        return None
    memo.put(token, found[0], now, found[1], generation=generation)
    return found[0]


def remembered(core: Core, token: str) -> Principal | None:
    """:func:`authenticate` when this process remembers the token (no database read, so
    an event loop may call it inline), else None."""
    return credentials(core).get(token, core.db.clock())


def credentials(core: Core) -> Credentials:
    """The process's memo of verified tokens (:mod:`runbell.runtime.credentials`)."""
    memo: Credentials | None = core.memo.get(_CREDENTIALS)
    if memo is None:
        memo = core.memo.setdefault(_CREDENTIALS, Credentials(core.settings.auth_cache_s))
    return memo


def forget_credentials(core: Core) -> None:
    """After a flow of this process revoked or changed a credential: its next request is
    read from the database again (other processes see it within ``RUNBELL_AUTH_CACHE_S``)."""
    credentials(core).forget()
