"""The neutral texts a person reads about a notification, in their language: the title and
body of a push, an email's subject and a chat message (invariant 11: no run details), the
inbox's summary, a digest's count and the buttons of a push.

What is stored is English (a notification's ``summary`` is written once, for everyone);
these functions word it at the moment it is shown or sent, in :mod:`runbell.i18n`'s
current language, so a German recipient of an English-written row reads German.
"""

from __future__ import annotations

from collections.abc import Sequence

from runbell.domain.records import Notification
from runbell.flows.attention import NEUTRAL_BODY, NEUTRAL_SUMMARY, RETRACTED_BODY, RETRACTED_TITLE
from runbell.i18n import N_, _, ngettext

FALLBACK_SUMMARY = N_("A run changed")
FALLBACK_BODY = N_("Open Runbell for details.")


def digest_summary(attention_types: Sequence[str]) -> str | None:
    """A digest's count in words, from the kinds of attention it folds
    (``domain.digests.summary`` in the current language): how many, never which. None
    when there is nothing to count."""
    n = len(attention_types)
    if not n:
        return None
    if all(a == "completed" for a in attention_types):
        return ngettext("{n} run finished", "{n} runs finished", n).format(n=n)
    return ngettext("{n} update on your runs", "{n} updates on your runs", n).format(n=n)


def summary_words(attention_type: str, stored: str, folded: Sequence[str] = ()) -> str:
    """A notification's stored (English) summary as a person reads it; a digest's from
    the kinds of attention it folds (``folded``) when given."""
    if attention_type == "digest":
        counted = digest_summary(folded)
        if counted is not None:
            return counted
    return _(stored) if stored else stored


def _folded(inputs: object) -> list[str]:
    """The kinds of attention a digest notification's ``inputs`` counted."""
    counts = inputs.get("attention_types") if isinstance(inputs, dict) else None
    if not isinstance(counts, dict):
        return []
    return [str(kind) for kind, n in counts.items() for _i in range(int(n))]


def summary(note: Notification) -> str:
    """The notification's neutral summary as a person reads it."""
    return summary_words(note["attention_type"], note["summary"], _folded(note.get("inputs")))


def push_title(note: Notification) -> str:
    """What a lock screen shows as the title: the kind of attention, never the run."""
    if note["attention_type"] == "digest":
        return summary(note)
    return _(NEUTRAL_SUMMARY.get(note["attention_type"], FALLBACK_SUMMARY))


def push_body(note: Notification) -> str:
    """The neutral body under it: where to look."""
    if note["attention_type"] == "digest":
        return _("{summary}. Open Runbell to see them.").format(summary=summary(note))
    return _(NEUTRAL_BODY.get(note["attention_type"], FALLBACK_BODY))


def retracted() -> tuple[str, str]:
    """The (title, body) that replace a handled notification on screen."""
    return _(RETRACTED_TITLE), _(RETRACTED_BODY)


def button_titles(buttons: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A push's (action, title) buttons with their titles in the current language."""
    return tuple((action, button_title(title)) for action, title in buttons)


def button_title(title: str) -> str:
    """``Approve``, ``Snooze 1 h``: the neutral words of ``domain.push_actions``."""
    if title.startswith("Snooze "):
        amount, _sep, unit = title.removeprefix("Snooze ").partition(" ")
        if unit == "h":
            return _("Snooze {n} h").format(n=amount)
        if unit == "min":
            return _("Snooze {n} min").format(n=amount)
    return _(title)


# The button titles domain.push_actions words (the domain is pure and marks nothing):
# marked here so the catalogue has them.
BUTTONS = (N_("Approve"), N_("Reject"), N_("Acknowledge"))
