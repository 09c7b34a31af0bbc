"""Build the channels a worker sends through: every channel in the registry
(``runbell.channels.registry``), from the settings and the configuration
``runbell.flows.channel_config`` keeps (the VAPID key pair)."""

from __future__ import annotations

from collections.abc import Iterable

from runbell.channels.base import Channel, Setup
from runbell.channels.registry import build_all
from runbell.flows.channel_config import vapid_keys
from runbell.flows.context import Core


def setup_of(core: Core) -> Setup:
    """What building a channel may use, for this process."""
    return Setup(core.settings, core.public_url, lambda: vapid_keys(core))


def build_channels(
    core: Core, *, only: Iterable[str] | None = None, **overrides: Channel
) -> dict[str, Channel]:
    """Every configured channel (or those in ``only``). Email only when SMTP is set (its
    rows are skipped with a clear reason otherwise); ``overrides`` replace a channel
    (tests, embedders)."""
    channels = build_all(setup_of(core), only)
    channels.update(overrides)
    return channels
