"""What a cancelled run says about its work: one line, pure (DESIGN §2 invariant 16).

Cancelling stops a run; it does not take back what the run already did. So the line
always says the kept work stays as it is, says what was kept when the runtime told us,
and says what stays uncertain — or, when nothing records the run's individual effects,
that anything in flight may or may not have landed. It never says anything was undone.

Example::

    >>> outcome("4 of 5 files pushed")["text"]  # doctest: +NORMALIZE_WHITESPACE
    "The run stopped before finishing. Work the run had already done was kept; cancelling
    does not undo it. Kept: 4 of 5 files pushed. Runbell has no record of this run's
    individual effects, so anything that was in flight when it stopped may or may not
    have landed."
"""

from __future__ import annotations

from typing import TypedDict

TEXT_MAX = 500  # the notification's reason holds 500 characters

STOPPED = "The run stopped before finishing."
KEPT_NOT_UNDONE = "Work the run had already done was kept; cancelling does not undo it."
NOT_SAID = "The runtime did not say what it had done."
NOT_TRACKED = (
    "Runbell has no record of this run's individual effects, so anything that was in "
    "flight when it stopped may or may not have landed."
)
NOTHING_UNCERTAIN = "Nothing is uncertain."


def _sentence(text: str) -> str:
    return text.rstrip(". ") + "."


class CancelSummary(TypedDict):
    """What a cancelled run kept and what stays uncertain (stored on the run)."""

    kept: str | None
    uncertain: str | None
    counts: dict[str, int] | None
    tracked: bool
    text: str


def outcome(
    kept: str | None,
    *,
    counts_text: str | None = None,
    uncertain: str | None = None,
    tracked: bool = False,
    counts: dict[str, int] | None = None,
) -> CancelSummary:
    """``{kept, uncertain, counts, tracked, text}`` for a run that reached ``cancelled``.

    ``kept``: the runtime's own account of what it did (its ``report.summary``), or None.
    ``tracked``: Runbell records the run's individual effects (its operations), so it can
    say what stays uncertain; then ``counts`` / ``counts_text`` are those effects counted
    ("9 confirmed, 1 uncertain, 3 not started") and ``uncertain`` names the uncertain
    ones (None: nothing is). Untracked, the line says that in-flight work may or may not
    have landed, never that nothing is uncertain.
    """
    parts = [STOPPED, KEPT_NOT_UNDONE]
    if counts_text:
        parts.append(_sentence(counts_text))
    if kept:
        parts.append(f"Kept: {_sentence(kept)}")
    elif not counts_text:
        parts.append(NOT_SAID)  # with counts, they say what was kept
    if uncertain:
        parts.append(f"Still uncertain: {_sentence(uncertain)}")
    elif tracked:
        parts.append(NOTHING_UNCERTAIN)
    else:
        parts.append(NOT_TRACKED)
    text = " ".join(parts)
    if len(text) > TEXT_MAX:
        text = text[: TEXT_MAX - 1] + "…"
    return {
        "kept": kept,
        "uncertain": uncertain,
        "counts": counts,
        "tracked": tracked,
        "text": text,
    }
