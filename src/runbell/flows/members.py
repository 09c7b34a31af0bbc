"""Members: revoking one withdraws what was sent to them.

Invariants kept here (DESIGN §2): 8 — a revoked member's tokens and sessions stop at
once, and in the same transaction every open notification of theirs closes as
``revoked`` with its stored previews redacted, which cancels its queued deliveries on
every channel.
"""

from __future__ import annotations

import structlog

from runbell.domain.records import Notification
from runbell.flows.accounts import forget_credentials
from runbell.flows.attention import close_notification
from runbell.flows.context import Core
from runbell.store import accounts, sessions
from runbell.store import notifications as notes

log = structlog.get_logger(__name__)


def revoke_member(core: Core, tenant_id: str, user_id: str) -> int:
    """Revoke a membership and all its tokens, and withdraw what was sent to them.

    Their browser sessions and unused sign-in links end with it. In the same
    transaction, every open notification of theirs closes as ``revoked``
    with its stored previews redacted, which cancels its queued deliveries on every
    channel (invariant 8). Returns how many notifications were withdrawn.
    """
    with core.db.transaction() as tx:
        accounts.revoke_member(tx.conn, tenant_id, user_id, tx.now)
        sessions.end_for_member(tx.conn, tenant_id, user_id, tx.now)
        withdrawn = 0
        for note in notes.open_for_recipient(tx.conn, tenant_id, user_id):
            notes.redact(tx.conn, tenant_id, note["id"])
            redacted: Notification = {**note, "summary": notes.WITHDRAWN_SUMMARY, "reason": None}
            withdrawn += close_notification(tx, redacted, "revoked", "recipient lost access")
    forget_credentials(core)  # their tokens stop here at once, elsewhere within the TTL
    log.info("member.revoked", tenant_id=tenant_id, user_id=user_id, withdrawn=withdrawn)
    return withdrawn
