"""The policy dry-run: recorded transitions replayed through a candidate policy. Pure.

Every transition row stores the decision the policy took and the facts it saw
(``transitions.decision``: kind, urgency, rule id, ``inputs``). :func:`replay` rebuilds
:class:`~runbell.domain.policy.Facts` from those inputs, asks the candidate, and reports
both sides: counts per decision, attention type and urgency, and every transition whose
rule, decision or urgency would change.

What is replayed is exactly what was recorded, which is also its limit (:data:`LIMITS`):
owner presence is as it was at the time; ``recent_completions`` was counted only as far as
the then-current policy's rules could tell apart (a candidate comparing with a larger
bound sees the capped count); transitions that raised no attention (working, queued) and
attention the policy never saw (a stall raised before the policy existed) are not
replayed; and the candidate's decisions are taken one by one — they do not feed back into
the counts later transitions saw.

Example::

    report = replay(Policy.default(), [Recorded("r1", 2, at, recorded_decision)])
    assert report.replayed == 1
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

from runbell.domain.policy import FACT_NAMES, Facts, Policy

LIMITS = (
    "Replayed: the facts each transition recorded when it happened "
    f"({', '.join(sorted(FACT_NAMES))}). Not replayable: owner presence is as recorded at "
    "the time; recent_completions was counted only up to the bound the policy of the time "
    "compared it with; transitions that raised no attention are skipped; the candidate's "
    "own decisions do not change the counts later transitions saw; throttles are not "
    "counted (a throttled push shows as a push: whether it folds depends on each "
    "recipient's count at the time) and digests are not scheduled; nothing is sent or "
    "written."
)


@dataclass(frozen=True)
class Recorded:
    run_id: str
    version: int
    at: datetime
    decision: Mapping[str, Any] | None


class SideCounts(TypedDict):
    attention_type: str
    decision: str
    urgency: str
    current: int
    candidate: int


class ReplayCounts(TypedDict):
    """A replay's counts: how many transitions, how many changed, per axis and per
    (attention type, decision, urgency), and the changes themselves."""

    replayed: int
    skipped_without_attention: int
    changed: int
    by_decision: dict[str, dict[str, int]]
    by_attention_type: dict[str, dict[str, int]]
    by_urgency: dict[str, dict[str, int]]
    counts: list[SideCounts]
    changes: list[dict[str, Any]]


@dataclass
class ReplayReport:
    replayed: int = 0
    skipped: int = 0  # transitions without a recorded decision (no attention)
    changed: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)
    # (attention type, decision, urgency) -> [current, candidate]
    counts: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)

    def totals(self, index: int) -> dict[str, dict[str, int]]:
        """Counts along one axis (0 attention type, 1 decision, 2 urgency), both sides."""
        out: dict[str, dict[str, int]] = {}
        for key, (current, candidate) in self.counts.items():
            row = out.setdefault(key[index], {"current": 0, "candidate": 0})
            row["current"] += current
            row["candidate"] += candidate
        return dict(sorted(out.items()))

    def as_dict(self) -> ReplayCounts:
        return {
            "replayed": self.replayed,
            "skipped_without_attention": self.skipped,
            "changed": self.changed,
            "by_decision": self.totals(1),
            "by_attention_type": self.totals(0),
            "by_urgency": self.totals(2),
            "counts": [
                {
                    "attention_type": a,
                    "decision": d,
                    "urgency": u,
                    "current": sides[0],
                    "candidate": sides[1],
                }
                for (a, d, u), sides in sorted(self.counts.items())
            ],
            "changes": self.changes,
        }


def facts_of(inputs: Mapping[str, Any]) -> Facts:
    """The recorded facts, as the policy sees them (unknown or absent names ignored)."""
    return Facts(**{k: v for k, v in inputs.items() if k in FACT_NAMES})


def side(decision: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "rule_id": decision.get("rule_id"),
        "decision": decision.get("kind"),
        "urgency": decision.get("urgency"),
    }


def replay(
    candidate: Policy, recorded: Iterable[Recorded], *, change_limit: int = 200
) -> ReplayReport:
    """Both policies' answers for every recorded decision (the recorded one is "current")."""
    report = ReplayReport()
    for row in recorded:
        inputs = (row.decision or {}).get("inputs")
        if not isinstance(inputs, Mapping) or not isinstance(inputs.get("attention"), str):
            report.skipped += 1
            continue
        report.replayed += 1
        before = side(row.decision or {})
        after = side(candidate.decide(facts_of(inputs)).as_dict())
        attention = str(inputs["attention"])
        for i, s in enumerate((before, after)):
            key = (attention, str(s["decision"]), str(s["urgency"] or "none"))
            report.counts.setdefault(key, [0, 0])[i] += 1
        if before != after:
            report.changed += 1
            if len(report.changes) < change_limit:
                report.changes.append(
                    {
                        "run_id": row.run_id,
                        "version": row.version,
                        "at": row.at.isoformat(),
                        "attention_type": attention,
                        "before": before,
                        "after": after,
                    }
                )
    return report
