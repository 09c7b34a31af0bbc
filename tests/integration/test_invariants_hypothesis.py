"""Generated scripts of signals, redeliveries, progress and run updates over three runs;
the promises of DESIGN §2 (inv. 1, 2, 4, 5) and §3 are checked after every step, on
SQLite and PostgreSQL.

Each example gets a fresh tenant in the test's database, so examples never see each
other's rows.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runbell.domain.errors import Conflict
from runbell.domain.principal import Principal
from runbell.flows import runs as runs_flow
from runbell.flows import signals
from runbell.flows.context import Core
from runbell.flows.signals import Signal
from runbell.store import accounts
from runbell.store import tables as t
from runbell.testing import make_tenant

RUNS = ("r0", "r1", "r2")
STATES = ("queued", "working", "input_required", "stopping", "completed", "failed", "cancelled")
TERMINAL = {"completed", "failed", "cancelled"}
# DESIGN §3, written out independently of runbell.domain.runs.
ALLOWED = {
    "queued": {"working", "stopping", *TERMINAL},
    "working": {"input_required", "stopping", *TERMINAL},
    "input_required": {"working", "stopping", *TERMINAL},
    "stopping": set(TERMINAL),
}
EVENT_IDS = tuple(f"e{i}" for i in range(20))
_tenants = itertools.count()

signal_op = st.tuples(
    st.just("signal"),
    st.sampled_from(RUNS),
    st.sampled_from(STATES),
    st.one_of(st.none(), st.integers(min_value=0, max_value=6)),
    st.sampled_from(EVENT_IDS),
    st.sampled_from([None, {"retryable": True}, {"user_action_required": True}]),
    st.sampled_from([None, True, False]),
)
ops = st.one_of(
    signal_op,
    signal_op,
    signal_op,
    st.tuples(st.just("redeliver"), st.integers(min_value=0, max_value=50)),
    st.tuples(st.just("progress"), st.sampled_from(RUNS)),
    st.tuples(st.just("put"), st.sampled_from(RUNS), st.sampled_from(["a", "b"])),
)


@dataclass
class Model:
    """What the test remembers: first answers per event id, terminal states reached."""

    first: dict[str, tuple[str, str, list[str]]] = field(default_factory=dict)
    sent: list[tuple[str, Signal]] = field(default_factory=list)
    terminal: dict[str, str] = field(default_factory=dict)


def load(core: Core, tenant_id: str) -> dict[str, Any]:
    with core.db.read() as conn:

        def select(table: sa.Table) -> list[dict[str, Any]]:
            return [
                dict(r._mapping)
                for r in conn.execute(sa.select(table).where(table.c.tenant_id == tenant_id))
            ]

        return {
            "runs": {r["run_id"]: r for r in select(t.runs)},
            "transitions": select(t.transitions),
            "notifications": select(t.notifications),
            "feed": sorted(r["seq"] for r in select(t.feed_events)),
        }


def check(world: dict[str, Any], model: Model) -> None:
    """The invariants that hold after any step."""
    # Inv. 2: terminal states are absorbing.
    for run_id, state in model.terminal.items():
        assert world["runs"][run_id]["state"] == state, f"{run_id} left terminal {state}"
    # §3: version counts accepted changes; history rows are 1..version, once each, chained.
    for run_id, run in world["runs"].items():
        history = sorted(
            (tr for tr in world["transitions"] if tr["run_id"] == run_id),
            key=lambda tr: tr["version"],
        )
        assert [tr["version"] for tr in history] == list(range(1, run["version"] + 1))
        assert history[0]["kind"] == "create"
        for prev, cur in itertools.pairwise(history):
            assert cur["from_state"] == prev["to_state"], (prev, cur)
            assert cur["from_state"] not in TERMINAL or cur["kind"] == "update"
        assert history[-1]["to_state"] == run["state"]
        seqs = [
            tr["sequence"] for tr in history if tr["kind"] == "state" and tr["sequence"] is not None
        ]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    # Inv. 1: one notification per (recipient, run, transition version, attention type) ...
    keys = Counter(
        (n["recipient_user_id"], n["run_id"], n["transition_version"], n["attention_type"])
        for n in world["notifications"]
    )
    assert all(c == 1 for c in keys.values()), keys
    # ... and it exists exactly when the transition's recorded decision notifies.
    for tr in world["transitions"]:
        notes = [
            n
            for n in world["notifications"]
            if (n["run_id"], n["transition_version"]) == (tr["run_id"], tr["version"])
        ]
        decision = tr["decision"]
        if decision is not None and decision["kind"] in ("push", "digest", "inbox"):
            assert [n["rule_id"] for n in notes] == [decision["rule_id"]], (tr, notes)
        else:
            assert notes == [], (tr, notes)
    # §7: an open actionable alert always belongs to the run's current version.
    for n in world["notifications"]:
        if n["state"] == "open" and n["attention_type"] == "input_required":
            run = world["runs"][n["run_id"]]
            assert n["transition_version"] == run["version"], (n, run["version"])
            assert run["state"] == "input_required"
    # §6 feed: strictly increasing and gap-free.
    assert world["feed"] == list(range(1, len(world["feed"]) + 1))


def expected_applies(run: dict[str, Any], sig: Signal) -> bool:
    state, seq = run["state"], run["sequence"]
    if state in TERMINAL:
        return False
    if sig.sequence is not None and seq is not None and sig.sequence <= seq:
        return False
    return sig.state in ALLOWED[state]


def send(
    core: Core, tenant_id: str, source: dict[str, Any], run_id: str, sig: Signal, model: Model
) -> None:
    before = load(core, tenant_id)
    model.sent.append((run_id, sig))
    if sig.event_id in model.first and model.first[sig.event_id][0] != run_id:
        # An event id reused for another run is a runtime bug: refused, nothing changes.
        with pytest.raises(Conflict) as refused:
            signals.accept_signal(core, tenant_id, source, run_id, sig)
        assert refused.value.extra.get("field") == "event_id"
        assert load(core, tenant_id) == before
        event("conflict")
        return
    result = signals.accept_signal(core, tenant_id, source, run_id, sig)
    event(result.outcome)
    after = load(core, tenant_id)
    ids = [n["id"] for n in result.notifications]
    versions_before = {r: before["runs"][r]["version"] for r in RUNS}
    versions_after = {r: after["runs"][r]["version"] for r in RUNS}

    if sig.event_id in model.first:
        first_run, first_outcome, first_ids = model.first[sig.event_id]
        assert result.outcome == "duplicate", (sig, result.outcome)
        assert result.original_outcome == first_outcome
        assert result.run["run_id"] == run_id == first_run
        assert sorted(ids) == sorted(first_ids)
        assert versions_after == versions_before
        assert len(after["notifications"]) == len(before["notifications"])
        return

    model.first[sig.event_id] = (run_id, result.outcome, ids)
    run = before["runs"][run_id]
    others = [r for r in RUNS if r != run_id]
    assert {r: versions_after[r] for r in others} == {r: versions_before[r] for r in others}
    # A signal's outcome is `applied` iff the run's version rose by exactly one.
    if result.outcome == "applied":
        assert versions_after[run_id] == versions_before[run_id] + 1
        assert after["runs"][run_id]["state"] == sig.state
        if sig.sequence is not None:
            assert after["runs"][run_id]["sequence"] == sig.sequence
    else:
        assert result.outcome in ("stale", "rejected"), result.outcome
        assert versions_after[run_id] == versions_before[run_id]
        assert after["runs"][run_id]["state"] == run["state"]
        assert after["runs"][run_id]["sequence"] == run["sequence"]
        assert ids == []
        assert len(after["notifications"]) == len(before["notifications"])
    assert (result.outcome == "applied") == expected_applies(run, sig), (run["state"], sig)
    new_notes = {n["id"] for n in after["notifications"]} - {
        n["id"] for n in before["notifications"]
    }
    assert new_notes == set(ids)
    assert len(ids) <= 1


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=st.lists(ops, min_size=5, max_size=30))
def test_generated_scripts_keep_the_invariants(core: Core, script: list[tuple[Any, ...]]) -> None:
    """DESIGN §2 inv. 1, 2, 4, 5 and §3 versioning hold after every step of any script."""
    name = f"t{next(_tenants)}"
    creds = make_tenant(core, name=name)
    tenant_id = creds.tenant_id
    who = Principal(tenant_id=tenant_id, kind="key", role="runtime")
    with core.db.read() as conn:
        source = accounts.get_source(conn, tenant_id, accounts.api_source_id(conn, tenant_id))
    for run_id, start in zip(RUNS, ("queued", "working", "working"), strict=True):
        body = {"owner": creds.owner_email, "title": "a", "state": start}
        runs_flow.put_run(core, who, run_id, body)
    model = Model()
    check(load(core, tenant_id), model)

    for op in script:
        kind = op[0]
        if kind == "signal":
            _, run_id, state, seq, event_id, error, verified = op
            sig = Signal(
                event_id=event_id,
                state=state,
                sequence=seq,
                error=error,
                effects_verified=verified,
            )
            send(core, tenant_id, source, run_id, sig, model)
        elif kind == "redeliver":
            if not model.sent:
                continue
            run_id, sig = model.sent[op[1] % len(model.sent)]
            send(core, tenant_id, source, run_id, sig, model)
        elif kind == "progress":
            run_id = op[1]
            before = load(core, tenant_id)
            out = runs_flow.record_progress(core, who, run_id, "tick", {"done": 1, "unit": "steps"})
            after = load(core, tenant_id)
            # Inv. 5: progress never notifies and never changes the run's version.
            assert after["notifications"] == before["notifications"]
            assert after["runs"][run_id]["version"] == before["runs"][run_id]["version"]
            assert out["accepted"] is (before["runs"][run_id]["state"] not in TERMINAL)
            assert len(after["feed"]) == len(before["feed"]) + (1 if out["accepted"] else 0)
        else:
            _, run_id, title = op
            before = load(core, tenant_id)
            changed = before["runs"][run_id]["title"] != title
            if changed and before["runs"][run_id]["state"] in TERMINAL:
                # A finished run is not edited: refused, nothing changes.
                with pytest.raises(Conflict):
                    runs_flow.put_run(core, who, run_id, {"title": title})
                assert load(core, tenant_id) == before
                continue
            runs_flow.put_run(core, who, run_id, {"title": title})
            after = load(core, tenant_id)
            assert after["runs"][run_id]["version"] == before["runs"][run_id]["version"] + changed
            assert after["runs"][run_id]["state"] == before["runs"][run_id]["state"]
            assert after["runs"][run_id]["title"] == title
        world = load(core, tenant_id)
        for run_id, run in world["runs"].items():
            if run["state"] in TERMINAL:
                model.terminal.setdefault(run_id, run["state"])
        check(world, model)
