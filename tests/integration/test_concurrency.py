"""Concurrent signals: no transition lost or merged, one notification per transition, a
gap-free feed (DESIGN §2 inv. 1, 2, 4; §6 feed semantics). Runs on SQLite and on a real
PostgreSQL, where the threads really do race."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import pytest
import sqlalchemy as sa

from runbell.domain.principal import Principal
from runbell.flows import runs as runs_flow
from runbell.flows import signals
from runbell.flows.context import Core
from runbell.flows.signals import Signal
from runbell.store import accounts
from runbell.store import db as store_db
from runbell.store import tables as t
from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.timeouts import WAIT, scaled

T = TypeVar("T")


def race(n_threads: int, jobs: list[Callable[[], T]]) -> list[T]:
    """Run ``jobs`` on ``n_threads`` threads released together by a barrier."""
    barrier = threading.Barrier(min(n_threads, len(jobs)))

    def gated(job: Callable[[], T], first_wave: bool) -> T:
        if first_wave:
            barrier.wait(timeout=WAIT)
        return job()

    with ThreadPoolExecutor(max_workers=n_threads) as pool:
        futures = [pool.submit(gated, job, i < n_threads) for i, job in enumerate(jobs)]
        return [f.result(timeout=scaled(120)) for f in futures]


def api_source(core: Core, tenant_id: str) -> accounts.Source:
    with core.db.read() as conn:
        return accounts.get_source(conn, tenant_id, accounts.api_source_id(conn, tenant_id))


def create_runs(core: Core, creds: TenantCreds, run_ids: list[str], **body: Any) -> None:
    who = Principal(tenant_id=creds.tenant_id, kind="key", role="runtime")
    for run_id in run_ids:
        runs_flow.put_run(
            core, who, run_id, {"owner": creds.owner_email, "state": "working", **body}
        )


def select_all(core: Core, table: sa.Table, tenant_id: str) -> list[dict[str, Any]]:
    with core.db.read() as conn:
        return [
            dict(r._mapping)
            for r in conn.execute(sa.select(table).where(table.c.tenant_id == tenant_id)).all()
        ]


def run_row(core: Core, tenant_id: str, run_id: str) -> dict[str, Any]:
    with core.db.read() as conn:
        return dict(
            conn.execute(
                sa.select(t.runs).where(t.runs.c.tenant_id == tenant_id, t.runs.c.run_id == run_id)
            )
            .one()
            ._mapping
        )


def test_fifty_runs_completing_at_once_each_keep_their_record(
    core: Core, creds: TenantCreds
) -> None:
    """Inv. 4: transitions of different runs committed together are all kept, none merged."""
    run_ids = [f"run-{i:02d}" for i in range(50)]
    create_runs(core, creds, run_ids, notify_on_complete=True)
    source = api_source(core, creds.tenant_id)

    def complete(run_id: str) -> Callable[[], Any]:
        return lambda: signals.accept_signal(
            core,
            creds.tenant_id,
            source,
            run_id,
            Signal(event_id=f"done-{run_id}", state="completed"),
        )

    results = race(16, [complete(r) for r in run_ids])
    assert [r.outcome for r in results] == ["applied"] * 50
    assert sorted(r.run["run_id"] for r in results) == run_ids

    notes = select_all(core, t.notifications, creds.tenant_id)
    assert len({n["id"] for n in notes}) == 50
    assert sorted(n["run_id"] for n in notes) == run_ids
    assert {(n["attention_type"], n["transition_version"]) for n in notes} == {("completed", 2)}
    assert sorted(n["id"] for r in results for n in r.notifications) == sorted(
        n["id"] for n in notes
    )

    done = [tr for tr in select_all(core, t.transitions, creds.tenant_id) if tr["kind"] == "state"]
    assert sorted((tr["run_id"], tr["version"], tr["to_state"]) for tr in done) == [
        (r, 2, "completed") for r in run_ids
    ]
    assert {tr["event_id"] for tr in done} == {f"done-{r}" for r in run_ids}
    for run_id in run_ids:
        row = run_row(core, creds.tenant_id, run_id)
        assert (row["state"], row["version"]) == ("completed", 2)

    events = sorted(select_all(core, t.feed_events, creds.tenant_id), key=lambda e: e["seq"])
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1)), "feed sequence has a gap"
    with core.db.read() as conn:
        head = conn.execute(
            sa.select(t.tenants.c.feed_seq).where(t.tenants.c.id == creds.tenant_id)
        ).scalar_one()
    assert head == seqs[-1]
    transitioned = [e for e in events if e["type"] == "run.transitioned"]
    assert len(transitioned) == 50
    assert sorted(e["run_id"] for e in transitioned) == run_ids
    t_seqs = [e["seq"] for e in transitioned]
    assert t_seqs == sorted(set(t_seqs))


def test_same_event_from_eight_threads_applies_once(core: Core, creds: TenantCreds) -> None:
    """Inv. 1: one event delivered 8 times at once: one applied, 7 duplicates, one alert."""
    create_runs(core, creds, ["r1"], notify_on_complete=True)
    source = api_source(core, creds.tenant_id)
    sig = Signal(event_id="evt-same", state="completed")
    results = race(
        8,
        [lambda: signals.accept_signal(core, creds.tenant_id, source, "r1", sig) for _ in range(8)],
    )
    assert Counter(r.outcome for r in results) == Counter({"applied": 1, "duplicate": 7})
    assert {r.original_outcome for r in results if r.outcome == "duplicate"} == {"applied"}
    (note,) = select_all(core, t.notifications, creds.tenant_id)
    for r in results:
        assert [n["id"] for n in r.notifications] == [note["id"]]
    row = run_row(core, creds.tenant_id, "r1")
    assert (row["state"], row["version"]) == ("completed", 2)
    assert len(select_all(core, t.transitions, creds.tenant_id)) == 2
    (inbound,) = select_all(core, t.inbound_events, creds.tenant_id)
    assert inbound["outcome"] == "applied"


def test_same_event_over_http_from_eight_clients_applies_once(
    live: LiveServer, core: Core, creds: TenantCreds
) -> None:
    """Inv. 1 over real HTTP: concurrent retries of one signal answer 200 and alert once."""
    create_runs(core, creds, ["r1"], notify_on_complete=True)

    def post() -> httpx.Response:
        with httpx.Client(base_url=live.url, timeout=scaled(60)) as c:
            return c.post(
                "/v1/runs/r1/signals",
                json={"event_id": "evt-http", "state": "completed"},
                headers=bearer(creds.runtime_key),
            )

    responses = race(8, [post for _ in range(8)])
    assert [r.status_code for r in responses] == [200] * 8, [r.text for r in responses]
    outcomes = Counter(r.json()["outcome"] for r in responses)
    assert outcomes == Counter({"applied": 1, "duplicate": 7})
    (note,) = select_all(core, t.notifications, creds.tenant_id)
    assert {n["id"] for r in responses for n in r.json()["notifications"]} == {note["id"]}


def test_different_events_claiming_completion_apply_once(core: Core, creds: TenantCreds) -> None:
    """Inv. 1/2: 8 distinct completion reports race; one applies, the rest are stale."""
    create_runs(core, creds, ["r1"], notify_on_complete=True)
    source = api_source(core, creds.tenant_id)

    def complete(i: int) -> Callable[[], Any]:
        return lambda: signals.accept_signal(
            core, creds.tenant_id, source, "r1", Signal(event_id=f"evt-{i}", state="completed")
        )

    results = race(8, [complete(i) for i in range(8)])
    assert Counter(r.outcome for r in results) == Counter({"applied": 1, "stale": 7})
    (note,) = select_all(core, t.notifications, creds.tenant_id)
    (winner,) = [r for r in results if r.outcome == "applied"]
    assert [n["id"] for n in winner.notifications] == [note["id"]]
    row = run_row(core, creds.tenant_id, "r1")
    assert (row["state"], row["version"]) == ("completed", 2)
    trs = select_all(core, t.transitions, creds.tenant_id)
    assert sorted(tr["version"] for tr in trs) == [1, 2]
    inbound = select_all(core, t.inbound_events, creds.tenant_id)
    assert len(inbound) == 8
    assert Counter(i["outcome"] for i in inbound) == Counter({"applied": 1, "stale": 7})
    transitioned = [
        e
        for e in select_all(core, t.feed_events, creds.tenant_id)
        if e["type"] == "run.transitioned"
    ]
    assert len(transitioned) == 1


def test_concurrent_creates_of_one_run_all_succeed_once(
    request: pytest.FixtureRequest, core: Core, creds: TenantCreds
) -> None:
    """§6 PUT is create-or-update: a runtime's concurrent retries of the creating PUT all
    succeed, exactly one of them creates the run, and the history holds one creation."""
    who = Principal(tenant_id=creds.tenant_id, kind="key", role="runtime")

    def create() -> bool | str:
        try:
            body = {"owner": creds.owner_email, "title": "same"}
            return runs_flow.put_run(core, who, "r1", body)[1]
        except Exception as exc:  # the user sees a 500 for any of these
            return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"

    results = race(8, [create for _ in range(8)])
    assert sorted(results, key=str) == [False] * 7 + [True], results
    row = run_row(core, creds.tenant_id, "r1")
    assert (row["version"], row["title"]) == (1, "same")
    assert len(select_all(core, t.transitions, creds.tenant_id)) == 1


class InjectedFault(RuntimeError):
    pass


def test_commits_failing_among_concurrent_ones_leave_no_gap(
    monkeypatch: pytest.MonkeyPatch, core: Core, creds: TenantCreds
) -> None:
    """Inv. 12 + 17 under load: signals whose commit fails after taking feed numbers roll
    them back, so readers see no gap; their retries then apply exactly once."""
    run_ids = [f"run-{i:02d}" for i in range(30)]
    doomed = set(run_ids[::3])
    create_runs(core, creds, run_ids, notify_on_complete=True)
    source = api_source(core, creds.tenant_id)
    real_flush = store_db.Tx.flush_events

    def flaky_flush(self: store_db.Tx) -> dict[str, int]:
        touched = {ev.run_id for evs in self.events.values() for ev in evs}
        heads = real_flush(self)  # takes the feed numbers and writes the rows ...
        if touched & doomed:
            raise InjectedFault("commit failed")  # ... then the transaction rolls back
        return heads

    def complete(run_id: str) -> Callable[[], Any]:
        def job() -> str:
            try:
                sig = Signal(event_id=f"done-{run_id}", state="completed")
                return signals.accept_signal(core, creds.tenant_id, source, run_id, sig).outcome
            except InjectedFault:
                return "crashed"

        return job

    monkeypatch.setattr(store_db.Tx, "flush_events", flaky_flush)
    first = dict(zip(run_ids, race(16, [complete(r) for r in run_ids]), strict=True))
    monkeypatch.undo()
    assert {r for r, outcome in first.items() if outcome == "crashed"} == doomed
    assert {o for r, o in first.items() if r not in doomed} == {"applied"}
    for run_id in sorted(doomed):
        assert run_row(core, creds.tenant_id, run_id)["version"] == 1

    events = sorted(select_all(core, t.feed_events, creds.tenant_id), key=lambda e: e["seq"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert not {e["run_id"] for e in events if e["type"] != "run.created"} & doomed

    retried = race(8, [complete(r) for r in sorted(doomed)])
    assert retried == ["applied"] * len(doomed)
    notes = select_all(core, t.notifications, creds.tenant_id)
    assert sorted(n["run_id"] for n in notes) == run_ids
    events = sorted(select_all(core, t.feed_events, creds.tenant_id), key=lambda e: e["seq"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    transitioned = [e["run_id"] for e in events if e["type"] == "run.transitioned"]
    assert sorted(transitioned) == run_ids
