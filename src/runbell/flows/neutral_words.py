"""The neutral texts a person reads about a notification, in their language: the title and
body of a push, an email's subject and a chat message (invariant 11: no run details), the
inbox's summary, a digest's count and the buttons of a push.

What is stored is English (a notification's ``summary`` is written once, for everyone);
these functions word it at the moment it is shown or sent, in :mod:`runbell.i18n`'s
current language, so a German recipient of an English-written row reads German.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbell.domain.records import Notification
from runbell.flows.attention import NEUTRAL_BODY, NEUTRAL_SUMMARY, RETRACTED_BODY, RETRACTED_TITLE
from runbell.i18n import N_, _, ngettext

FALLBACK_SUMMARY = N_("A run changed")
FALLBACK_BODY = N_("Open Runbell for details.")


def digest_summary(inputs: Mapping[str, Any] | None) -> str | None:
    """A digest's count in words, from the facts it was made of (``domain.digests.summary``
    in the current language): how many, never which. None when the facts are missing."""
    counts = (inputs or {}).get("attention_types")
    if not isinstance(counts, dict) or not counts:
        return None
    n = sum(int(c) for c in counts.values())
    if set(counts) == {"completed"}:
        return ngettext("{n} run finished", "{n} runs finished", n).format(n=n)
    return ngettext("{n} update on your runs", "{n} updates on your runs", n).format(n=n)


def summary(note: Notification) -> str:
    """The notification's neutral summary as a person reads it."""
    if note["attention_type"] == "digest":
        counted = digest_summary(note.get("inputs"))
        if counted is not None:
            return counted
    return _(note["summary"]) if note["summary"] else note["summary"]


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
