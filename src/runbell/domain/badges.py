"""A run's status badge, from its verified state and its ledger — pure (issue 18 item 7).

The badge is what a page says about a run at a glance, so it must never say more than
Runbell knows. A ``completed`` report is the runtime's claim; the ledger says what the
claim is worth. So a completed run is **Completed** only when nothing is left in doubt
(every operation confirmed, or no operation declared and no doubt reported), and
otherwise one of three distinct badges:

- **Completed with conflicts**: some operations conflicted or failed, none is in doubt;
- **Outcome unknown**: some operations may or may not have landed (uncertain, unresolved
  after a lookup, or still sent or planned when the run finished), none conflicted;
- **Needs review**: both at once, or the runtime itself said its effects are not
  verified.

The runs overview, the run page and the inbox all take their badge from :func:`badge`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runbell.domain.operations import counts_text, normalized

#: States whose badge is the state itself (a run that has not finished, or did not
#: complete: a failed or cancelled run says so, and its ledger is shown beside it).
STATE_BADGES: dict[str, str] = {
    "queued": "Queued",
    "working": "Working",
    "input_required": "Waiting for input",
    "stopping": "Stopping",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Cancelled",
}

#: Operation states that went wrong, and those nobody can confirm yet.
WRONG = ("conflict", "failed")
IN_DOUBT = ("uncertain", "unresolved", "sent", "planned")


@dataclass(frozen=True, slots=True)
class Badge:
    """``key``: a stable CSS/test key (``completed``, ``completed-conflicts``,
    ``outcome-unknown``, ``needs-review`` or the state); ``label``: the badge's words;
    ``because``: one sentence saying why, for a completed run that is not plainly done
    (None otherwise)."""

    key: str
    label: str
    because: str | None = None

    @property
    def settled(self) -> bool:
        """True when the badge leaves nothing for a person to check."""
        return self.key not in ("completed-conflicts", "outcome-unknown", "needs-review")


def badge(state: str, outcome: str | None, counts: Mapping[str, int] | None = None) -> Badge:
    """The badge for a run in ``state`` whose completion was judged ``outcome``
    (``verified`` / ``needs_review`` / ``unknown`` / None) with these ledger ``counts``.

    >>> badge("completed", "needs_review", {"confirmed": 9, "conflict": 2, "uncertain": 1})
    Badge(key='needs-review', label='Needs review', because='9 confirmed, 2 conflicts, 1 uncertain')
    >>> badge("completed", "verified", {"confirmed": 3}).label
    'Completed'
    """
    if state != "completed" or outcome in (None, "verified"):
        return Badge(f"state-{state}", STATE_BADGES.get(state, state))
    shown = normalized(counts or {})
    text = counts_text(shown) if shown else None
    wrong = any(shown.get(s) for s in WRONG)
    doubt = any(shown.get(s) for s in IN_DOUBT)
    if wrong and not doubt:
        return Badge("completed-conflicts", "Completed with conflicts", text)
    if doubt and not wrong:
        return Badge("outcome-unknown", "Outcome unknown", text)
    if not wrong and not doubt:  # the ledger is clean: the runtime doubted its own work
        said = "the agent reported that its effects are not verified"
        return Badge("needs-review", "Needs review", f"{text}; {said}" if text else said)
    return Badge("needs-review", "Needs review", text)
