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

URGENCY_LABEL = {
    "low": "Low",
    "normal": "Normal",
    "time_sensitive": "Time-sensitive",
    "urgent": "Urgent",
}
URGENCY_RANK = {"urgent": 3, "time_sensitive": 2, "normal": 1, "low": 0}

STATE_LABEL = {
    "queued": "Queued",
    "working": "Working",
    "input_required": "Waiting for input",
    "stopping": "Stopping",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Cancelled",
}

ATTENTION_LABEL = {
    "input_required": "Needs your input",
    "failed": "Failed",
    "completed": "Finished",
    "needs_review": "Needs review",
    "stalled": "Stalled",
    "cancelled": "Cancelled",
    "mismatch": "State could not be confirmed",
    "digest": "Digest",
    "amendment": "Change proposed",
    "dependency": "A proposal it depends on changed",
}

NOTE_STATE_LABEL = {
    "open": "Open",
    "acknowledged": "Acknowledged",
    "resolved": "Resolved",
    "expired": "Expired",
    "superseded": "Replaced by a newer update",
    "revoked": "Withdrawn",
}

DELIVERY_STATUS_LABEL = {
    "queued": "Waiting to send",
    "sending": "Sending",
    "accepted": "Delivered",
    "retry_scheduled": "Will retry",
    "deferred": "Held for quiet hours",
    "failed": "Failed",
    "dead": "Gave up",
    "delivery_unknown": "Sent, outcome unknown",
    "cancelled": "Not sent (no longer needed)",
    "skipped": "Skipped",
}

CHANNEL_LABEL = {
    "inbox": "Inbox",
    "email": "Email",
    "webpush": "Browser notification",
    "chat": "Chat",
    "webhook": "Webhook",
}

_CHANGED = re.compile(r"run changed since \(version (\d+) -> (\d+)\)")
_NOW = re.compile(r"run is now (\w+)")


def why_not_actionable(reason: str, closed_reason: str | None = None) -> str:
    """One plain sentence for ``views.actionable``'s reason (or a closed notification's
    state), saying why the action this notification pointed at can no longer run."""
    if reason == "access lost":
        return "You no longer have access to this run, so you cannot act on it."
    if reason == "expired":
        return "This request expired before anyone answered it."
    if reason == "acknowledged":
        return "You already acknowledged this notification."
    if reason == "resolved":
        return "This was already answered or resolved, here or on another device."
    if reason == "superseded":
        return (
            "The run moved on after this notification was sent: the request it pointed "
            "at was replaced or no longer applies."
        )
    if reason.startswith("answered by "):
        return f"This request was already answered by {reason.removeprefix('answered by ')}."
    if reason == "superseded by a newer request":
        return "A newer request replaced this one; answer that one instead."
    if reason == "request cancelled":
        return "This request was cancelled: the run stopped waiting for it."
    if reason == "revoked":
        return "This notification was withdrawn because access to the run changed."
    m = _CHANGED.fullmatch(reason)
    if m:
        return (
            f"The run changed after this notification was sent (it was version {m[1]}, "
            f"it is now version {m[2]}), so its request no longer applies."
        )
    m = _NOW.fullmatch(reason)
    if m:
        state = STATE_LABEL.get(m[1], m[1]).lower()
        return f"The run is no longer waiting for input (it is now {state})."
    if reason == "informational":
        return "This notification is for your information; there is nothing to answer."
    return closed_reason or reason


def progress_text(message: Any, counts: Any) -> str:
    """A progress note in words: ``running tests (2 of 5 test files)``. Counts say what
    they count: ``done`` of ``total`` in ``unit`` when given, else each name and value."""
    text = str(message).strip() if message else ""
    counted = ""
    if isinstance(counts, dict) and counts:
        done, total, unit = counts.get("done"), counts.get("total"), counts.get("unit")
        if done is not None and total is not None:
            counted = f"{done} of {total}" + (f" {unit}" if unit else "")
        else:
            counted = ", ".join(f"{k}: {v}" for k, v in counts.items())
    if text and counted:
        return f"{text} ({counted})"
    return text or counted


def why_sign_in(next_path: str) -> str | None:
    """Why the sign-in page is shown, for a person sent there from a link (``next``)."""
    path = next_path.split("?", 1)[0]
    if path.startswith(("/n/", "/runs/")):
        return "Sign in to see the run this link points at. You will land on it right after."
    if path == "/settings":
        return "Sign in to change your notification settings."
    if path == "/":
        return None
    return "Sign in to open the page this link points at."


def conflict_text(detail: str) -> str:
    """The server's explanation of a refused answer, as a full sentence for the page."""
    text = detail.strip()
    if not text:
        return "Your answer was not recorded because the request changed."
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def local_time(value: datetime | None, tz: ZoneInfo, *, seconds: bool = False) -> str:
    """An absolute time in the person's timezone, e.g. ``29 Nov 2026, 14:05 CET``
    (``14:05:09`` with ``seconds``: steps a few seconds apart, like an operation's)."""
    return i18n.format_time(value, None, tz, seconds=seconds)


def relative(value: datetime, now: datetime) -> str:
    """``in 14 minutes`` / ``3 hours ago``: what the countdown script also shows."""
    seconds = int((value - now).total_seconds())
    future = seconds >= 0
    seconds = abs(seconds)
    if seconds < 60:
        amount = "less than a minute"
    elif seconds < 3600:
        n = seconds // 60
        amount = f"{n} minute{'s' if n != 1 else ''}"
    elif seconds < 86400:
        n = seconds // 3600
        amount = f"{n} hour{'s' if n != 1 else ''}"
    else:
        n = seconds // 86400
        amount = f"{n} day{'s' if n != 1 else ''}"
    return f"in {amount}" if future else f"{amount} ago"


# --- the run page's history and ledger in words -------------------------------------------

_ASKED = re.compile(r"input request (\S+)")
_ANSWERED = re.compile(r"answered: (\w+)")
_AMENDED = re.compile(r"amended: (.*?) \(amendment \S+, approved by the owner\)")
DECISION_WORD = {"approve": "approved", "reject": "rejected", "answer": "answered"}


def transition_text(
    kind: str, before: str | None, after: str, reason: str | None, asked: dict[str, str]
) -> tuple[str, str | None]:
    """One timeline entry in words: (what happened, why). Ids the runtime never showed a
    person (``input request ask-b120…``, ``amendment amd_…``) become what they stand
    for: the question that was asked, the fields an approved change set."""
    to = STATE_LABEL.get(after, after)
    why = reason or None
    if why:
        m = _ASKED.fullmatch(why)
        if m:
            summary = asked.get(m[1])
            why = f"asked “{summary}”" if summary else "a question was asked"
        elif m := _ANSWERED.fullmatch(why):
            why = f"the request was {DECISION_WORD.get(m[1], m[1])}"
    if kind == "create":
        return f"created as {to.lower()}", None
    if kind == "update":
        return "details updated", why
    if kind == "review":
        return f"operations reviewed, still {to.lower()}", why
    if kind == "amend":
        m = _AMENDED.fullmatch(reason or "")
        fields = m[1] if m else None
        return "a change approved by the owner was applied", (
            f"changed: {fields}" if fields else why
        )
    if kind == "stall":
        return "stalled: no progress reported", why
    if kind == "recover":
        return "moving again after a stall", why
    if before and before != after:
        return f"{STATE_LABEL.get(before, before)} → {to}", why
    return f"still {to.lower()}", why


def change_sentence(kind: str, before: str | None, after: str, reason: str | None) -> str:
    """What the live notice on the run page says the newest change was, when the run's
    state did not change with it: the review of a finished run is not "now completed"."""
    state = STATE_LABEL.get(after, after).lower()
    if kind == "review":
        counts = f" ({reason})" if reason else ""
        return f"its operations were reviewed{counts}; the run is still {state}"
    if kind == "update":
        return f"its details were updated; the run is still {state}"
    if kind == "amend":
        return f"a change approved by the owner was applied; the run is still {state}"
    if kind == "stall":
        return f"it stalled: no progress reported; the run is still {state}"
    if kind == "recover":
        return f"it is moving again after a stall; the run is still {state}"
    if kind == "request":
        return f"a new question was asked; the run is still {state}"
    if before and before != after:
        return f"the run is now {state}"
    return f"the run is still {state}"


EVIDENCE_LABEL = {
    "approved_by": "Approved by",
    "checked_by": "Checked by",
    "receipt_id": "Receipt",
    "returned": "Result",
    "raised": "Result",
    "lookup": "Lookup",
    "error": "Error",
    "next": "What happens next",
}


def evidence_rows(evidence: Any, people: dict[str, str]) -> list[tuple[str, str]]:
    """An operation's evidence as (label, value) rows a person reads: user ids become
    their emails, the SDK's ``returned: NoneType`` becomes "finished, returned nothing"."""
    if not isinstance(evidence, dict):
        return []
    rows = []
    for key, value in evidence.items():
        label = EVIDENCE_LABEL.get(str(key)) or str(key).replace("_", " ").capitalize()
        if key == "returned" and isinstance(value, str):
            text = (
                "finished, returned nothing"
                if value == "NoneType"
                else f"finished, returned a {value}"
            )
        elif key == "raised" and isinstance(value, str):
            text = f"stopped with an error ({value})"
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
        return (f"Call {name}()" if intent in (name, ident) else intent), (
            None if intent in (name, ident) else f"{name}()"
        )
    on = " ".join(str(p) for p in (kind, ident) if p is not None)
    if version:
        on += f" (version {version})"
    return intent, on or None


#: Which message a webhook delivery of a notification carried (two rows per endpoint).
WEBHOOK_EVENT_LABEL = {
    "notification.created": "new notification",
    "notification.closed": "notification closed",
}


#: What each role of a subject grant lets the member do (domain.people), in words.
GRANT_ROLE_TEXT = {
    "viewer": "Viewer: sees its runs",
    "approver": "Approver: sees its runs and answers their requests",
    "amender": "Amender: sees its runs and proposes changes to them",
}
