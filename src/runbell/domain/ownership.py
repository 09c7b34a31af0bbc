"""The completion owner of a run: who may report it completed and settle its operations
(issue 18 item 2) — pure.

A run names its completion owner: a worker identity behind a credential (the credential's
id and the worker id; never a secret). Only the owner decides the run's outcome — reports
``completed``, moves an operation to a final state, supersedes an operation that blocks new
work. Anyone else of the tenant reports *findings* (a conflict, evidence), which land on
the ledger beside the operation and change no state.

Who else acts as the owner, and why:

- **admins** (an admin API key, a tenant owner or admin person): the tenant's own
  authority over every run, there to unstick a run whose worker is gone. What they do is
  recorded with their identity in the trace, so an override is never silent.
- **a verified webhook source** (a provider's signed event, or a state reader's read): the
  runtime's authoritative state is not a worker's claim, so no owner rule applies to it.
- **a run without a recorded owner** (made before owners were recorded, or by a caller
  without a credential id): anyone of the tenant acts, as before.

A worker is told apart from another behind the same credential only by the worker id (or
epoch) it sends: a request naming another worker than the owner is refused; one naming
none is the credential's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Owner:
    """A run's completion owner as recorded: ``credential_id`` None means none recorded."""

    credential_id: str | None
    worker_id: str | None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is acting: their credential (None for a person's session), the worker they name
    (None: not said), and whether they are an admin of the tenant."""

    credential_id: str | None
    worker_id: str | None
    is_admin: bool


def owner_refusal(owner: Owner, caller: Caller, doing: str) -> str | None:
    """Why ``caller`` may not ``doing`` (e.g. "report the run completed") on a run owned by
    ``owner``, in one sentence naming the rule; None when they may."""
    if owner.credential_id is None or caller.is_admin:
        return None
    worker = f" (worker {owner.worker_id!r})" if owner.worker_id else ""
    if caller.credential_id != owner.credential_id:
        return (
            f"only the run's completion owner may {doing}: the owner is credential "
            f"{owner.credential_id!r}{worker}; report what you found as a finding "
            "(POST …/operations/{operation_id}/findings) or take the run over explicitly "
            "(POST …/claim)"
        )
    if caller.worker_id is not None and owner.worker_id not in (None, caller.worker_id):
        return (
            f"only the run's completion owner may {doing}: the owner is worker "
            f"{owner.worker_id!r}, not {caller.worker_id!r}; take the run over explicitly "
            "(POST …/claim) first"
        )
    return None


def change_kind(before: Owner, after: Owner) -> str | None:
    """What a claim does to the ownership: None (nothing changes), ``claim`` (the owning
    credential names its first worker, or a run without an owner gets one) or
    ``takeover`` (another worker or another credential becomes the owner)."""
    if before == after:
        return None
    if before.worker_id is None and before.credential_id in (None, after.credential_id):
        return "claim"
    return "takeover"
