"""Throttles: at most ``limit`` pushes per recipient per key per window, the rest folded.

A policy rule that pushes may say ``throttle = {limit = 5, window_s = 3600, key = "run",
then = "digest"}``: of the notifications it decides for one recipient and one value of
``key`` (the run, the agent that created the run, the run's kind, the attention type, or
everything the rule sends to that person), only the first ``limit`` of each
epoch-aligned window are pushed. The rest are not pushed: they fold into the recipient's
next digest (``then = "digest"``, the rule's digest settings) or stay in the inbox only
(``then = "inbox"``), and the notification says why.

Pure (no clock, no I/O): this module parses and words; the count is the database's
(``store.throttles``), so two workers can never both let the ``limit + 1``-th through.
This is not :mod:`runbell.domain.throttle`, which slows down failed authentication.

Example::

    t = parse_throttle({"limit": 5, "key": "run"}, "acme.r")
    assert reason(t) == "throttled: 5 in this 1 h window for this run; folded into the digest"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from runbell.domain.errors import ValidationFailed

ThrottleKey = Literal["run", "agent", "kind", "attention_type", "recipient"]
Then = Literal["digest", "inbox"]

KEYS: tuple[str, ...] = ("run", "agent", "kind", "attention_type", "recipient")
THEN: tuple[str, ...] = ("digest", "inbox")
DEFAULT_WINDOW_S = 3600
MAX_WINDOW_S = 7 * 24 * 3600
MAX_LIMIT = 1000
#: What a key counts together, as the trail words it.
_FOR = {
    "run": "for this run",
    "agent": "for this agent",
    "kind": "for runs of this kind",
    "attention_type": "of this type",
    "recipient": "for this person",
}
#: The value a run without an agent or a kind counts under (one shared bucket).
NONE = "-"


@dataclass(frozen=True)
class Throttle:
    limit: int
    window_s: int = DEFAULT_WINDOW_S
    key: ThrottleKey = "run"
    then: Then = "digest"


def _whole(value: Any) -> int | None:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON Schema's integer: 60.0 is 60
    return None if isinstance(value, bool) or not isinstance(value, int) else value


def parse_throttle(raw: Any, rule_id: str) -> Throttle | None:
    """A rule's ``throttle`` table, checked (None when the rule has none)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValidationFailed(
            f"rule {rule_id!r}: throttle must be a table of limit, window_s, key, then",
            field="throttle",
        )
    unknown = set(raw) - {"limit", "window_s", "key", "then"}
    if unknown:
        raise ValidationFailed(
            f"rule {rule_id!r}: throttle has unknown keys {', '.join(sorted(unknown))}",
            field="throttle",
        )
    limit = _whole(raw.get("limit"))
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise ValidationFailed(
            f"rule {rule_id!r}: throttle.limit must be a whole number from 1 to {MAX_LIMIT}",
            field="throttle.limit",
        )
    window = _whole(raw.get("window_s", DEFAULT_WINDOW_S))
    if window is None or not 1 <= window <= MAX_WINDOW_S:
        raise ValidationFailed(
            f"rule {rule_id!r}: throttle.window_s must be between 1 and {MAX_WINDOW_S}",
            field="throttle.window_s",
        )
    key = raw.get("key", "run")
    if key not in KEYS:
        raise ValidationFailed(
            f"rule {rule_id!r}: throttle.key must be one of {', '.join(KEYS)}",
            field="throttle.key",
        )
    then = raw.get("then", "digest")
    if then not in THEN:
        raise ValidationFailed(
            f"rule {rule_id!r}: throttle.then must be one of {', '.join(THEN)}",
            field="throttle.then",
        )
    return Throttle(limit, window, cast(ThrottleKey, key), cast(Then, then))


def key_value(key: str, *, run_id: str, agent: str | None, kind: str | None, attention: str) -> str:
    """The value of ``key`` one notification counts under."""
    if key == "run":
        return run_id
    if key == "agent":
        return agent or NONE
    if key == "kind":
        return kind or NONE
    if key == "attention_type":
        return attention
    return NONE  # "recipient": everything the rule sends to this person


def span(seconds: int) -> str:
    """A window's length in words: ``1 h``, ``15 min``, ``1 day``, ``90 s``."""
    for unit, name in ((86400, "day"), (3600, "h"), (60, "min")):
        if seconds % unit == 0:
            n = seconds // unit
            return f"{n} {name}{'s' if name == 'day' and n != 1 else ''}"
    return f"{seconds} s"


def reason(throttle: Throttle) -> str:
    """Why a notification was not pushed, for its trail."""
    where = "folded into the digest" if throttle.then == "digest" else "kept in the inbox only"
    return (
        f"throttled: {throttle.limit} in this {span(throttle.window_s)} window "
        f"{_FOR[throttle.key]}; {where}"
    )


def over(throttle: Throttle, hits: int) -> bool:
    """The ``hits``-th notification of a window is over the limit."""
    return hits > throttle.limit
