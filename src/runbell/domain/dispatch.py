"""The checks made when a delivery is about to go out — not when it was created.

Between creation and dispatch a person may have acknowledged the notification on another
device, lost access, withdrawn consent, entered quiet hours, or the run may have moved on.
:func:`gate` looks at the situation *now* and says: send, cancel, defer or skip. Pure:
the store assembles :class:`DispatchContext`, the worker acts on the :class:`Gate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from runbell.domain.channels import (
    ALL_URGENCIES,
    DEFAULT_CONSENT,
    PERSON_CHANNELS,
    TENANT_CHANNELS,
    consented_urgencies,
)
from runbell.domain.quiet_hours import QuietWindow, quiet_until

# The channel facts this module decides by (``runbell.domain.channels``), for callers
# that read them from here.
__all__ = [
    "ALL_URGENCIES",
    "DEFAULT_CONSENT",
    "PERSON_CHANNELS",
    "DispatchContext",
    "Gate",
    "gate",
]


@dataclass(frozen=True)
class DispatchContext:
    channel: str
    urgency: str
    # person channels
    notification_state: str | None = None  # None: no notification (deleted, or an event)
    expires_at: datetime | None = None
    attention_type: str | None = None
    transition_version: int | None = None
    run_state: str | None = None
    run_version: int | None = None
    is_member: bool = True
    can_see_run: bool = True
    destination_exists: bool = True
    consented_urgencies: Sequence[str] | None = None  # None: channel default
    quiet_windows: Sequence[QuietWindow] = field(default_factory=tuple)
    timezone: str = "UTC"
    quiet_bypass: frozenset[str] = frozenset()  # urgencies a tenant rule lets through
    # tenant webhooks
    endpoint_enabled: bool = True
    endpoint_wants_event: bool = True


@dataclass(frozen=True)
class Gate:
    action: Literal["send", "cancel", "defer", "skip"]
    reason: str
    until: datetime | None = None  # for defer
    close_as: str | None = None  # close the notification too (expired / revoked)
    redact: bool = False  # scrub stored previews: the recipient may no longer see them


def gate(ctx: DispatchContext, now: datetime) -> Gate:
    if ctx.channel in TENANT_CHANNELS:
        if not ctx.endpoint_enabled:
            return Gate("cancel", "endpoint disabled")
        if not ctx.endpoint_wants_event:
            return Gate("cancel", "endpoint no longer subscribes to this event type")
        return Gate("send", "tenant webhook")

    if ctx.notification_state is None:
        return Gate("cancel", "notification is gone")
    if ctx.notification_state != "open":
        return Gate("cancel", f"notification {ctx.notification_state}")
    if not ctx.is_member or not ctx.can_see_run:
        return Gate("cancel", "recipient lost access", close_as="revoked", redact=True)
    if ctx.expires_at is not None and ctx.expires_at <= now:
        return Gate("cancel", "notification expired", close_as="expired")
    if ctx.attention_type == "input_required" and (
        ctx.run_state != "input_required" or ctx.run_version != ctx.transition_version
    ):
        return Gate("cancel", "the run moved on; this request is stale")
    if not ctx.destination_exists:
        return Gate("cancel", "destination removed")
    consented = (
        ctx.consented_urgencies
        if ctx.consented_urgencies is not None
        else consented_urgencies(None, ctx.channel)
    )
    if ctx.urgency not in consented:
        return Gate("skip", f"no consent for {ctx.channel} at {ctx.urgency} urgency")
    if ctx.urgency not in ctx.quiet_bypass:
        end = quiet_until(now, ctx.quiet_windows, ctx.timezone)
        if end is not None:
            return Gate("defer", "quiet hours", until=end)
    return Gate("send", "checks passed")
