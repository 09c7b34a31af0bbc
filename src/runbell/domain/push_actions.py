"""Acting from a web push notification: which actions a push offers, and the single-use
token they carry. Pure: no clock, no database; keys and times are passed in.

A push always offers **Acknowledge** and **Snooze**; **Approve** / **Reject** only for an
approval whose matched policy rule says ``lock_screen_answers = true`` and that nothing
flagged as risky (:func:`lock_screen_answerable`). The titles are neutral words
(invariant 11): a lock screen shows them, so they never name the run, the request or
its command.

The token (:func:`sign` / :func:`verify`) is the action's only credential: the service
worker posts it back with the action it chose, no session needed. It is made at payload
build time, *deterministically* from the delivery and what it binds (notification,
request, run version, request version, recipient, destination, expiry) under a key
derived from the server's secret key: a retried send of the same delivery carries the
same token, so a push that arrives twice still acts once. Nothing is stored when a token
is made; using one stores its hash (``push_action_uses``), and a second use is refused.

Example::

    claims = Claims(tenant_id="ten_1", delivery_id="dlv_1", notification_id="ntf_1",
                    recipient="usr_1", destination="psub_1", expires_at=1_900_000_000,
                    request_id="req_1", run_version=3, request_version=1, answers=True)
    token = sign(claims, key)
    assert verify(token, key) == claims
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

ACKNOWLEDGE = "acknowledge"
SNOOZE = "snooze"
APPROVE = "approve"
REJECT = "reject"
ACTIONS: tuple[str, ...] = (ACKNOWLEDGE, SNOOZE, APPROVE, REJECT)
ANSWERS = frozenset({APPROVE, REJECT})

#: The event type of a delivery that pushes a notification again (a snooze's re-push, or
#: the replacement after a refused action); its ``payload`` names the notification.
REPUSHED = "notification.repushed"

#: How long a snoozed notification stays hidden unless its rule says otherwise.
DEFAULT_SNOOZE_S = 3600
#: A token lives this long at most, and never past the notification's own expiry.
TOKEN_TTL_S = 24 * 3600

PREFIX = "rbpa"
#: What the token key is derived for (``SecretBox.derive``).
KEY_PURPOSE = "push-actions/v1"


def lock_screen_answerable(rule_allows: bool, risks: Sequence[str]) -> bool:
    """Whether a request may be answered from the notification itself: only when its rule
    opts in (``lock_screen_answers``) and nothing about it was flagged as risky.

    >>> lock_screen_answerable(True, [])
    True
    >>> lock_screen_answerable(True, ["recursive_delete"])
    False
    >>> lock_screen_answerable(False, [])
    False
    """
    return bool(rule_allows) and not risks


def snooze_title(snooze_s: int) -> str:
    """The Snooze button's neutral text.

    >>> snooze_title(3600), snooze_title(1800), snooze_title(7200), snooze_title(90)
    ('Snooze 1 h', 'Snooze 30 min', 'Snooze 2 h', 'Snooze 2 min')
    """
    if snooze_s >= 3600 and snooze_s % 3600 == 0:
        return f"Snooze {snooze_s // 3600} h"
    return f"Snooze {max(1, round(snooze_s / 60))} min"


def offered(answerable: bool, snooze_s: int) -> list[dict[str, str]]:
    """The Notifications API ``actions`` of one push, in the order a device shows them
    (most show the first two or three): the decision first when it may be made here."""
    actions = []
    if answerable:
        actions += [{"action": APPROVE, "title": "Approve"}, {"action": REJECT, "title": "Reject"}]
    actions += [
        {"action": ACKNOWLEDGE, "title": "Acknowledge"},
        {"action": SNOOZE, "title": snooze_title(snooze_s)},
    ]
    return actions


@dataclass(frozen=True)
class Claims:
    """What one token is bound to. ``answers``: Approve/Reject were offered with it."""

    tenant_id: str
    delivery_id: str
    notification_id: str
    recipient: str
    destination: str
    expires_at: int  # unix seconds
    request_id: str | None = None
    run_version: int | None = None
    request_version: int | None = None
    answers: bool = False
    snooze_s: int = DEFAULT_SNOOZE_S


def sign(claims: Claims, key: bytes) -> str:
    """``rbpa.<claims>.<mac>``: the same claims under the same key give the same token."""
    body = _b64(json.dumps(asdict(claims), sort_keys=True, separators=(",", ":")).encode())
    return f"{PREFIX}.{body}.{_b64(_mac(key, body))}"


def verify(token: str, key: bytes) -> Claims | None:
    """The claims of a token this server made, or None (malformed, or another key's)."""
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    _, body, mac = parts
    try:
        given = _unb64(mac)
        if not hmac.compare_digest(given, _mac(key, body)):
            return None
        raw: Any = json.loads(_unb64(body))
        return Claims(**raw)
    except (binascii.Error, ValueError, TypeError):
        return None


def expired(claims: Claims, now_s: float) -> bool:
    return claims.expires_at <= now_s


def _mac(key: bytes, body: str) -> bytes:
    return hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
