"""The tenant's attention policy: which rules decide, and replacing the tenant's own.

Invariants kept here (DESIGN §2):

- 7: the only way an urgency bypasses quiet hours is the tenant's ``quiet_hours_bypass``
  list, set by an administrator here — never by a runtime or a model.
- A policy document is validated whole before anything is stored (a bad rule is a 422 and
  the old policy stays).
"""

from __future__ import annotations

from typing import Any, TypedDict

from sqlalchemy.engine import Connection

from runbell.domain.policy import Policy, TenantPolicy
from runbell.flows.context import Core
from runbell.store import accounts, stalls
from runbell.store.db import Tx


def policy_for(core: Core, conn: Connection, tenant_id: str) -> Policy:
    """The tenant's effective policy (its own rules first, then the defaults)."""
    return core.policies.get(tenant_id, accounts.tenant_policy(conn, tenant_id))


def policy_in(core: Core, tx: Tx, tenant_id: str) -> Policy:
    """:func:`policy_for`, read once per transaction (a batch of signals shares it)."""
    key = ("policy", tenant_id)
    if key not in tx.cache:
        tx.cache[key] = policy_for(core, tx.conn, tenant_id)
    policy: Policy = tx.cache[key]
    return policy


class PolicyView(TypedDict):
    """``GET /v1/policy``: the effective rules in order and the tenant's own document."""

    quiet_hours_bypass: list[str]
    stall_after_seconds: int
    tenant_rules: TenantPolicy  # the document as the tenant wrote it
    effective: list[dict[str, Any]]  # each rule's fields (domain.policy.Rule)


def view(policy: Policy, own: TenantPolicy | None) -> PolicyView:
    return {
        "quiet_hours_bypass": sorted(policy.quiet_bypass),
        "stall_after_seconds": policy.stall_after_s,
        "tenant_rules": own or {"rules": []},
        "effective": [r.as_dict() for r in policy.rules],
    }


def get_policy(core: Core, tenant_id: str) -> PolicyView:
    """The effective rules in order (tenant rules first), and the tenant's own document."""
    with core.db.read() as conn:
        own = accounts.tenant_policy(conn, tenant_id)
        return view(core.policies.get(tenant_id, own), own)


def set_policy(core: Core, tenant_id: str, doc: TenantPolicy) -> PolicyView:
    """Replace the tenant's rules, validated whole before anything is stored."""
    policy = Policy.from_mapping(doc, base=Policy.default())  # raises before storing
    with core.db.transaction() as tx:
        accounts.get_tenant(tx.conn, tenant_id)
        accounts.set_tenant_policy(tx.conn, tenant_id, doc)
        # Runs following the tenant's stall default: their clocks now run out differently.
        stalls.retime_tenant_default(tx.conn, tenant_id, policy.stall_after_s)
    return view(policy, doc)
