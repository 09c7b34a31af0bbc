"""Tenants, users, memberships, API keys, user tokens and sources."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from runbell.domain import limits
from runbell.domain.capabilities import Scope, ordered
from runbell.domain.channels import FACTS
from runbell.domain.errors import NotFound, ValidationFailed
from runbell.domain.policy import TenantPolicy
from runbell.domain.principal import Principal
from runbell.ids import new_id, new_token, token_hash
from runbell.store import delegations, fast
from runbell.store import tables as t

ROLES_MEMBER = ("owner", "admin", "member")
ROLES_KEY = ("runtime", "admin")


def create_tenant(conn: Connection, name: str, now: datetime) -> str:
    name = name.strip()
    if not name or len(name) > 200:
        raise ValidationFailed("a tenant name is 1 to 200 characters", field="name")
    if conn.execute(sa.select(t.tenants.c.id).where(t.tenants.c.name == name)).first():
        raise ValidationFailed(f"a tenant named {name!r} exists already", field="name")
    tenant_id = new_id("ten")
    conn.execute(t.tenants.insert().values(id=tenant_id, name=name, created_at=now))
    # Every tenant has one authoritative API source: signals sent with a runtime key.
    conn.execute(
        t.sources.insert().values(
            id=new_id("src"),
            tenant_id=tenant_id,
            name="api",
            kind="api",
            trust="authoritative",
            created_at=now,
        )
    )
    return tenant_id


def get_tenant(conn: Connection, tenant_id: str) -> dict[str, Any]:
    row = conn.execute(sa.select(t.tenants).where(t.tenants.c.id == tenant_id)).first()
    if row is None:
        raise NotFound(f"no tenant {tenant_id!r}")
    return dict(row._mapping)


def first_tenant(conn: Connection) -> str | None:
    """The oldest tenant (on a first start: ``default``), or None in an empty database."""
    tenant = conn.execute(
        sa.select(t.tenants.c.id).order_by(t.tenants.c.created_at).limit(1)
    ).scalar()
    return None if tenant is None else str(tenant)


def resolve_tenant(conn: Connection, ref: str) -> str:
    """A tenant by id or by unique name (CLI convenience)."""
    row = conn.execute(
        sa.select(t.tenants.c.id).where(sa.or_(t.tenants.c.id == ref, t.tenants.c.name == ref))
    ).all()
    if len(row) != 1:
        raise NotFound(f"no single tenant named or numbered {ref!r}")
    return str(row[0][0])


def api_source_id(conn: Connection, tenant_id: str) -> str:
    return str(
        conn.execute(
            sa.select(t.sources.c.id).where(
                t.sources.c.tenant_id == tenant_id,
                t.sources.c.kind == "api",
                t.sources.c.name == "api",
            )
        ).scalar_one()
    )


def create_api_key(
    conn: Connection,
    tenant_id: str,
    role: str,
    now: datetime,
    *,
    name: str | None = None,
    source_id: str | None = None,
    capabilities: frozenset[str] | None = None,
    run_patterns: tuple[str, ...] | None = None,
    own_runs: bool = False,
) -> tuple[str, str]:
    """A new API key: (its id, its secret, shown once). A runtime key may be scoped
    (domain.capabilities): ``capabilities`` None is every one, ``run_patterns`` None any
    run id, ``own_runs`` only the runs it creates. Admin keys are never scoped."""
    if role not in ROLES_KEY:
        raise ValidationFailed(f"key role must be one of {', '.join(ROLES_KEY)}", field="role")
    scoped = capabilities is not None or run_patterns is not None or own_runs
    if scoped and role != "runtime":
        raise ValidationFailed("only a runtime key can be scoped", field="role")
    if source_id is not None:
        get_source(conn, tenant_id, source_id)
    key_id = new_id("key")
    secret = new_token("rbk")
    conn.execute(
        t.api_keys.insert().values(
            id=key_id,
            tenant_id=tenant_id,
            role=role,
            name=name,
            key_hash=token_hash(secret),
            source_id=source_id,
            created_at=now,
            capabilities=None if capabilities is None else ordered(capabilities),
            run_patterns=None if run_patterns is None else list(run_patterns),
            own_runs=own_runs,
        )
    )
    return key_id, secret


def key_scope(
    key_id: str, capabilities: list[str] | None, run_patterns: list[str] | None, own_runs: bool
) -> Scope | None:
    """A key's stored scope (None: unscoped, every capability on every run)."""
    if capabilities is None and run_patterns is None and not own_runs:
        return None
    return Scope(
        capabilities=None if capabilities is None else frozenset(capabilities),
        run_patterns=None if run_patterns is None else tuple(run_patterns),
        own_runs=bool(own_runs),
        creator_id=key_id,
    )


def revoke_api_key(conn: Connection, tenant_id: str, key_id: str, now: datetime) -> None:
    res = conn.execute(
        sa.update(t.api_keys)
        .where(t.api_keys.c.tenant_id == tenant_id, t.api_keys.c.id == key_id)
        .values(revoked_at=now)
    )
    if res.rowcount == 0:
        raise NotFound(f"no key {key_id!r}")


def ensure_user(conn: Connection, email: str, now: datetime, name: str | None = None) -> str:
    email = normalize_email(email)
    row = conn.execute(sa.select(t.users.c.id).where(t.users.c.email == email)).first()
    if row:
        return str(row[0])
    user_id = new_id("usr")
    conn.execute(t.users.insert().values(id=user_id, email=email, name=name, created_at=now))
    return user_id


def normalize_email(email: str) -> str:
    email = email.strip().lower()
    local, at, domain = email.partition("@")
    if not at or not local or not domain or " " in email or len(email) > limits.EMAIL:
        raise ValidationFailed(f"{email!r} is not an email address", field="email")
    return email


def add_member(conn: Connection, tenant_id: str, user_id: str, role: str, now: datetime) -> None:
    if role not in ROLES_MEMBER:
        raise ValidationFailed(f"role must be one of {', '.join(ROLES_MEMBER)}", field="role")
    existing = conn.execute(
        sa.select(t.memberships).where(
            t.memberships.c.tenant_id == tenant_id, t.memberships.c.user_id == user_id
        )
    ).first()
    if existing:
        conn.execute(
            sa.update(t.memberships)
            .where(t.memberships.c.tenant_id == tenant_id, t.memberships.c.user_id == user_id)
            .values(role=role, revoked_at=None)
        )
    else:
        conn.execute(
            t.memberships.insert().values(
                tenant_id=tenant_id, user_id=user_id, role=role, created_at=now
            )
        )
    has_prefs = conn.execute(
        sa.select(t.preferences.c.user_id).where(
            t.preferences.c.tenant_id == tenant_id, t.preferences.c.user_id == user_id
        )
    ).first()
    if not has_prefs:
        # The channels that reach the address the admin registered (email) are on at
        # their default urgencies; the user can withdraw them. Recorded with how and when
        # the consent was given.
        conn.execute(
            t.preferences.insert().values(
                tenant_id=tenant_id,
                user_id=user_id,
                updated_at=now,
                consent={
                    f.consent_key: {
                        "urgencies": list(f.default_consent),
                        "given_at": now.isoformat(),
                        "how": "default_on_invite",
                    }
                    for f in FACTS.values()
                    if f.destination == "address" and f.consent_key is not None
                },
            )
        )


def create_user_token(
    conn: Connection,
    tenant_id: str,
    user_id: str,
    now: datetime,
    expires_at: datetime | None = None,
) -> str:
    secret = new_token("rbu")
    conn.execute(
        t.user_tokens.insert().values(
            id=new_id("tok"),
            tenant_id=tenant_id,
            user_id=user_id,
            token_hash=token_hash(secret),
            created_at=now,
            expires_at=expires_at,
        )
    )
    return secret


def revoke_member(conn: Connection, tenant_id: str, user_id: str, now: datetime) -> None:
    """Revoke a membership and every API token of it (``sessions.end_for_member`` ends its
    browser sessions). Access checks read this on every call."""
    res = conn.execute(
        sa.update(t.memberships)
        .where(
            t.memberships.c.tenant_id == tenant_id,
            t.memberships.c.user_id == user_id,
            t.memberships.c.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )
    if res.rowcount == 0:
        raise NotFound(f"no active membership for {user_id!r}")
    conn.execute(
        sa.update(t.user_tokens)
        .where(
            t.user_tokens.c.tenant_id == tenant_id,
            t.user_tokens.c.user_id == user_id,
            t.user_tokens.c.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )


def _member_by(column: str) -> fast.Statement:
    m, ref, tenant = (
        t.memberships.c,
        sa.bindparam("ref", type_=sa.String),
        sa.bindparam("tenant_id", type_=sa.String),
    )
    current = sa.and_(t.users.c[column] == ref, m.tenant_id == tenant, m.revoked_at.is_(None))
    join = t.users.join(t.memberships, m.user_id == t.users.c.id)
    return fast.Statement(lambda: sa.select(t.users.c.id).select_from(join).where(current))


# Compiled once (store.fast): every run creation names its owner (issue 21, P2-put).
_MEMBER_BY_ID, _MEMBER_BY_EMAIL = _member_by("id"), _member_by("email")


def find_user(conn: Connection, tenant_id: str, ref: str) -> str:
    """A current member by user id or email; NotFound otherwise."""
    if ref.startswith("usr_"):
        row = _MEMBER_BY_ID.first(conn, ref=ref, tenant_id=tenant_id)
    else:
        row = _MEMBER_BY_EMAIL.first(conn, ref=ref.strip().lower(), tenant_id=tenant_id)
    if row is None:
        raise NotFound(f"no member {ref!r} in this tenant")
    return str(row["id"])


@dataclass(frozen=True, slots=True)
class MemberRow:
    """A current member of a tenant, as the people page lists them."""

    user_id: str
    email: str
    name: str | None
    role: str  # owner | admin | member


def current_members(conn: Connection, tenant_id: str) -> list[MemberRow]:
    """The tenant's current members (not revoked), by email."""
    m, u = t.memberships, t.users
    rows = conn.execute(
        sa.select(u.c.id, u.c.email, u.c.name, m.c.role)
        .join(m, m.c.user_id == u.c.id)
        .where(m.c.tenant_id == tenant_id, m.c.revoked_at.is_(None))
        .order_by(u.c.email)
    ).all()
    return [MemberRow(str(r.id), str(r.email), r.name, str(r.role)) for r in rows]


def first_owner(conn: Connection, tenant_id: str) -> str:
    """The tenant's longest-standing current owner (on a first start: its first user)."""
    m = t.memberships
    row = conn.execute(
        sa.select(m.c.user_id)
        .where(m.c.tenant_id == tenant_id, m.c.role == "owner", m.c.revoked_at.is_(None))
        .order_by(m.c.created_at, m.c.user_id)
        .limit(1)
    ).first()
    if row is None:
        raise NotFound("this tenant has no current owner; name a member")
    return str(row[0])


_ROLE = fast.Statement(
    lambda: sa.select(t.memberships.c.role).where(
        t.memberships.c.tenant_id == sa.bindparam("tenant_id"),
        t.memberships.c.user_id == sa.bindparam("user_id"),
        t.memberships.c.revoked_at.is_(None),
    )
)


def membership_role(conn: Connection, tenant_id: str, user_id: str) -> str | None:
    row = _ROLE.first(conn, tenant_id=tenant_id, user_id=user_id)
    return None if row is None else str(row["role"])


def authenticate(conn: Connection, token: str, now: datetime) -> Principal | None:
    """The principal for a bearer token, or None. One indexed lookup per call."""
    found = authenticate_until(conn, token, now)
    return None if found is None else found[0]


def authenticate_until(
    conn: Connection, token: str, now: datetime
) -> tuple[Principal, datetime | None] | None:
    """:func:`authenticate` and when the credential expires by itself (None: never), so
    that a process remembering it (``flows.accounts``) never outlives it."""
    digest = token_hash(token)
    if token.startswith("rbk_"):
        k = t.api_keys
        key = conn.execute(
            sa.select(
                k.c.id,
                k.c.tenant_id,
                k.c.role,
                k.c.source_id,
                k.c.capabilities,
                k.c.run_patterns,
                k.c.own_runs,
            ).where(k.c.key_hash == digest, k.c.revoked_at.is_(None))
        ).first()
        if key is None:
            return None
        return Principal(
            tenant_id=key.tenant_id,
            kind="key",
            role=key.role,
            key_id=key.id,
            source_id=key.source_id,
            scope=key_scope(key.id, key.capabilities, key.run_patterns, key.own_runs),
        ), None
    if token.startswith(delegations.PREFIX + "_"):
        return delegations.authenticate_until(conn, token, now)
    if token.startswith("rbu_"):
        row = conn.execute(
            sa.select(
                t.user_tokens.c.tenant_id,
                t.user_tokens.c.user_id,
                t.user_tokens.c.expires_at,
                t.memberships.c.role,
            )
            .join(
                t.memberships,
                sa.and_(
                    t.memberships.c.tenant_id == t.user_tokens.c.tenant_id,
                    t.memberships.c.user_id == t.user_tokens.c.user_id,
                ),
            )
            .where(
                t.user_tokens.c.token_hash == digest,
                t.user_tokens.c.revoked_at.is_(None),
                t.memberships.c.revoked_at.is_(None),
            )
        ).first()
        if row is None or (row.expires_at is not None and row.expires_at <= now):
            return None
        user = Principal(tenant_id=row.tenant_id, kind="user", role=row.role, user_id=row.user_id)
        return user, row.expires_at
    return None


# --- sources -------------------------------------------------------------------------


def create_source(
    conn: Connection,
    tenant_id: str,
    now: datetime,
    *,
    name: str,
    kind: str,
    trust: str,
    mapper: str | None,
    reader: dict[str, Any] | None,
    sealed_secrets: list[str] | None,
) -> str:
    exists = conn.execute(
        sa.select(t.sources.c.id).where(
            t.sources.c.tenant_id == tenant_id, t.sources.c.name == name
        )
    ).first()
    if exists:
        raise ValidationFailed(f"a source named {name!r} exists already", field="name")
    source_id = new_id("src")
    conn.execute(
        t.sources.insert().values(
            id=source_id,
            tenant_id=tenant_id,
            name=name,
            kind=kind,
            trust=trust,
            mapper=mapper,
            reader=reader,
            secrets=sealed_secrets,
            created_at=now,
        )
    )
    return source_id


@dataclass(frozen=True, slots=True)
class Source:
    """Where a tenant's signals come from: the API (a runtime key) or a signed provider
    webhook; whether it is trusted as is or read back (``reader``); its sealed secrets."""

    id: str
    tenant_id: str
    name: str
    kind: str
    mapper: str | None
    trust: str
    reader: dict[str, Any] | None
    secrets: list[str] | None
    created_at: datetime

    @classmethod
    def of(cls, row: RowMapping) -> Source:
        return cls(**row)


def get_source(conn: Connection, tenant_id: str | None, source_id: str) -> Source:
    q = sa.select(t.sources).where(t.sources.c.id == source_id)
    if tenant_id is not None:
        q = q.where(t.sources.c.tenant_id == tenant_id)
    row = conn.execute(q).first()
    if row is None:
        raise NotFound(f"no source {source_id!r}")
    return Source.of(row._mapping)


def list_sources(conn: Connection, tenant_id: str) -> list[Source]:
    rows = conn.execute(
        sa.select(t.sources).where(t.sources.c.tenant_id == tenant_id).order_by(t.sources.c.id)
    ).all()
    return [Source.of(r._mapping) for r in rows]


def update_source_secrets(
    conn: Connection, tenant_id: str, source_id: str, sealed: list[str]
) -> None:
    conn.execute(
        sa.update(t.sources)
        .where(t.sources.c.tenant_id == tenant_id, t.sources.c.id == source_id)
        .values(secrets=sealed)
    )


def count_tenants(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(t.tenants)).scalar_one())


_POLICY = fast.Statement(
    lambda: sa.select(t.tenants.c.policy).where(t.tenants.c.id == sa.bindparam("tenant_id"))
)


def tenant_policy(conn: Connection, tenant_id: str) -> TenantPolicy | None:
    """The tenant's own policy document (None: the defaults alone)."""
    row = _POLICY.first(conn, tenant_id=tenant_id)
    return (row["policy"] if row else None) or None


def set_tenant_policy(conn: Connection, tenant_id: str, doc: TenantPolicy) -> None:
    conn.execute(sa.update(t.tenants).where(t.tenants.c.id == tenant_id).values(policy=doc))


def machine_answers(conn: Connection, tenant_id: str) -> bool:
    """Whether machines may answer the tenant's requests (the default: yes)."""
    value = conn.execute(
        sa.select(t.tenants.c.machine_answers).where(t.tenants.c.id == tenant_id)
    ).scalar_one_or_none()
    return value is None or bool(value)


def set_machine_answers(conn: Connection, tenant_id: str, allowed: bool) -> None:
    conn.execute(
        sa.update(t.tenants).where(t.tenants.c.id == tenant_id).values(machine_answers=allowed)
    )
