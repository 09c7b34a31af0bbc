"""The inbox's shape: which notifications a filter shows, how they group, which group
starts collapsed. Pure (no I/O): the web page, the API's listing and the bulk
acknowledgement all read these, so "failures" means the same everywhere.

Example::

    assert shows("failures", "stalled") and not shows("failures", "completed")
    assert subject_of({"type": "agent", "id": "claude-code"}) == ("agent", "claude-code")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Attention types that ask the person for a decision (a request, a proposed change, a
#: finished run to review).
DECISIONS = ("input_required", "amendment", "needs_review")

#: The inbox's filters: each names the attention types it shows.
FILTERS: dict[str, tuple[str, ...]] = {
    "needs_me": DECISIONS,
    "failures": ("failed", "stalled", "mismatch"),
    "finished": ("completed", "cancelled", "digest"),
}

#: A group with more open items than this starts collapsed (its count stays in view).
GROUP_OPEN_MAX = 3
#: ... and so does every group of a section that holds more groups than this.
SECTION_OPEN_MAX = 8

Subject = tuple[str, str]


@dataclass(frozen=True)
class InboxFilter:
    """What the person asked to see: a filter of :data:`FILTERS` (None: everything), one
    run, the runs of a subject (an agent or a project: its type, its id, or both)."""

    show: str | None = None
    run_id: str | None = None
    subject_type: str | None = None
    subject_id: str | None = None

    def types(self) -> tuple[str, ...] | None:
        return None if self.show is None else FILTERS[self.show]

    @property
    def subject(self) -> Subject | None:
        """The one subject asked for (type and id both given), else None."""
        if self.subject_type is None or self.subject_id is None:
            return None
        return self.subject_type, self.subject_id

    @property
    def by_subject(self) -> bool:
        return self.subject_type is not None or self.subject_id is not None

    def subject_matches(self, subject: Subject | None) -> bool:
        """Whether a run of ``subject`` is among those asked for (type, id, or both)."""
        if not self.by_subject:
            return True
        return subject is not None and (
            (self.subject_type is None or subject[0] == self.subject_type)
            and (self.subject_id is None or subject[1] == self.subject_id)
        )


def shows(show: str | None, attention_type: str) -> bool:
    """Whether the filter ``show`` lists a notification of ``attention_type``."""
    return show is None or attention_type in FILTERS[show]


def subject_of(subject: Mapping[str, Any] | None) -> Subject | None:
    """A run's subject as ``(type, id)``, or None when it names none."""
    if not subject:
        return None
    kind, ident = subject.get("type"), subject.get("id")
    if isinstance(kind, str) and isinstance(ident, str) and kind and ident:
        return kind, ident
    return None


def collapsed(items: int, groups: int) -> bool:
    """Whether a group of ``items`` in a section of ``groups`` starts collapsed."""
    return items > GROUP_OPEN_MAX or groups > SECTION_OPEN_MAX
