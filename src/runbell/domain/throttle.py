"""Failed authentication, counted in fixed windows: what a failure's count means.

Every failed attempt (a bearer token, a sign-in link, a provider webhook signature that
does not check out) counts once against each of its keys: the client address (an IPv6
address by its /64, the block one host is given) and the credential it tried (a short,
non-secret prefix of the token; a webhook's source id). A key's window opens at its
first failure and lasts ``window_s``; the first ``burst`` failures in it are answered as
before (401, 404), later ones 429 with ``Retry-After`` (the seconds left in the window).

Only failures are counted: a correct credential is checked first and passes whatever
its address or prefix has failed, so a person behind the same address as a scanner is
never locked out. Guessing stays throttled all the same: beyond the burst a guess learns
nothing but "slow down", the attempts cost the server one read each and no write, and a
guessed token is out of reach anyway (256 random bits).

Example::

    v = verdict(21, window_start=t0, now=t0 + timedelta(seconds=15), burst=20, window_s=60)
    assert v.throttled and v.first_over and v.retry_after_s == 45
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

#: The prefixes of Runbell's own secrets (``runbell.ids.new_token``): a key, a user token,
#: a sign-in link. A prefix key keeps 4 characters after them (24 of 256 random bits).
KNOWN_PREFIXES = ("rbk_", "rbu_", "rbl_")
PREFIX_CHARS = 4


@dataclass(frozen=True)
class Verdict:
    throttled: bool
    retry_after_s: int
    first_over: bool  # the first failure over the burst in this window: log it, once


def verdict(
    failures: int, *, window_start: datetime, now: datetime, burst: int, window_s: float
) -> Verdict:
    """What the ``failures``-th failure of a window opened at ``window_start`` gets."""
    left = (window_start + timedelta(seconds=window_s) - now).total_seconds()
    retry = max(1, math.ceil(left))
    return Verdict(failures > burst, retry, failures == burst + 1)


def address_key(address: str | None) -> str:
    """The address a failure counts against: IPv4 as it is, IPv6 by its /64."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


def credential_prefix(token: str) -> str:
    """The short, non-secret part of a credential that its failures count against and a
    log line may show: ``rbk_`` and 4 characters for Runbell's own; ``other`` for anything
    else (it cannot be any credential of ours, and its text is someone else's secret)."""
    for known in KNOWN_PREFIXES:
        if token.startswith(known):
            return token[: len(known) + PREFIX_CHARS]
    return "other"
