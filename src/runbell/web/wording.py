"""Plain words for what the web app shows: states, urgencies, times, and why an action
can no longer run. Pure functions, no I/O, so every sentence a person reads is in one place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from runbell import i18n
from runbell.i18n import N_, _, ngettext

URGENCY_LABEL = {
    "low": N_("Low"),
    "normal": N_("Normal"),
    "time_sensitive": N_("Time-sensitive"),
    "urgent": N_("Urgent"),
}
URGENCY_RANK = {"urgent": 3, "time_sensitive": 2, "normal": 1, "low": 0}

STATE_LABEL = {
    "queued": N_("Queued"),
    "working": N_("Working"),
    "input_required": N_("Waiting for input"),
    "stopping": N_("Stopping"),
    "completed": N_("Completed"),
    "failed": N_("Failed"),
    "cancelled": N_("Cancelled"),
}

ATTENTION_LABEL = {
    "input_required": N_("Needs your input"),
    "failed": N_("Failed"),
    "completed": N_("Finished"),
    "needs_review": N_("Needs review"),
    "stalled": N_("Stalled"),
    "cancelled": N_("Cancelled"),
    "mismatch": N_("State could not be confirmed"),
    "digest": N_("Digest"),
    "amendment": N_("Change proposed"),
    "dependency": N_("A proposal it depends on changed"),
}

NOTE_STATE_LABEL = {
    "open": N_("Open"),
    "acknowledged": N_("Acknowledged"),
    "resolved": N_("Resolved"),
    "expired": N_("Expired"),
    "superseded": N_("Replaced by a newer update"),
    "revoked": N_("Withdrawn"),
}

DELIVERY_STATUS_LABEL = {
    "queued": N_("Waiting to send"),
    "sending": N_("Sending"),
    "accepted": N_("Delivered"),
    "retry_scheduled": N_("Will retry"),
    "deferred": N_("Held for quiet hours"),
    "failed": N_("Failed"),
    "dead": N_("Gave up"),
    "delivery_unknown": N_("Sent, outcome unknown"),
    "cancelled": N_("Not sent (no longer needed)"),
    "skipped": N_("Skipped"),
}

#: A policy's decisions (domain.policy.DecisionKind), as the policy preview names them.
POLICY_DECISION_LABEL = {
    "push": N_("Push"),
    "digest": N_("Digest"),
    "inbox": N_("Inbox only"),
    "live": N_("Live view only"),
    "suppress": N_("Suppressed"),
}

CHANNEL_LABEL = {
    "inbox": N_("Inbox"),
    "email": N_("Email"),
    "webpush": N_("Browser notification"),
    "chat": N_("Chat"),
    "webhook": N_("Webhook"),
}

#: The run badges' words beyond the states (domain.badges, which marks nothing: the domain
#: is pure), for the catalogue; the templates show ``_(badge.label)``.
BADGE_WORDS = (N_("Completed with conflicts"), N_("Outcome unknown"), N_("Needs review"))

#: Why a person may not answer or propose (domain.people), shown on the run page as
#: ``_(refusal)``; tests/unit/test_catalogues.py checks they stay the domain's words.
REFUSAL_WORDS = (
    N_(
        "You may see this run but not answer its requests: ask its owner to name you an "
        "approver (authority.approvers) or an admin to grant you its subject as approver"
    ),
    N_("You may see this run but not answer this request: it names who may answer it"),
    N_(
        "You may see this run but not propose amendments to it: ask its owner to name you an "
        "amender (authority.amenders) or an admin to grant you its subject as amender"
    ),
)

_CHANGED = re.compile(r"run changed since \(version (\d+) -> (\d+)\)")
_NOW = re.compile(r"run is now (\w+)")


def state_label(state: str) -> str:
    """A run state in words, in the current language."""
    label = STATE_LABEL.get(state)
    return _(label) if label else state


def why_not_actionable(reason: str, closed_reason: str | None = None) -> str:
    """One plain sentence for ``views.actionable``'s reason (or a closed notification's
    state), saying why the action this notification pointed at can no longer run."""
    if reason == "access lost":
        return _("You no longer have access to this run, so you cannot act on it.")
    if reason == "expired":
        return _("This request expired before anyone answered it.")
    if reason == "acknowledged":
        return _("You already acknowledged this notification.")
    if reason == "resolved":
        return _("This was already answered or resolved, here or on another device.")
    if reason == "superseded":
        return _(
            "The run moved on after this notification was sent: the request it pointed "
            "at was replaced or no longer applies."
        )
    if reason.startswith("answered by "):
        return _("This request was already answered by {who}.").format(
            who=reason.removeprefix("answered by ")
        )
    if reason == "superseded by a newer request":
        return _("A newer request replaced this one; answer that one instead.")
    if reason == "request cancelled":
        return _("This request was cancelled: the run stopped waiting for it.")
    if reason == "revoked":
        return _("This notification was withdrawn because access to the run changed.")
    m = _CHANGED.fullmatch(reason)
    if m:
        return _(
            "The run changed after this notification was sent (it was version {before}, "
            "it is now version {after}), so its request no longer applies."
        ).format(before=m[1], after=m[2])
    m = _NOW.fullmatch(reason)
    if m:
        state = state_label(m[1]).lower()
        return _("The run is no longer waiting for input (it is now {state}).").format(state=state)
    if reason == "informational":
        return _("This notification is for your information; there is nothing to answer.")
    return closed_reason or reason


def progress_text(message: Any, counts: Any) -> str:
    """A progress note in words: ``running tests (2 of 5 test files)``. Counts say what
    they count: ``done`` of ``total`` in ``unit`` when given, else each name and value."""
    text = str(message).strip() if message else ""
    counted = ""
    if isinstance(counts, dict) and counts:
        done, total, unit = counts.get("done"), counts.get("total"), counts.get("unit")
        if done is not None and total is not None:
            counted = _("{done} of {total}").format(done=done, total=total) + (
                f" {unit}" if unit else ""
            )
        else:
            counted = ", ".join(f"{k}: {v}" for k, v in counts.items())
    if text and counted:
        return f"{text} ({counted})"
    return text or counted


def why_sign_in(next_path: str) -> str | None:
    """Why the sign-in page is shown, for a person sent there from a link (``next``)."""
    path = next_path.split("?", 1)[0]
    if path.startswith(("/n/", "/runs/")):
        return _("Sign in to see the run this link points at. You will land on it right after.")
    if path == "/settings":
        return _("Sign in to change your notification settings.")
    if path == "/":
        return None
    return _("Sign in to open the page this link points at.")


def local_time(value: datetime | None, tz: ZoneInfo, *, seconds: bool = False) -> str:
    """An absolute time in the person's timezone, e.g. ``29 Nov 2026, 14:05 CET``
    (``14:05:09`` with ``seconds``: steps a few seconds apart, like an operation's), in
    the current language's way of writing it."""
    return i18n.format_time(value, None, tz, seconds=seconds)


def relative(value: datetime, now: datetime) -> str:
    """``in 14 minutes`` / ``3 hours ago``: what the countdown script also shows."""
    seconds = int((value - now).total_seconds())
    future = seconds >= 0
    seconds = abs(seconds)
    if seconds < 60:
        return _("in less than a minute") if future else _("less than a minute ago")
    if seconds < 3600:
        n = seconds // 60
        if future:
            return ngettext("in {n} minute", "in {n} minutes", n).format(n=n)
        return ngettext("{n} minute ago", "{n} minutes ago", n).format(n=n)
    if seconds < 86400:
        n = seconds // 3600
        if future:
            return ngettext("in {n} hour", "in {n} hours", n).format(n=n)
        return ngettext("{n} hour ago", "{n} hours ago", n).format(n=n)
    n = seconds // 86400
    if future:
        return ngettext("in {n} day", "in {n} days", n).format(n=n)
    return ngettext("{n} day ago", "{n} days ago", n).format(n=n)


# --- the run page's history and ledger in words -------------------------------------------

_ASKED = re.compile(r"input request (\S+)")
_ANSWERED = re.compile(r"answered: (\w+)")
_AMENDED = re.compile(r"amended: (.*?) \(amendment \S+, approved by the owner\)")
DECISION_WORD = {"approve": N_("approved"), "reject": N_("rejected"), "answer": N_("answered")}


def transition_text(
    kind: str, before: str | None, after: str, reason: str | None, asked: dict[str, str]
) -> tuple[str, str | None]:
    """One timeline entry in words: (what happened, why). Ids the runtime never showed a
    person (``input request ask-b120…``, ``amendment amd_…``) become what they stand
    for: the question that was asked, the fields an approved change set."""
    to = state_label(after)
    why = reason or None
    if why:
        m = _ASKED.fullmatch(why)
        if m:
            summary = asked.get(m[1])
            why = (
                _("asked “{summary}”").format(summary=summary)
                if summary
                else _("a question was asked")
            )
        elif m := _ANSWERED.fullmatch(why):
            word = DECISION_WORD.get(m[1])
            why = _("the request was {decision}").format(decision=_(word) if word else m[1])
    if kind == "create":
        return _("created as {state}").format(state=to.lower()), None
    if kind == "update":
        return _("details updated"), why
    if kind == "review":
        return _("operations reviewed, still {state}").format(state=to.lower()), why
    if kind == "amend":
        m = _AMENDED.fullmatch(reason or "")
        fields = m[1] if m else None
        return _("a change approved by the owner was applied"), (
            _("changed: {fields}").format(fields=fields) if fields else why
        )
    if kind == "stall":
        return _("stalled: no progress reported"), why
    if kind == "recover":
        return _("moving again after a stall"), why
    if before and before != after:
        return f"{state_label(before)} → {to}", why
    return _("still {state}").format(state=to.lower()), why


def change_sentence(kind: str, before: str | None, after: str, reason: str | None) -> str:
    """What the live notice on the run page says the newest change was, when the run's
    state did not change with it: the review of a finished run is not "now completed"."""
    state = state_label(after).lower()
    if kind == "review":
        if reason:
            return _("its operations were reviewed ({counts}); the run is still {state}").format(
                counts=reason, state=state
            )
        return _("its operations were reviewed; the run is still {state}").format(state=state)
    if kind == "update":
        return _("its details were updated; the run is still {state}").format(state=state)
    if kind == "amend":
        return _("a change approved by the owner was applied; the run is still {state}").format(
            state=state
        )
    if kind == "stall":
        return _("it stalled: no progress reported; the run is still {state}").format(state=state)
    if kind == "recover":
        return _("it is moving again after a stall; the run is still {state}").format(state=state)
    if kind == "request":
        return _("a new question was asked; the run is still {state}").format(state=state)
    if before and before != after:
        return _("the run is now {state}").format(state=state)
    return _("the run is still {state}").format(state=state)


EVIDENCE_LABEL = {
    "approved_by": N_("Approved by"),
    "checked_by": N_("Checked by"),
    "receipt_id": N_("Receipt"),
    "returned": N_("Result"),
    "raised": N_("Result"),
    "lookup": N_("Lookup"),
    "error": N_("Error"),
    "next": N_("What happens next"),
}


def evidence_rows(evidence: Any, people: dict[str, str]) -> list[tuple[str, str]]:
    """An operation's evidence as (label, value) rows a person reads: user ids become
    their emails, the SDK's ``returned: NoneType`` becomes "finished, returned nothing"."""
    if not isinstance(evidence, dict):
        return []
    rows = []
    for key, value in evidence.items():
        known = EVIDENCE_LABEL.get(str(key))
        label = _(known) if known else str(key).replace("_", " ").capitalize()
        if key == "returned" and isinstance(value, str):
            text = (
                _("finished, returned nothing")
                if value == "NoneType"
                else _("finished, returned a {type}").format(type=value)
            )
        elif key == "raised" and isinstance(value, str):
            text = _("stopped with an error ({type})").format(type=value)
        elif isinstance(value, str):
            text = _USER.sub(lambda m: people.get(m.group(0), m.group(0)), value)
        else:
            text = json.dumps(value, ensure_ascii=False, default=str)
        rows.append((label, text))
    return rows


_USER = re.compile(r"\busr_[0-9a-z]{10,40}\b")


def operation_line(intent: str, target: Mapping[str, Any]) -> tuple[str, str | None]:
    """(what the operation does, on what): ``mark paid`` · ``invoice INV-1004``; a
    function the SDK's ``requires_approval`` ran (target ``function __main__.push``) is
    ``Call push()``, without the module path."""
    kind, ident, version = target.get("type"), target.get("id"), target.get("version")
    if kind == "function" and isinstance(ident, str):
        name = ident.rsplit(".", 1)[-1]
        return (_("Call {name}()").format(name=name) if intent in (name, ident) else intent), (
            None if intent in (name, ident) else f"{name}()"
        )
    on = " ".join(str(p) for p in (kind, ident) if p is not None)
    if version:
        on += " " + _("(version {version})").format(version=version)
    return intent, on or None


#: An operation count in words, per state, in domain.operations.COUNT_ORDER's order (the
#: English is exactly domain.operations.counts_text's; tests/unit/test_neutral_words.py).
_COUNTED = {
    "confirmed": lambda n: ngettext("{n} confirmed", "{n} confirmed", n),
    "absent": lambda n: ngettext("{n} confirmed absent", "{n} confirmed absent", n),
    "conflict": lambda n: ngettext("{n} conflict", "{n} conflicts", n),
    "failed": lambda n: ngettext("{n} failed", "{n} failed", n),
    "uncertain": lambda n: ngettext("{n} uncertain", "{n} uncertain", n),
    "unresolved": lambda n: ngettext(
        "{n} unresolved after lookup", "{n} unresolved after lookup", n
    ),
    "sent": lambda n: ngettext("{n} sent without a reply yet", "{n} sent without a reply yet", n),
    "planned": lambda n: ngettext("{n} planned", "{n} planned", n),
    "not_started": lambda n: ngettext("{n} not started", "{n} not started", n),
}


def operation_counts(counts: Mapping[str, Any]) -> str | None:
    """An operations ledger's counts in the current language (``9 confirmed, 2
    conflicts``); None when a count is not one this knows (then the stored text shows)."""
    if not isinstance(counts, Mapping) or set(counts) - set(_COUNTED):
        return None
    parts = [
        str(_COUNTED[state](int(counts[state]))).format(n=int(counts[state]))
        for state in _COUNTED
        if counts.get(state)
    ]
    return ", ".join(parts) if parts else _("no operations")


#: Which message a webhook delivery of a notification carried (two rows per endpoint).
WEBHOOK_EVENT_LABEL = {
    "notification.created": N_("new notification"),
    "notification.closed": N_("notification closed"),
}


#: What each role of a subject grant lets the member do (domain.people), in words.
GRANT_ROLE_TEXT = {
    "viewer": N_("Viewer: sees its runs"),
    "approver": N_("Approver: sees its runs and answers their requests"),
    "amender": N_("Amender: sees its runs and proposes changes to them"),
}
