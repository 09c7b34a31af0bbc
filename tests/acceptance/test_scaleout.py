"""Scale-out on PostgreSQL under faults: several `runbell api` and `runbell worker`
processes on one database (DESIGN §2 invariants 1, 12, 14; §5; issue 9 §4).

- a viewer's stream on one API process makes a completion signalled on another count
  the owner as watching (presence is shared through the database);
- two APIs and two workers under a load of signals, one worker and then one API
  SIGKILLed midway: every accepted signal is stored once, every run's webhook arrives,
  and no message is sent twice except the few a killed worker had claimed and not
  recorded, which arrive again under the same webhook-id with the same bytes (the
  at-least-once edge tests/acceptance/test_worker_processes.py pins down);
- a transaction left open on another connection, holding row locks: the queue keeps
  draining around it;
- two schedulers: each sweep's work is done once (directly, and through PgBouncer);
- the whole topology through a PgBouncer in transaction mode (skipped without a
  ``pgbouncer`` binary).

Children are real processes on loopback, on a fresh database cloned from the migrated
template; every wait polls a condition with a deadline.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from runbell.app import build
from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.signatures import new_secret
from runbell.store import tables as t
from runbell.testing import make_tenant
from tests.acceptance.processes import ApiProc, SchedulerProc, start_all, start_apis
from tests.acceptance.receivers import Receiver
from tests.acceptance.test_database_outage import Stream
from tests.acceptance.test_worker_processes import (
    WorkerProc,
    child_env,
    clean,
    seed,
    start_workers,
    statuses,
    wait_for,
    webhook_rows,
)
from tests.conftest import make_settings, pg_database
from tests.pgbouncer import PgBouncer, PgBouncerUnavailable
from tests.timeouts import WAIT, scaled

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url(pg_template: str | None) -> Iterator[str]:
    yield from pg_database(pg_template)


@pytest.fixture
def core(tmp_path: Path, pg_url: str) -> Iterator[Core]:
    rb = build(make_settings(tmp_path, pg_url), migrate=False)
    yield rb
    rb.db.dispose()


def presence_rows(core: Core) -> int:
    with core.db.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(t.presence)).scalar_one())


# --- presence across API processes ----------------------------------------------------------


def test_a_viewer_on_one_api_process_is_watching_for_a_signal_on_another(
    tmp_path: Path, pg_url: str, core: Core
) -> None:
    """The owner's app has its live stream open on API A; the run completes through API B. B's
    policy sees the owner watching (inbox, no push); once the stream closes, the next
    completion through B pushes again. A viewer on an A that is SIGKILLed stops counting
    once its row expires."""
    creds = make_tenant(core)
    env = child_env(
        tmp_path,
        pg_url,
        RUNBELL_PRESENCE_CACHE_S="0",  # each signal reads what the table says now
        RUNBELL_PRESENCE_TTL_S="3",
        RUNBELL_FEED_FALLBACK_POLL_S="0.5",  # the closed stream is noticed quickly
        RUNBELL_SSE_KEEPALIVE_S="0.5",
    )
    runtime = {"Authorization": f"Bearer {creds.runtime_key}"}

    def complete(api: ApiProc, run_id: str) -> dict[str, object]:
        with httpx.Client(base_url=api.url, headers=runtime, timeout=WAIT) as c:
            made = c.put(
                f"/v1/runs/{run_id}",
                json={"owner": creds.owner_email, "state": "working", "notify_on_complete": True},
            )
            assert made.is_success, made.text
            done = c.post(
                f"/v1/runs/{run_id}/signals",
                json={"event_id": f"{run_id}-done", "state": "completed"},
            )
            assert done.status_code == 200, done.text
            (note,) = done.json()["notifications"]
            return dict(note)

    with ExitStack() as stack:
        a, b = start_apis(stack, env, tmp_path, 2)
        with Stream(a.url, creds.owner_token, as_app=True) as stream:
            wait_for(lambda: presence_rows(core) == 1, "A to record the viewer", [a, b])
            watched = complete(b, "watched")
        assert stream.error is None
        wait_for(lambda: presence_rows(core) == 0, "A to forget the closed stream", [a, b])
        unwatched = complete(b, "unwatched")
        assert a.stop() == 0
        clean(a.output)
        assert presence_rows(core) == 0, "a clean stop leaves no row behind"

        a = ApiProc(env, tmp_path / "api1-again.log")
        start_all(stack, [a])
        with Stream(a.url, creds.owner_token, as_app=True):
            wait_for(lambda: presence_rows(core) == 1, "the new A to record the viewer", [a, b])
            a.kill()  # no leave, no clean stop: the row stays behind
        tries = iter(range(10_000))
        wait_for(
            lambda: complete(b, f"after-kill-{next(tries)}")["decision"] == "push",
            "the dead process's viewer to stop counting",
            [b],
        )
        assert presence_rows(core) == 1, "expired, not deleted: only a heartbeat deletes it"
        assert b.stop() == 0
        for api in (a, b):
            clean(api.output)

    assert (watched["decision"], watched["rule_id"]) == ("inbox", "completed.owner_present")
    assert (unwatched["decision"], unwatched["rule_id"]) == ("push", "completed.requested")


# --- two APIs, two workers, SIGKILL under load ----------------------------------------------


@dataclass(frozen=True)
class Sent:
    run_id: str
    event_id: str
    status: int
    outcome: str | None


class SignalLoad:
    """Threads that create runs and complete them, spreading requests over the APIs; a
    request to an API that died is sent again, unchanged, to the next one (what a client
    with a retry policy does: the event id makes it idempotent)."""

    def __init__(self, apis: list[ApiProc], runtime_key: str, owner: str, threads: int = 4):
        self.apis = apis
        self.headers = {"Authorization": f"Bearer {runtime_key}"}
        self.owner = owner
        self.sent: list[Sent] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(threads)]

    def __enter__(self) -> SignalLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=scaled(60))

    def count(self) -> int:
        with self._lock:
            return len(self.sent)

    def _call(self, clients: list[httpx.Client], first: int, method: str, path: str, body: dict):
        for k in range(len(clients)):
            try:
                return clients[(first + k) % len(clients)].request(method, path, json=body)
            except httpx.TransportError:  # that API is gone: the same request elsewhere
                continue
        raise AssertionError("no API answered")

    def _run(self, n: int) -> None:
        clients = [
            httpx.Client(base_url=a.url, headers=self.headers, timeout=WAIT) for a in self.apis
        ]
        try:
            i = 0
            while not self._stop.is_set():
                i += 1
                run_id = f"load-{n}-{i}"
                put = self._call(clients, i, "PUT", f"/v1/runs/{run_id}", {"owner": self.owner})
                if not put.is_success:
                    with self._lock:
                        self.errors.append(f"PUT {put.status_code} {put.text[:200]}")
                    continue
                event = {"event_id": f"{run_id}-done", "state": "completed"}
                r = self._call(clients, i + 1, "POST", f"/v1/runs/{run_id}/signals", event)
                outcome = r.json().get("outcome") if r.status_code == 200 else None
                with self._lock:
                    self.sent.append(Sent(run_id, event["event_id"], r.status_code, outcome))
        except Exception as exc:
            with self._lock:
                self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            for c in clients:
                c.close()


@pytest.mark.slow
def test_two_apis_two_workers_lose_nothing_when_one_of_each_is_killed(
    tmp_path: Path, pg_url: str, core: Core
) -> None:
    secret = new_secret()
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        seeded = seed(core, rx.url, secret, runs=0)
        env = child_env(
            tmp_path,
            pg_url,
            RUNBELL_WORKER_LEASE_S="3",  # the killed worker's claims come back soon
            RUNBELL_OUTBOUND_TIMEOUT_S="2",
            RUNBELL_WEBHOOK_RATE_PER_S="1000",
            RUNBELL_WORKER_BATCH="20",
        )
        apis = start_apis(stack, env, tmp_path, 2)
        workers = start_workers(stack, env, tmp_path, 2)
        _, runtime_key = accounts.create_key(core, seeded.tenant_id, "runtime")
        with SignalLoad(apis, runtime_key, seeded.owner_email) as load:
            wait_for(
                lambda: load.count() >= 60 and len(rx.processed) >= 20,
                "a warm load",
                [*apis, *workers],
            )
            workers[0].kill()
            # What the dead worker held: the only deliveries that may arrive twice.
            in_flight = {i for i, r in webhook_rows(core).items() if r["status"] == "sending"}
            wait_for(lambda: load.count() >= 120, "load after a worker died", [*apis, workers[1]])
            apis[0].kill()
            wait_for(lambda: load.count() >= 180, "load after an API died", [apis[1], workers[1]])
        total = sum(1 for s in load.sent if s.status == 200)
        wait_for(
            lambda: statuses(core) == {"accepted": total},
            f"{total} deliveries accepted",
            [workers[1]],
            timeout=scaled(120),
        )
        assert workers[1].stop() == 0
        assert apis[1].stop() == 0
        for proc in (*apis, *workers):
            clean(proc.output)

    assert load.errors == [], load.errors[:5]
    assert {s.status for s in load.sent} == {200}
    # Every answered signal is stored once; a retried one was answered "duplicate".
    with core.db.read() as conn:
        stored = Counter(
            conn.execute(
                sa.select(t.inbound_events.c.event_id).where(
                    t.inbound_events.c.tenant_id == seeded.tenant_id
                )
            ).scalars()
        )
        completed = set(
            conn.execute(
                sa.select(t.runs.c.run_id).where(
                    t.runs.c.tenant_id == seeded.tenant_id, t.runs.c.state == "completed"
                )
            ).scalars()
        )
    assert stored == Counter(s.event_id for s in load.sent), "each signal stored exactly once"
    assert completed == {s.run_id for s in load.sent}
    assert {s.outcome for s in load.sent} <= {"applied", "duplicate"}
    # One run.finished delivery per completed run, each accepted once, each message
    # processed once by the receiver.
    rows = webhook_rows(core)
    assert len(rows) == len(completed) == total
    assert sorted(rx.processed) == sorted(rows)
    arrivals = rx.ids()
    twice = {i for i, n in arrivals.items() if n > 1}
    assert twice <= in_flight, f"sent twice without a crash in between: {sorted(twice - in_flight)}"
    assert max(arrivals.values()) <= 2
    for delivery_id in twice:
        first, again = rx.of(delivery_id)
        assert first.body == again.body and first.verified and again.verified
    dead, alive = (w.accepted_ids() for w in workers)
    assert dead and alive, f"both workers took part ({len(dead)} and {len(alive)})"
    assert not set(dead) & set(alive), "no message recorded as sent by both workers"


# --- a transaction held open elsewhere ------------------------------------------------------

# The brief's minute, shortened: still over three lease periods (RUNBELL_WORKER_LEASE_S=3).
HOLD_S = 10.0


def test_a_transaction_held_open_does_not_stop_the_queue(
    tmp_path: Path, pg_url: str, core: Core
) -> None:
    """Another connection sits idle in a transaction for HOLD_S, holding a snapshot of the
    outbox, a row lock on one queued delivery and one on another tenant's row. Deliveries
    committed meanwhile still go out (SKIP LOCKED passes the locked one by); the locked one
    goes once the transaction ends."""
    secret = new_secret()
    other = make_tenant(core, "bystander")
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        seeded = seed(core, rx.url, secret, runs=1)
        (locked,) = seeded.delivery_ids
        engine = sa.create_engine(pg_url)
        stack.callback(engine.dispose)
        hold = stack.enter_context(engine.connect())
        hold.execute(sa.text("SELECT count(*) FROM deliveries"))
        hold.execute(sa.text("SELECT id FROM deliveries WHERE id = :id FOR UPDATE"), {"id": locked})
        hold.execute(
            sa.text("SELECT id FROM tenants WHERE id = :id FOR UPDATE"), {"id": other.tenant_id}
        )
        started = hold.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        env = child_env(tmp_path, pg_url, RUNBELL_WORKER_LEASE_S="3")
        worker = stack.enter_context(WorkerProc(env, tmp_path / "worker.log"))
        # New work keeps committing while the hold lasts, and keeps going out.
        held_until = time.monotonic() + HOLD_S
        n = 0
        while time.monotonic() < held_until:
            n += 1
            seeded.complete(range(n, n + 1))
            wait_for(
                lambda n=n: statuses(core) == {"accepted": n, "queued": 1},
                f"delivery {n} to go out past the locked one",
                [worker],
                timeout=WAIT,
            )
            time.sleep(0.5)
        with core.db.read() as conn:
            state = conn.execute(
                sa.text("SELECT state FROM pg_stat_activity WHERE pid = :pid"), {"pid": started}
            ).scalar_one()
        assert state == "idle in transaction", "the hold lasted through the drain"
        assert locked not in rx.ids()
        hold.rollback()
        wait_for(lambda: statuses(core) == {"accepted": n + 1}, "the held one after", [worker])
        assert worker.stop() == 0
        clean(worker.output)

    assert rx.ids() == Counter(dict.fromkeys(seeded.delivery_ids, 1))


# --- PgBouncer in transaction mode ------------------------------------------------------------


def through_pgbouncer(stack: ExitStack, pg_url: str) -> dict[str, str]:
    """Start a private PgBouncer (transaction mode) in front of ``pg_url``'s server; the
    settings docs/operations.md gives for it: the pooled URL, LISTEN on the direct one, no
    server-side prepared statements (PgBouncer < 1.21)."""
    try:
        bouncer = stack.enter_context(PgBouncer.start(pg_url, pool_size=10))
    except PgBouncerUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":  # .ci/run installs it: never skipped
            pytest.fail(f"CI requires PgBouncer: {exc}")
        pytest.skip(str(exc))
    return {
        "RUNBELL_DATABASE_URL": bouncer.url(pg_url),
        "RUNBELL_LISTEN_DATABASE_URL": pg_url,
        "RUNBELL_DATABASE_PREPARED_STATEMENTS": "false",
    }


@pytest.mark.slow
def test_two_apis_and_two_workers_through_pgbouncer_in_transaction_mode(
    tmp_path: Path, pg_url: str, core: Core
) -> None:
    """The production topology of docs/operations.md: two APIs and two workers (with the
    scheduler) through one PgBouncer in transaction mode with ten server connections for
    up to 4 x 33 clients, LISTEN on the direct URL. Every signal is stored once and every
    message delivered once, with no database error in any log."""
    secret = new_secret()
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        seeded = seed(core, rx.url, secret, runs=0)
        env = child_env(tmp_path, pg_url, RUNBELL_WEBHOOK_RATE_PER_S="1000")
        env.update(through_pgbouncer(stack, pg_url))
        apis = start_apis(stack, env, tmp_path, 2)
        workers = [SchedulerProc(env, tmp_path / f"worker{n}.log") for n in (1, 2)]
        start_all(stack, list(workers))
        _, runtime_key = accounts.create_key(core, seeded.tenant_id, "runtime")
        with SignalLoad(apis, runtime_key, seeded.owner_email) as load:
            wait_for(lambda: load.count() >= 150, "150 signals", [*apis, *workers])
        total = load.count()
        wait_for(
            lambda: statuses(core) == {"accepted": total},
            f"{total} deliveries accepted",
            [*apis, *workers],
        )
        for proc in (*apis, *workers):
            assert proc.stop() == 0
            clean(proc.output)
            assert "prepared statement" not in proc.output
            assert "database.unavailable" not in proc.output, proc.output[-3000:]

    assert load.errors == [], load.errors[:5]
    assert {(s.status, s.outcome) for s in load.sent} == {(200, "applied")}
    with core.db.read() as conn:
        stored = Counter(
            conn.execute(
                sa.select(t.inbound_events.c.event_id).where(
                    t.inbound_events.c.tenant_id == seeded.tenant_id
                )
            ).scalars()
        )
    assert stored == Counter(s.event_id for s in load.sent)
    assert rx.ids() == Counter(dict.fromkeys(webhook_rows(core), 1)), "each exactly once"


# --- two schedulers -------------------------------------------------------------------------

RUNS = 8
CHECKS = 4


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_two_schedulers_run_each_sweep_once(tmp_path: Path, pg_url: str, route: str) -> None:
    """Two `runbell worker --scheduler` processes ticking every 0.1 s over mismatches due
    every 0.5 s: each re-check runs once (one state-reader call each, counted by the
    runtime's own endpoint and by the mismatch row), and each escalation alerts once.
    Also through PgBouncer in transaction mode: the advisory lock that elects the leader is
    taken and released in one transaction, so it holds there too."""
    from fastapi.testclient import TestClient

    from runbell.app import create_app
    from tests.integration.test_reconcile import RuntimeStub, advisory_source, claim, start_run

    settings = make_settings(
        tmp_path, pg_url, mismatch_backoff_s=(0.5,), mismatch_max_checks=CHECKS
    )
    core = build(settings, migrate=False)
    creds = make_tenant(core)
    with ExitStack() as stack:
        env = child_env(
            tmp_path,
            pg_url,
            RUNBELL_SCHEDULER_INTERVAL_S="0.1",
            RUNBELL_MISMATCH_BACKOFF_S="0.5",
            RUNBELL_MISMATCH_MAX_CHECKS=str(CHECKS),
        )
        if route == "pgbouncer":
            env.update(through_pgbouncer(stack, pg_url))
        runtime = stack.enter_context(RuntimeStub())
        client = stack.enter_context(TestClient(create_app(core, bridge=False)))
        stack.callback(core.db.dispose)
        _, auth = advisory_source(client, core, creds, runtime.url_template)
        schedulers = [SchedulerProc(env, tmp_path / f"scheduler{n}.log") for n in (1, 2)]
        start_all(stack, list(schedulers))
        for n in range(RUNS):
            run_id = f"r{n}"
            start_run(client, auth, creds, run_id)
            runtime.say(run_id, "working")  # the runtime never agrees: escalates
            assert claim(client, auth, f"e{n}", "completed", run_id)["outcome"] == "mismatch"

        def escalated() -> int:
            with core.db.read() as conn:
                return int(
                    conn.execute(
                        sa.select(sa.func.count())
                        .select_from(t.mismatches)
                        .where(t.mismatches.c.status == "escalated")
                    ).scalar_one()
                )

        wait_for(lambda: escalated() == RUNS, "every mismatch to escalate", schedulers)
        time.sleep(1.5)  # three more re-check periods: nothing further may run
        for proc in schedulers:
            assert proc.stop() == 0
            clean(proc.output)

        with core.db.read() as conn:
            checks = [r[0] for r in conn.execute(sa.select(t.mismatches.c.checks)).all()]
            alerts = Counter(
                conn.execute(
                    sa.select(t.notifications.c.run_id).where(
                        t.notifications.c.attention_type == "mismatch"
                    )
                ).scalars()
            )
        reads = Counter(path.removeprefix("/runs/") for path in runtime.requests)

    assert checks == [CHECKS] * RUNS
    # The signal's own read, then one per re-check: a sweep run twice would read twice.
    assert reads == Counter({f"r{n}": 1 + CHECKS for n in range(RUNS)})
    assert alerts == Counter({f"r{n}": 1 for n in range(RUNS)})
