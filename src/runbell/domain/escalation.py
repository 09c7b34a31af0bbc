"""Escalation ladders: "not acknowledged within 2 min → chat; within 10 min → email".

A policy rule may carry a ladder (``escalation = [{after_s = 120, channel = "chat"},
{after_s = 600, channel = "email"}]``). Pure: :func:`parse_ladder` validates it, and
:func:`schedule` turns it into due times from the notification's creation. The channels a
ladder names are *held back* when the notification is created (:func:`held_back`): they
are the later rungs, sent only if nobody has acted by then. Everything a send needs
(consent, quiet hours, access) is still checked at send time by the dispatcher.

Example::

    ladder = parse_ladder([{"after_s": 120, "channel": "chat"}], "r")
    assert schedule(ladder, t0) == [(1, ladder[0], t0 + timedelta(seconds=120))]
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runbell.domain.channels import PERSON_CHANNELS
from runbell.domain.errors import ValidationFailed

# The event type of the neutral push that replaces a handled notification's push.
RETRACTED = "notification.retracted"
# A ladder reaches further to the same person: any channel that reaches a person.
ESCALATION_CHANNELS: tuple[str, ...] = PERSON_CHANNELS
MAX_STEPS = 5
MAX_AFTER_S = 7 * 86_400


@dataclass(frozen=True)
class Step:
    after_s: int  # seconds after the notification was created
    channel: str


def parse_ladder(raw: Any, rule_id: str) -> tuple[Step, ...]:
    """A rule's ``escalation`` value, validated: a list of ``{after_s, channel}`` tables,
    ``after_s`` strictly increasing (1 s to 7 days), each channel at most once."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_STEPS:
        raise ValidationFailed(
            f"rule {rule_id!r}: escalation must be a list of at most {MAX_STEPS} steps",
            field="escalation",
        )
    steps: list[Step] = []
    for i, item in enumerate(raw):
        where = f"rule {rule_id!r}: escalation step {i + 1}"
        if not isinstance(item, dict) or set(item) != {"after_s", "channel"}:
            raise ValidationFailed(
                f"{where} must be a table with exactly after_s and channel", field="escalation"
            )
        after, channel = item["after_s"], item["channel"]
        if isinstance(after, float) and after.is_integer():
            after = int(after)  # JSON Schema's integer: 60.0 is 60
        if isinstance(after, bool) or not isinstance(after, int) or not 1 <= after <= MAX_AFTER_S:
            raise ValidationFailed(
                f"{where}: after_s must be whole seconds from 1 to {MAX_AFTER_S}",
                field="escalation",
            )
        if channel not in ESCALATION_CHANNELS:
            raise ValidationFailed(
                f"{where}: channel must be one of {', '.join(ESCALATION_CHANNELS)}",
                field="escalation",
            )
        if steps and after <= steps[-1].after_s:
            raise ValidationFailed(f"{where}: after_s must increase", field="escalation")
        if any(s.channel == channel for s in steps):
            raise ValidationFailed(
                f"{where}: channel {channel!r} is named twice", field="escalation"
            )
        steps.append(Step(after, channel))
    return tuple(steps)


def schedule(ladder: Sequence[Step], created_at: datetime) -> list[tuple[int, Step, datetime]]:
    """(step number from 1, step, due time) for each rung."""
    return [
        (i + 1, step, created_at + timedelta(seconds=step.after_s)) for i, step in enumerate(ladder)
    ]


def held_back(ladder: Sequence[Step]) -> frozenset[str]:
    """Channels not sent at creation because a later rung sends them."""
    return frozenset(step.channel for step in ladder)


# --- fallback on failure (issue 18 item 10) -----------------------------------------------


@dataclass(frozen=True)
class Fallback:
    """A rule's ``fallback``: when a channel fails for good (a permanent error, or retries
    exhausted), or, with ``unknown_after_s``, its receipt stays unknown that long after the
    delivery was queued, the next rung of the ladder the recipient consents to is fired at
    once instead of at its time."""

    unknown_after_s: int | None = None


def parse_fallback(raw: Any, rule_id: str, ladder: Sequence[Step]) -> Fallback | None:
    """A rule's ``fallback`` value: ``true``/``false``, or a table with only
    ``unknown_after_s`` (1 s to 7 days). It needs a ladder: the ladder names the channels
    to fall back to (channels not on it are sent at once anyway)."""
    if raw is None or raw is False:
        return None
    if raw is True:
        found = Fallback()
    elif isinstance(raw, dict) and set(raw) <= {"unknown_after_s"}:
        after = raw.get("unknown_after_s")
        if isinstance(after, float) and after.is_integer():
            after = int(after)
        if after is not None and (
            isinstance(after, bool) or not isinstance(after, int) or not 1 <= after <= MAX_AFTER_S
        ):
            raise ValidationFailed(
                f"rule {rule_id!r}: fallback.unknown_after_s must be whole seconds from 1 "
                f"to {MAX_AFTER_S}",
                field="fallback",
            )
        found = Fallback(unknown_after_s=after)
    else:
        raise ValidationFailed(
            f"rule {rule_id!r}: fallback must be true, false or a table with unknown_after_s",
            field="fallback",
        )
    if not ladder:
        raise ValidationFailed(
            f"rule {rule_id!r}: fallback needs an escalation ladder (the channels to fall "
            "back to, in order)",
            field="fallback",
        )
    return found


@dataclass(frozen=True)
class FallbackChoice:
    """Which pending rung a failed delivery falls back to, and what the trail says."""

    step_no: int
    channel: str
    reason: str


#: How a failure is named in the trail, by trigger.
FAILURE_WORDS = {
    "failed": "failed permanently",
    "dead": "gave up after its retries",
    "unknown": "stayed unknown",
}
#: Channels as the trail names them.
CHANNEL_WORDS = {"webpush": "web push", "email": "email", "chat": "chat"}


def choose_fallback(
    failed_channel: str,
    trigger: str,
    pending: Sequence[tuple[int, str]],
    usable: Collection[str],
) -> FallbackChoice | None:
    """The first pending rung (``(step_no, channel)`` in ladder order) on another channel
    that the recipient can be reached on (``usable``: consented at the notification's
    urgency, with a destination, sent by this server); None when there is none."""
    for step_no, channel in sorted(pending):
        if channel == failed_channel or channel not in usable:
            continue
        failed = CHANNEL_WORDS.get(failed_channel, failed_channel)
        reason = (
            f"{failed} {FAILURE_WORDS.get(trigger, trigger)}; "
            f"fell back to {CHANNEL_WORDS.get(channel, channel)}"
        )
        return FallbackChoice(step_no, channel, reason)
    return None
