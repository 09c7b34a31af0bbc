"""Operations: the intended effects of a run, their state machine and honest counts — pure.

An operation is one update a run means to make in an outside system, under a stable
``operation_id`` that survives worker replacement (DESIGN §3, invariant 15)::

    planned ──► sent ──► confirmed | conflict | failed | uncertain
       │                                               │
       └──► not_started                  (a lookup)    ▼
                                  confirmed | absent | unresolved
                                                       │ (a later lookup)
                                                       ▼
                                              confirmed | absent

``uncertain`` means the reply was lost: the effect may or may not have landed. It is never
assumed done and never retried under a new id; new work on the same target and intent is
refused until a lookup settles it. ``unresolved`` is a lookup that could not tell either,
so it blocks new work the same way (a later lookup may still settle it); so does ``sent``,
a request still in flight that may yet land (:data:`BLOCKS_NEW_WORK`).

:func:`counts_text` is the one place counts become words: "9 confirmed, 2 conflicts,
1 uncertain" — never "9 of 15". :func:`outcome` says what a completion of the run means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class OpState(StrEnum):
    PLANNED = "planned"
    SENT = "sent"
    CONFIRMED = "confirmed"
    CONFLICT = "conflict"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    ABSENT = "absent"
    UNRESOLVED = "unresolved"
    NOT_STARTED = "not_started"


OP_STATES: tuple[str, ...] = tuple(s.value for s in OpState)

_ALLOWED: dict[OpState, frozenset[OpState]] = {
    OpState.PLANNED: frozenset({OpState.SENT, OpState.NOT_STARTED}),
    OpState.SENT: frozenset(
        {OpState.CONFIRMED, OpState.CONFLICT, OpState.FAILED, OpState.UNCERTAIN}
    ),
    OpState.UNCERTAIN: frozenset({OpState.CONFIRMED, OpState.ABSENT, OpState.UNRESOLVED}),
    OpState.UNRESOLVED: frozenset({OpState.CONFIRMED, OpState.ABSENT}),
    OpState.CONFIRMED: frozenset(),
    OpState.CONFLICT: frozenset(),
    OpState.FAILED: frozenset(),
    OpState.ABSENT: frozenset(),
    OpState.NOT_STARTED: frozenset(),
}

#: The effect may have landed, and nobody knows: new work on the same target waits.
MAY_HAVE_LANDED: frozenset[str] = frozenset({OpState.UNCERTAIN, OpState.UNRESOLVED})
#: New work on the same target and intent is refused while an earlier operation there is
#: in one of these (issue 18: in flight means blocked): a ``sent`` request may still land,
#: like one whose reply was lost. Only settling it with evidence, or the completion owner's
#: explicit supersede, lets new work through.
BLOCKS_NEW_WORK: frozenset[str] = frozenset({OpState.SENT, OpState.UNCERTAIN, OpState.UNRESOLVED})
#: Still on its way: the destination has not answered (the run's outcome is unknown).
IN_FLIGHT: frozenset[str] = frozenset({OpState.PLANNED, OpState.SENT})
#: What a verified completion needs every operation to be.
VERIFIED: frozenset[str] = frozenset({OpState.CONFIRMED, OpState.ABSENT})
#: Settled for good: no move leaves these.
FINAL: frozenset[str] = frozenset(s for s, nxt in _ALLOWED.items() if not nxt)


def allowed_next(state: OpState | str) -> tuple[str, ...]:
    """The states an operation in ``state`` may move to, in a stable order."""
    nxt = _ALLOWED[OpState(state)]
    return tuple(s.value for s in OpState if s in nxt)


def can_move(current: OpState | str, target: OpState | str) -> bool:
    return OpState(target) in _ALLOWED[OpState(current)]


def move_refusal(current: OpState | str, target: OpState | str) -> str | None:
    """Why ``current → target`` is not allowed, in one sentence; None when it is."""
    if can_move(current, target):
        return None
    nxt = allowed_next(current)
    if not nxt:
        return f"operation is {OpState(current).value}, which is final; it accepts no move"
    return (
        f"{OpState(current).value} -> {OpState(target).value} is not allowed; "
        f"from {OpState(current).value} an operation moves to {' or '.join(nxt)}"
    )


# --- honest counts -----------------------------------------------------------------------

#: (state, singular, plural) in the one fixed order every text uses: what is kept first,
#: then what went wrong, then what nobody knows yet, then what never started.
_WORDS: tuple[tuple[str, str, str], ...] = (
    (OpState.CONFIRMED, "confirmed", "confirmed"),
    (OpState.ABSENT, "confirmed absent", "confirmed absent"),
    (OpState.CONFLICT, "conflict", "conflicts"),
    (OpState.FAILED, "failed", "failed"),
    (OpState.UNCERTAIN, "uncertain", "uncertain"),
    (OpState.UNRESOLVED, "unresolved after lookup", "unresolved after lookup"),
    (OpState.SENT, "sent without a reply yet", "sent without a reply yet"),
    (OpState.PLANNED, "planned", "planned"),
    (OpState.NOT_STARTED, "not started", "not started"),
)
COUNT_ORDER: tuple[str, ...] = tuple(str(s) for s, _, _ in _WORDS)
NO_OPERATIONS = "no operations"


def counts_text(counts: Mapping[str, int]) -> str:
    """Counts in words, each category saying what it counts, in a fixed order, zero
    categories left out: ``{"confirmed": 9, "conflict": 2, "uncertain": 1}`` →
    ``"9 confirmed, 2 conflicts, 1 uncertain"``. Never a fraction ("9 of 15"): a total
    would hide what the rest are. Unknown keys are refused (a typo must not vanish)."""
    unknown = set(counts) - set(COUNT_ORDER)
    if unknown:
        raise ValueError(f"unknown operation states: {', '.join(sorted(unknown))}")
    parts = []
    for state, one, many in _WORDS:
        n = int(counts.get(state, 0))
        if n < 0:
            raise ValueError(f"negative count for {state}")
        if n:
            parts.append(f"{n} {one if n == 1 else many}")
    return ", ".join(parts) if parts else NO_OPERATIONS


def normalized(counts: Mapping[str, int]) -> dict[str, int]:
    """The non-zero counts in :data:`COUNT_ORDER` (what the API shows as ``counts``)."""
    return {s: int(counts[s]) for s in COUNT_ORDER if counts.get(s)}


# --- what a completion means -------------------------------------------------------------


class Outcome(StrEnum):
    VERIFIED = "verified"  # every operation confirmed (or confirmed absent)
    NEEDS_REVIEW = "needs_review"  # conflicts, failures or effects nobody can confirm
    UNKNOWN = "unknown"  # operations still planned or sent: the outcome cannot be known


@dataclass(frozen=True)
class Completion:
    """What a ``completed`` report means for a run with these operation counts."""

    outcome: Outcome
    text: str  # the counts text, then why it is not verified (when it is not)

    @property
    def verified(self) -> bool:
        return self.outcome is Outcome.VERIFIED


def outcome(
    counts: Mapping[str, int],
    ids: Mapping[str, list[str]] | None = None,
    unmet: Mapping[str, str | None] | None = None,
    excluded: list[str] | None = None,
) -> Completion:
    """The completion of a run whose operations stand at ``counts``.

    ``ids``: operation ids by state, to name the ones that need a look (conflicts,
    failures, uncertain, unresolved, in flight). Operations still ``planned`` or ``sent``
    make the outcome ``unknown`` — never success; conflicts, failures or effects that may
    have landed make it ``needs_review``; only confirmed (or confirmed absent) ones verify.

    ``unmet``: the operations the run's ``done_when`` requires that are not confirmed,
    with their state (None: never declared; ``domain.jobs.unmet``). Any makes a
    completion that the counts alone would verify ``needs_review`` — or ``unknown`` when
    one of them is still in flight — and the text names them.

    ``excluded``: ``not_started`` operations that an approved amendment left out. A person
    with the authority to change the job agreed that they will not happen, so they do not
    stand in the way of a verified completion; the text still names them. Any other
    ``not_started`` operation (the runtime never began it) needs a review.
    """
    counts = normalized(counts)
    ids = ids or {}
    text = counts_text(counts)
    if excluded:
        text = f"{text}; left out by an approved amendment: {_listed(list(excluded))}"
    agreed = dict(counts)
    left = agreed.pop(OpState.NOT_STARTED, 0) - len(excluded or [])
    if left > 0:
        agreed[OpState.NOT_STARTED] = left
    required = _required_line(unmet or {})
    if not agreed or set(agreed) <= VERIFIED:
        if required is None:
            return Completion(Outcome.VERIFIED, text)
        waiting = any(state in IN_FLIGHT for state in (unmet or {}).values())
        return Completion(
            Outcome.UNKNOWN if waiting else Outcome.NEEDS_REVIEW, f"{text}; {required}"
        )
    lines = [text]
    if required is not None:
        lines.append(required)
    for state, label in (
        (OpState.CONFLICT, "conflicts"),
        (OpState.FAILED, "failed"),
        (OpState.UNCERTAIN, "uncertain"),
        (OpState.UNRESOLVED, "unresolved"),
    ):
        if ids.get(state):
            lines.append(f"{label}: {_listed(ids[state])}")
    in_flight = [i for s in (OpState.SENT, OpState.PLANNED) for i in ids.get(s, [])]
    if any(counts.get(s) for s in IN_FLIGHT):
        line = "outcome unknown: operations still in flight"
        lines.append(f"{line}: {_listed(in_flight)}" if in_flight else line)
        return Completion(Outcome.UNKNOWN, "; ".join(lines))
    return Completion(Outcome.NEEDS_REVIEW, "; ".join(lines))


def _required_line(unmet: Mapping[str, str | None]) -> str | None:
    """ "not done: t3 conflict, t9 never declared" for what ``done_when`` still needs."""
    if not unmet:
        return None
    named = [f"{op} {state or 'never declared'}" for op, state in unmet.items()]
    return f"not done as done_when says: {_listed(named)}"


def _listed(ids: list[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown if len(ids) <= limit else f"{shown} and {len(ids) - limit} more"
