"""A reported run state: what a runtime, an SDK or a mapped provider webhook said."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runbell.domain.records import ReportedError, RunReport


@dataclass(frozen=True)
class Signal:
    """A reported run state, from the API, an SDK or a mapped provider webhook."""

    event_id: str
    state: str
    sequence: int | None = None
    at: datetime | None = None
    reason: str | None = None
    error: ReportedError | None = None
    effects_verified: bool | None = None
    report: RunReport | None = None
    # Who reported it, for the trace and the owner rule (``flows.ownership.actor_of``):
    # None for a provider's verified webhook (the source is the actor).
    actor: dict[str, str] | None = None
