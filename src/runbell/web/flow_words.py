"""What the flows and the domain word in English, worded again in the reader's language.

The flows explain themselves once, in English: a refused action's ``detail`` (the API's
problem ``detail`` stays English, it is for machines), a schedule's authority notice, a
cancelled run's outcome, a dependency's standing, an amendment's stored summary. Nothing
translated is stored. A page words them at render time here: each known sentence is a
*template* below, the flow's exact English with ``{name}`` where a value goes; a detail
matching one is shown as that template's translation with the same values (a state, a
time and a decision worded for the reader too). A detail no template knows is shown as
it is, in English, rather than guessed at.

Example::

    with i18n.using("de"):
        worded("The run is no longer waiting for input (it is now completed).")
        # "Der Lauf wartet nicht mehr auf eine Eingabe (er ist jetzt abgeschlossen)."
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

from runbell import i18n
from runbell.domain import cancellation, people
from runbell.i18n import N_, _
from runbell.web import wording

#: The flows' and the domain's sentences a page shows (their English, exactly as they
#: word it; ``{state}`` is a run state, ``{at}`` a time as ``2026-12-01 12:00 UTC``).
TEMPLATES = (
    # flows.answers: why an answer was not taken
    N_("This request was already answered by {who} at {at}."),
    N_("A newer request replaced this one ({id})."),
    N_("This request was cancelled at {at}: the run stopped waiting for it (it is now {state})."),
    N_("This request expired at {at}."),
    N_("The run is no longer waiting for input (it is now {state})."),
    N_("The run changed since this page was loaded (version {before} → {after})."),
    N_("The request changed since this page was loaded (version {before} → {after})."),
    N_("only the run's owner or the people it names can answer this request"),
    N_("a machine ({kind} {id})"),
    # flows.cancel_request
    N_("only the run's owner or the people its authority names can cancel it"),
    N_(
        "run {id} is {state}; a finished run cannot be cancelled (and cancelling never "
        "undoes work that was kept)"
    ),
    # flows.amendments
    N_("run {id} is {state}; a finished run is not amended"),
    N_("This amendment was already decided ({amendment_state})."),
    N_("This amendment is {amendment_state}."),
    N_(
        "The run has finished ({state}); a finished run is not amended, so this amendment "
        "was cancelled."
    ),
    N_(
        "This amendment was proposed against run version {before}; send that as "
        "expected_run_version (not {after})."
    ),
    N_(
        "The run's {fields} changed since this amendment was proposed; approving it would "
        "overwrite that change. Reject it, or ask for a new proposal."
    ),
    N_("only the run's owner decides on a proposed amendment"),
    N_("{who} proposes a change to this run ({fields})"),
    N_("{who} proposes a change to this run"),
    # flows.review_answer
    N_("only the run's owner or the people it names can decide on its review"),
    N_("This review was already decided by {who}."),
    N_(
        "The ledger changed since this review was opened: a newer review ({id}) replaced "
        "it. Decide on what the ledger says now."
    ),
    N_("This review is {review_state}: every operation settled, nothing is left to decide."),
    # domain.schedules
    N_("schedule {id} is {schedule_state}; it cannot {action}"),
    N_("schedule {id} is revoked; it is not edited"),
    N_("schedule {id} is {schedule_state}: no new runs start under it"),
    N_("a schedule is changed by an admin or by its owner, not by a runtime key"),
    N_("the schedule that started this run was revoked"),
    N_("the schedule's authority changed after this run started under it"),
    # flows.dry_run
    N_("only the oldest {n} transitions of the window were replayed"),
    # domain.jobs: where the proposal a run depends on stands
    N_("Depends on a proposal that is not approved yet"),
    N_("Depends on a proposal that was approved"),
    N_("Depends on a proposal that was rejected"),
    N_("Depends on a proposal that was answered"),
    N_("Depends on a proposal that was replaced by a newer version"),
    N_("Depends on a proposal that was replaced by a newer version ({id})"),
    N_("Depends on a proposal that was cancelled"),
    N_("Depends on a proposal that expired without a decision"),
)

#: A value that is itself a word (a schedule's action and state, an amendment's or a
#: review's state), shown in the reader's language.
VALUE_WORDS = {
    "action": {"pause": N_("be paused"), "resume": N_("be resumed"), "revoke": N_("be revoked")},
    "schedule_state": {"active": N_("active"), "paused": N_("paused"), "revoked": N_("revoked")},
    "amendment_state": {
        "pending": N_("pending"),
        "approved": N_("approved"),
        "rejected": N_("rejected"),
        "cancelled": N_("cancelled"),
        "expired": N_("expired"),
        "applied": N_("applied"),
    },
    "review_state": {
        "answered": N_("answered"),
        "cancelled": N_("cancelled"),
        "expired": N_("expired"),
        "resolved": N_("resolved"),
    },
}

_SLOT = re.compile(r"\{(\w+)\}")
_UTC_WORDS = "%Y-%m-%d %H:%M UTC"


@cache
def _patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    out = []
    for template in TEMPLATES:
        parts, last = [], 0
        for m in _SLOT.finditer(template):
            parts.append(re.escape(template[last : m.start()]))
            parts.append(f"(?P<{m[1]}>.+?)")
            last = m.end()
        parts.append(re.escape(template[last:]))
        out.append((re.compile("".join(parts), re.DOTALL), template))
    # The longest first: "… ({fields})" before the same sentence without the brackets.
    return tuple(sorted(out, key=lambda p: -len(p[1])))


def _value(name: str, value: str, tz: ZoneInfo | None) -> str:
    value = value.strip("'")
    if name == "state":
        return wording.state_label(value).lower()
    if name == "at":
        try:
            at = datetime.strptime(value, _UTC_WORDS).replace(tzinfo=UTC)
        except ValueError:
            return value
        return i18n.format_time(at, None, tz)
    if name == "who" and value.startswith("a machine ("):
        return worded(value, tz=tz)
    words = VALUE_WORDS.get(name)
    if words is not None and value in words:
        return _(words[value])
    return value


def worded(text: str, *, tz: ZoneInfo | None = None) -> str:
    """``text`` (a flow's English) in the current language when it is one of
    :data:`TEMPLATES` (or one of the domain's refusals); as it is otherwise, and always in
    English. A time in it is shown in ``tz`` (as written, UTC, when not given)."""
    stripped = text.strip()
    if not stripped or i18n.current() == i18n.DEFAULT:
        return text  # English: the flow's own words, exactly
    if stripped in REFUSALS:
        return _(stripped)
    for pattern, template in _patterns():
        m = pattern.fullmatch(stripped)
        if m:
            values = {k: _value(k, v, tz) for k, v in m.groupdict().items()}
            return _(template).format(**values)
    return text


#: The domain's refusals a page shows as they are (web.wording.REFUSAL_WORDS marks them).
REFUSALS = frozenset(
    {people.NOT_AN_APPROVER, people.NOT_THIS_REQUESTS_APPROVER, people.NOT_AN_AMENDER}
)

#: domain.cancellation's sentences, for a cancelled run's outcome worded again.
CANCEL_WORDS = (
    N_("The run stopped before finishing."),
    N_("Work the run had already done was kept; cancelling does not undo it."),
    N_("The runtime did not say what it had done."),
    N_(
        "Runbell has no record of this run's individual effects, so anything that was in "
        "flight when it stopped may or may not have landed."
    ),
    N_("Nothing is uncertain."),
    N_("Kept: {kept}"),
    N_("Still uncertain: {uncertain}"),
)


def cancel_outcome(summary: Mapping[str, Any] | None) -> str | None:
    """A cancelled run's stored outcome (``domain.cancellation.outcome``) in the reader's
    language, from its parts: the runtime's own words (``kept``) and the operation ids
    stay as they were reported."""
    if not summary:
        return None

    def sentence(text: str) -> str:
        return text.rstrip(". ") + "."

    parts = [_(cancellation.STOPPED), _(cancellation.KEPT_NOT_UNDONE)]
    counts = summary.get("counts")
    counted = wording.operation_counts(counts) if isinstance(counts, Mapping) and counts else None
    if counts and counted is None:  # a count this face does not know: the stored line
        return str(summary.get("text") or "")
    if counted:
        parts.append(sentence(counted))
    kept, uncertain = summary.get("kept"), summary.get("uncertain")
    if kept:
        parts.append(_("Kept: {kept}").format(kept=sentence(str(kept))))
    elif not counted:
        parts.append(_(cancellation.NOT_SAID))
    if uncertain:
        parts.append(_("Still uncertain: {uncertain}").format(uncertain=sentence(str(uncertain))))
    elif summary.get("tracked"):
        parts.append(_(cancellation.NOTHING_UNCERTAIN))
    else:
        parts.append(_(cancellation.NOT_TRACKED))
    return " ".join(parts)


def conflict_text(detail: str, tz: ZoneInfo | None = None) -> str:
    """The server's explanation of a refused answer, as a full sentence for the page, in
    the reader's language when it is one this module knows (a time in it in ``tz``)."""
    text = worded(detail, tz=tz).strip()
    if not text:
        return _("Your answer was not recorded because the request changed.")
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."
