"""Every channel Runbell sends on: its name, and the module whose ``SPEC`` declares it.

The facts each channel is decided by are in ``runbell.domain.channels.FACTS`` (pure, so
dispatch, policy, consent and destinations can read them without importing a channel);
this registry ties each name there to its implementation. A module is imported only
when its spec is asked for, so a process that builds one channel does not import the
others' libraries, and a channel whose library is missing leaves the others working
(:func:`build_all` skips it with a warning).

Adding a channel: a module ``runbell/channels/<name>.py`` exporting ``SPEC``, its
facts in ``domain/channels.py``, a line in :data:`MODULES` (docs/architecture.md, "Where a
new thing goes"); ``tests/channels/test_channel_contract.py`` then runs it against its
peer.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import structlog

from runbell.channels.base import Channel, ChannelSpec, Setup
from runbell.domain.channels import FACTS

log = structlog.get_logger(__name__)

MODULES: Mapping[str, str] = MappingProxyType(
    {
        "email": "runbell.channels.email",
        "webpush": "runbell.channels.webpush",
        "chat": "runbell.channels.chat",
        "webhook": "runbell.channels.webhook",
    }
)
assert set(MODULES) == set(FACTS), "every channel with facts has a module, and no other"


def spec(name: str) -> ChannelSpec:
    """The declaration of channel ``name`` (imports its module); ``KeyError`` for a name
    that is no channel (the inbox)."""
    found: ChannelSpec = importlib.import_module(MODULES[name]).SPEC
    return found


def build_all(setup: Setup, names: Iterable[str] | None = None) -> dict[str, Channel]:
    """Every channel in ``names`` (default: all) that is configured on this server, built.

    A channel that is not configured (email without SMTP) is left out: its rows are
    skipped with a clear reason. One whose module cannot be imported is left out too,
    with a warning, so it cannot take the others down."""
    built: dict[str, Channel] = {}
    for name in MODULES if names is None else names:
        try:
            declared = spec(name)
        except ImportError as exc:
            log.warning("channel.unavailable", channel=name, error=type(exc).__name__)
            continue
        channel = declared.build(setup)
        if channel is not None:
            built[name] = channel
    return built
