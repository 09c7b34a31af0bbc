"""A reported run state: what a runtime, an SDK or a mapped provider webhook said."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runbell.domain.records import ReportedError


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
    report: dict[str, Any] | None = None
