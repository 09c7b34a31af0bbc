"""Plain words for what the web app shows: states, urgencies, times, and why an action
can no longer run. Pure functions, no I/O, so every sentence a person reads is in one place.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

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


def local_time(value: datetime | None, tz: ZoneInfo) -> str:
    """An absolute time in the person's timezone, e.g. ``29 Nov 2026, 14:05 CET``."""
    if value is None:
        return ""
    local = value.astimezone(tz)
    return f"{local.day} {local:%b %Y, %H:%M} {local.tzname() or ''}".rstrip()


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
