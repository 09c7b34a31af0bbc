"""The attention policy: pure, deterministic, rules as data (DESIGN §7).

A :class:`Policy` is an ordered list of :class:`Rule`. :meth:`Policy.decide` takes the
:class:`Facts` of one transition and returns the first matching rule's
:class:`Decision`, carrying the rule id and the facts it saw, so that every notification
can say why it exists. Nothing here reads a clock, a database or the network.

Example::

    policy = Policy.default()
    decision = policy.decide(Facts(attention="failed", error_user_action=True))
    assert (decision.kind, decision.urgency, decision.rule_id) == (
        "push", "urgent", "failed.needs_repair")
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, TypedDict, cast

from runbell.domain import digests, limits
from runbell.domain.digest_schedule import DigestSchedule
from runbell.domain.errors import ValidationFailed
from runbell.domain.escalation import Fallback, Step, parse_fallback, parse_ladder
from runbell.domain.notify_throttle import Throttle, parse_throttle

DecisionKind = Literal["push", "digest", "inbox", "live", "suppress"]
Urgency = Literal["low", "normal", "time_sensitive", "urgent"]

DECISION_KINDS: tuple[str, ...] = ("push", "digest", "inbox", "live", "suppress")
URGENCIES: tuple[str, ...] = ("low", "normal", "time_sensitive", "urgent")
# Decisions that create a durable notification (live and suppress do not).
NOTIFYING: frozenset[str] = frozenset({"push", "digest", "inbox"})
# A working run that reports nothing for this long is stalled (tenant policy may change it).
DEFAULT_STALL_AFTER_S = 900
# Bounds of a rule's snooze_s (a minute to a day).
MIN_SNOOZE_S = 60
MAX_SNOOZE_S = 86400


@dataclass(frozen=True)
class Facts:
    """Everything the policy may look at for one transition. Absent facts are None."""

    attention: str
    notify_on_complete: bool = False
    duration_s: float | None = None
    owner_present: bool = False
    effects_verified: bool | None = None
    error_retryable: bool = False
    error_user_action: bool = False
    data_inconsistent: bool = False
    cancelled_by_owner: bool = False
    blocks_work: bool = True
    has_expiry: bool = False
    recent_completions: int = 0

    def as_dict(self) -> dict[str, Any]:
        # Flat and scalar: no deep copy (dataclasses.asdict's cost a signal paid twice).
        return {name: getattr(self, name) for name in _FACT_FIELDS}


class TenantPolicy(TypedDict, total=False):
    """A tenant's policy document (``PUT /v1/policy``, ``runbell tenant policy``),
    checked whole by ``runbell.domain.policy.Policy.from_mapping``."""

    rules: list[dict[str, Any]]
    rule: list[dict[str, Any]]  # TOML's [[rule]] tables
    replace_defaults: bool
    quiet_hours_bypass: list[str]
    stall_after_seconds: int | None


class TransitionFacts(TypedDict, total=False):
    """The facts a transition brings to :class:`Facts` (the rest the attention flow adds:
    the attention, the run's duration, the owner's presence, recent completions)."""

    effects_verified: bool | None
    error_retryable: bool
    error_user_action: bool
    data_inconsistent: bool
    cancelled_by_owner: bool
    blocks_work: bool
    has_expiry: bool


_FACT_FIELDS = tuple(f.name for f in dataclasses.fields(Facts))
FACT_NAMES: frozenset[str] = frozenset(f.name for f in dataclasses.fields(Facts))
_OPS = {"gte", "lte", "gt", "lt", "in"}


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    urgency: Urgency | None
    rule_id: str
    inputs: dict[str, Any]
    expires_after_s: int | None = None
    digest_window_s: int | None = None
    digest_key: str | None = None  # a digest's settings, filled in by decide()
    digest_max_items: int | None = None
    escalation: tuple[Step, ...] = ()  # not acknowledged by then → that channel
    fallback: Fallback | None = None  # a channel failed for good → the next rung at once
    # Issue 19: at most N pushes per recipient per key per window (domain.notify_throttle),
    # and a digest sent at a local time instead of by window (domain.digest_schedule).
    throttle: Throttle | None = None
    digest_schedule: DigestSchedule | None = None

    @property
    def notifies(self) -> bool:
        return self.kind in NOTIFYING

    def as_dict(self) -> dict[str, Any]:
        # What dataclasses.asdict gives, without deep-copying the facts (all scalars).
        out = {name: getattr(self, name) for name in _DECISION_FIELDS}
        out["inputs"] = dict(self.inputs)
        out["escalation"] = tuple(dataclasses.asdict(step) for step in self.escalation)
        out["fallback"] = None if self.fallback is None else dataclasses.asdict(self.fallback)
        out["throttle"] = None if self.throttle is None else dataclasses.asdict(self.throttle)
        out["digest_schedule"] = schedule_dict(self.digest_schedule)
        return out


def schedule_dict(schedule: DigestSchedule | None) -> dict[str, Any] | None:
    """A digest schedule as a rule document writes it: ``{at, days}``."""
    if schedule is None:
        return None
    days = None if schedule.days is None else sorted(schedule.days)
    return {"at": schedule.as_text(), "days": days}


_DECISION_FIELDS = tuple(f.name for f in dataclasses.fields(Decision))


@dataclass(frozen=True)
class Rule:
    id: str
    decision: DecisionKind
    when: Mapping[str, Any] = field(default_factory=dict)
    urgency: Urgency | None = None
    expires_after_s: int | None = None
    digest_window_s: int | None = None
    digest_key: str | None = None
    digest_max_items: int | None = None
    escalation: tuple[Step, ...] = ()
    fallback: Fallback | None = None
    throttle: Throttle | None = None
    digest_schedule: DigestSchedule | None = None
    # Acting from a web push (domain.push_actions): Approve/Reject on the notification
    # itself (off unless the rule says so; never for a request flagged risky), and how
    # long Snooze hides it (None: DEFAULT_SNOOZE_S).
    lock_screen_answers: bool = False
    snooze_s: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The rule's fields, JSON-ready (``GET /v1/policy``'s ``effective``)."""
        out = dataclasses.asdict(self)
        out["digest_schedule"] = schedule_dict(self.digest_schedule)
        return out

    def matches(self, facts: Mapping[str, Any]) -> bool:
        return all(_match(facts.get(name), cond) for name, cond in self.when.items())

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> Rule:
        rule_id = raw.get("id")
        if not isinstance(rule_id, str) or not rule_id:
            raise ValidationFailed(f"{where}: every rule needs a non-empty string id", field="id")
        if len(rule_id) > limits.RULE_ID:
            raise ValidationFailed(
                f"{where}: a rule id is at most {limits.RULE_ID} characters", field="id"
            )
        decision = raw.get("decision")
        if decision not in DECISION_KINDS:
            raise ValidationFailed(
                f"rule {rule_id!r}: decision must be one of {', '.join(DECISION_KINDS)}",
                field="decision",
            )
        urgency = raw.get("urgency")
        if urgency is not None and urgency not in URGENCIES:
            raise ValidationFailed(
                f"rule {rule_id!r}: urgency must be one of {', '.join(URGENCIES)}",
                field="urgency",
            )
        if decision == "push" and urgency is None:
            raise ValidationFailed(f"rule {rule_id!r}: a push needs an urgency", field="urgency")
        when = raw.get("when", {})
        if not isinstance(when, Mapping):
            raise ValidationFailed(f"rule {rule_id!r}: when must be a table", field="when")
        for name, cond in when.items():
            if name not in FACT_NAMES:
                raise ValidationFailed(
                    f"rule {rule_id!r}: unknown fact {name!r}; "
                    f"known: {', '.join(sorted(FACT_NAMES))}",
                    field="when",
                )
            if isinstance(cond, Mapping):
                _check_condition(rule_id, name, cond)
        unknown = set(raw) - {
            "id",
            "decision",
            "when",
            "urgency",
            "expires_after_s",
            "digest_window_s",
            "digest_key",
            "digest_max_items",
            "escalation",
            "fallback",
            "throttle",
            "digest_at",
            "digest_days",
            "lock_screen_answers",
            "snooze_s",
        }
        if unknown:
            raise ValidationFailed(
                f"rule {rule_id!r}: unknown keys {', '.join(sorted(unknown))}", field="rule"
            )
        window = _opt_int(raw.get("digest_window_s"), rule_id, "digest_window_s")
        max_items = _opt_int(raw.get("digest_max_items"), rule_id, "digest_max_items")
        digests.check_rule(rule_id, raw.get("digest_key"), window, max_items)
        ladder = parse_ladder(raw.get("escalation"), rule_id)
        throttle = parse_throttle(raw.get("throttle"), rule_id)
        if throttle is not None and decision not in ("push", "digest"):
            raise ValidationFailed(
                f"rule {rule_id!r}: throttle applies to a rule that pushes (push or digest)",
                field="throttle",
            )
        schedule = None
        if raw.get("digest_at") is not None:
            if window is not None:
                raise ValidationFailed(
                    f"rule {rule_id!r}: a digest is sent either at digest_at or every "
                    "digest_window_s, not both",
                    field="digest_at",
                )
            schedule = DigestSchedule.parse(raw.get("digest_at"), raw.get("digest_days"), rule_id)
        elif raw.get("digest_days") is not None:
            raise ValidationFailed(
                f"rule {rule_id!r}: digest_days needs digest_at", field="digest_days"
            )
        lock_screen = raw.get("lock_screen_answers", False)
        if not isinstance(lock_screen, bool):
            raise ValidationFailed(
                f"rule {rule_id!r}: lock_screen_answers must be true or false",
                field="lock_screen_answers",
            )
        snooze_s = _opt_int(raw.get("snooze_s"), rule_id, "snooze_s")
        if snooze_s is not None and not MIN_SNOOZE_S <= snooze_s <= MAX_SNOOZE_S:
            raise ValidationFailed(
                f"rule {rule_id!r}: snooze_s must be between {MIN_SNOOZE_S} and "
                f"{MAX_SNOOZE_S} seconds",
                field="snooze_s",
            )
        return cls(
            id=rule_id,
            decision=cast(DecisionKind, decision),
            when=dict(when),
            urgency=cast("Urgency | None", urgency),
            expires_after_s=_opt_int(raw.get("expires_after_s"), rule_id, "expires_after_s"),
            digest_window_s=window,
            digest_key=raw.get("digest_key"),
            digest_max_items=max_items,
            escalation=ladder,
            fallback=parse_fallback(raw.get("fallback"), rule_id, ladder),
            throttle=throttle,
            digest_schedule=schedule,
            lock_screen_answers=lock_screen,
            snooze_s=snooze_s,
        )


def _check_condition(rule_id: str, name: str, cond: Mapping[str, Any]) -> None:
    """Operators with bounds of the right type, so matching can never raise later."""
    if not set(cond) <= _OPS:
        raise ValidationFailed(
            f"rule {rule_id!r}: fact {name!r} uses an unknown operator", field="when"
        )
    for op, bound in cond.items():
        if op == "in":
            if not isinstance(bound, list):
                raise ValidationFailed(f"rule {rule_id!r}: {name}.in must be a list", field="when")
        elif isinstance(bound, bool) or not isinstance(bound, int | float):
            raise ValidationFailed(f"rule {rule_id!r}: {name}.{op} must be a number", field="when")


def _opt_int(value: Any, rule_id: str, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON Schema's integer: 60.0 is 60
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationFailed(
            f"rule {rule_id!r}: {name} must be a non-negative integer", field=name
        )
    return value


def _match(value: Any, cond: Any) -> bool:
    if not isinstance(cond, Mapping):
        return bool(value == cond)
    for op, bound in cond.items():
        if op == "in":
            if value not in bound:
                return False
            continue
        if value is None:
            return False
        if op == "gte" and not value >= bound:
            return False
        if op == "lte" and not value <= bound:
            return False
        if op == "gt" and not value > bound:
            return False
        if op == "lt" and not value < bound:
            return False
    return True


def count_cap(rules: Sequence[Rule], fact: str) -> int:
    """How far a counted ``fact`` must be counted for ``rules`` to decide as if it were
    counted whole: one past the largest bound any rule compares it with (0 when no rule
    looks at it). ``min(count, cap)`` satisfies every condition ``count`` does — for
    ``gte b``, ``lt b``, ``== v`` and ``in [...]`` alike — so the store can stop counting
    there, and the count's cost no longer grows with history."""
    cap = 0
    for rule in rules:
        cond = rule.when.get(fact)
        if cond is None:
            continue
        if isinstance(cond, Mapping):
            bounds: list[Any] = []
            for op, bound in cond.items():
                bounds += list(bound) if op == "in" else [bound]
        else:
            bounds = [cond]
        for bound in bounds:
            if isinstance(bound, int | float) and not isinstance(bound, bool):
                cap = max(cap, math.floor(bound) + 2)
    return cap


class Policy:
    """An ordered rule list. Construct once, call :meth:`decide` per transition."""

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        quiet_bypass: frozenset[str] = frozenset(),
        stall_after_s: int = DEFAULT_STALL_AFTER_S,
    ) -> None:
        ids = [r.id for r in rules]
        dupes = {i for i in ids if ids.count(i) > 1}
        if dupes:
            raise ValidationFailed(f"duplicate rule ids: {', '.join(sorted(dupes))}", field="id")
        self.rules: tuple[Rule, ...] = tuple(rules)
        # Urgencies a tenant explicitly lets through quiet hours (invariant 7): only ever
        # from the tenant's own policy document, never from a runtime or a model.
        self.quiet_bypass = quiet_bypass
        self.recent_completions_cap = count_cap(self.rules, "recent_completions")
        # The rules that can match each attention type, in order, worked out once per
        # type (a rule whose ``attention`` condition excludes it never needs a look).
        self._for_attention: dict[str, tuple[Rule, ...]] = {}
        # A working run silent this long is stalled, unless the run sets its own (0: never).
        self.stall_after_s = stall_after_s

    def rule(self, rule_id: str | None) -> Rule | None:
        """The rule of this id, or None (a builtin decision, or a rule since removed)."""
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        return None

    def rules_for(self, attention: str) -> tuple[Rule, ...]:
        """The rules, in order, that may match ``attention`` (those without an
        ``attention`` condition, and those whose condition it meets)."""
        found = self._for_attention.get(attention)
        if found is None:
            found = self._for_attention[attention] = tuple(
                rule
                for rule in self.rules
                if "attention" not in rule.when or _match(attention, rule.when["attention"])
            )
        return found

    def decide(self, facts: Facts) -> Decision:
        seen = facts.as_dict()
        for rule in self.rules_for(facts.attention):
            if rule.matches(seen):
                if rule.decision == "digest" and not digests.never_waits(rule.urgency):
                    return Decision(
                        kind="digest",
                        urgency=rule.urgency or "low",
                        rule_id=rule.id,
                        inputs=seen,
                        expires_after_s=rule.expires_after_s,
                        digest_window_s=None
                        if rule.digest_schedule
                        else rule.digest_window_s or digests.DEFAULT_WINDOW_S,
                        digest_key=rule.digest_key or facts.attention,
                        digest_max_items=rule.digest_max_items or digests.DEFAULT_MAX_ITEMS,
                        digest_schedule=rule.digest_schedule,
                    )
                kind: DecisionKind = "push" if rule.decision == "digest" else rule.decision
                # Urgent and time-sensitive attention never waits for a digest.
                decision = Decision(
                    kind=kind,
                    urgency=rule.urgency,
                    rule_id=rule.id,
                    inputs=seen,
                    expires_after_s=rule.expires_after_s,
                    escalation=rule.escalation,
                    fallback=rule.fallback,
                )
                if rule.throttle is None or kind != "push":
                    return decision
                # Over its throttle, a push folds into the digest this rule describes.
                return dataclasses.replace(
                    decision,
                    throttle=rule.throttle,
                    digest_window_s=None if rule.digest_schedule else rule.digest_window_s,
                    digest_key=rule.digest_key,
                    digest_max_items=rule.digest_max_items,
                    digest_schedule=rule.digest_schedule,
                )
        # Unreachable with the default set (it ends in a catch-all), but a tenant that
        # replaced the defaults may leave gaps: keep the record in the inbox, never drop it.
        return Decision(kind="inbox", urgency="low", rule_id="builtin.no_rule_matched", inputs=seen)

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any], *, base: Policy | None = None) -> Policy:
        raw_rules = doc.get("rule", doc.get("rules", []))
        if not isinstance(raw_rules, list):
            raise ValidationFailed("rules must be a list of tables", field="rule")
        rules = [
            Rule.parse(r, f"rule #{i + 1}") if isinstance(r, Mapping) else _bad(i)
            for i, r in enumerate(raw_rules)
        ]
        if base is not None and not doc.get("replace_defaults", False):
            own = {r.id for r in rules}
            rules += [r for r in base.rules if r.id not in own]
        bypass = doc.get("quiet_hours_bypass", [])
        if not isinstance(bypass, list) or any(u not in URGENCIES for u in bypass):
            raise ValidationFailed(
                f"quiet_hours_bypass must list urgencies from {', '.join(URGENCIES)}",
                field="quiet_hours_bypass",
            )
        stall = doc.get("stall_after_seconds")
        stall = DEFAULT_STALL_AFTER_S if stall is None else stall
        if isinstance(stall, bool) or not isinstance(stall, int) or stall < 0:
            raise ValidationFailed(
                "stall_after_seconds must be a whole number of seconds, 0 for never",
                field="stall_after_seconds",
            )
        return cls(rules, quiet_bypass=frozenset(bypass), stall_after_s=stall)

    @classmethod
    def from_toml(cls, text: str, *, base: Policy | None = None) -> Policy:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValidationFailed(f"policy file is not valid TOML: {exc}", field="policy") from exc
        return cls.from_mapping(doc, base=base)

    @classmethod
    def default(cls) -> Policy:
        return _DEFAULT


def _bad(i: int) -> Rule:
    raise ValidationFailed(f"rule #{i + 1} must be a table", field="rule")


_DEFAULT = Policy.from_toml(
    resources.files("runbell.domain").joinpath("default_policy.toml").read_text("utf-8")
)
