"""PostgreSQL restarted under load: 503s with Retry-After, never 500, self-recovery, and
nothing that was answered 2xx is lost (DESIGN §2 invariant 12, §6 errors).

A private cluster (``tests.pgcluster``; the shared one is never touched) backs a real
``runbell serve`` process (API, delivery worker and scheduler), or, in the scale-out
shape, a ``runbell api`` and a separate ``runbell worker --scheduler``. Four threads send runs and
signals; the cluster is stopped mid-load, kept down until the API has answered some
requests with 503, and started again. Runbell is not restarted. Afterwards every run and
signal that got a 2xx answer is in the database, the worker still delivers, and the log
has one warning for the outage and one for its end, with no traceback.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from runbell.app import build
from runbell.signatures import new_secret
from runbell.store import endpoints
from runbell.store import tables as t
from runbell.testing import make_tenant
from tests.acceptance.processes import ApiProc, SchedulerProc, ServeProc, start_all
from tests.acceptance.receivers import Receiver
from tests.acceptance.test_worker_processes import WorkerProc, child_env, wait_for
from tests.conftest import IN_CI, make_settings
from tests.pgcluster import PgCluster, PgUnavailable
from tests.timeouts import WAIT

pytestmark = pytest.mark.postgres

THREADS = 4


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    try:
        pg = PgCluster.create()
    except PgUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI requires a PostgreSQL server installation: {exc}")
        pytest.skip(str(exc))
    with pg:
        yield pg


@dataclass(frozen=True)
class Answer:
    kind: str  # "put" | "signal"
    run_id: str
    event_id: str | None
    status: int
    headers: httpx.Headers
    body: Any
    phase: str  # what the cluster was doing when the answer arrived


class Load:
    """Threads that each create runs and move them to working, recording every answer."""

    def __init__(self, url: str, runtime_key: str, owner: str) -> None:
        self.url = url
        self.auth = {"Authorization": f"Bearer {runtime_key}"}
        self.owner = owner
        self.phase = "before"
        self.answers: list[Answer] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(THREADS)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=WAIT)

    def _record(self, kind: str, run_id: str, event_id: str | None, r: httpx.Response) -> None:
        try:
            body = r.json()
        except ValueError:
            body = r.text
        with self._lock:
            self.answers.append(
                Answer(kind, run_id, event_id, r.status_code, r.headers, body, self.phase)
            )

    def _run(self, n: int) -> None:
        with httpx.Client(base_url=self.url, headers=self.auth, timeout=WAIT) as client:
            i = 0
            while not self._stop.is_set():
                i += 1
                run_id, event_id = f"load-{n}-{i}", f"ev-{n}-{i}"
                try:
                    r = client.put(f"/v1/runs/{run_id}", json={"owner": self.owner})
                    self._record("put", run_id, None, r)
                    if r.is_success:
                        r = client.post(
                            f"/v1/runs/{run_id}/signals",
                            json={"event_id": event_id, "state": "working"},
                        )
                        self._record("signal", run_id, event_id, r)
                except httpx.HTTPError as exc:  # the server must always answer
                    with self._lock:
                        self.errors.append(f"{type(exc).__name__}: {exc}")

    def count(self, status: int | None = None, phase: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for a in self.answers
                if (status is None or a.status == status or (status == 2 and a.status < 300))
                and (phase is None or a.phase == phase)
            )


class Stream:
    """One SSE connection to the feed, opened before the outage and read until told to stop.

    ``events`` are (id, type, run_id) in arrival order; ``ended`` says whether the server
    closed the stream by itself (it should not: an outage is waited out, not hung up on).
    """

    def __init__(self, url: str, runtime_key: str, *, as_app: bool = False) -> None:
        self.url = url
        self.auth = {"Authorization": f"Bearer {runtime_key}"}
        if as_app:  # a person's app (with their user token): it counts as watching
            self.auth["X-Runbell-Client"] = "app"
        self.events: list[tuple[int, str, str | None]] = []
        self.ended = False
        self.error: str | None = None
        self.keepalives = 0  # `:` comment lines seen
        self.opened = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Stream:
        self._thread.start()
        assert self.opened.wait(WAIT), self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT)

    def _run(self) -> None:
        fields: dict[str, str] = {}
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(10, read=30)) as client,
                client.stream(
                    "GET", f"{self.url}/v1/events/stream?after=latest", headers=self.auth
                ) as r,
            ):
                assert r.status_code == 200
                self.opened.set()
                for line in r.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith(":"):
                        self.keepalives += 1
                        continue
                    if line:
                        name, _, value = line.partition(":")
                        fields[name] = value.strip()
                        continue
                    if "event" in fields and "data" in fields:
                        data = json.loads(fields["data"])
                        self.events.append((int(fields["id"]), fields["event"], data.get("run_id")))
                    fields = {}
                self.ended = True
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            self.opened.set()


@pytest.mark.parametrize("topology", ["serve", "api+worker"])
def test_postgres_restart_under_load_answers_503_and_recovers_losing_nothing(
    tmp_path: Path, cluster: PgCluster, topology: str
) -> None:
    """``serve``: one process does it all; ``api+worker``: the scale-out shape, a `runbell
    api` and a separate `runbell worker --scheduler`, each riding out the outage alone."""
    url = cluster.url()
    core = build(make_settings(tmp_path, url))  # migrates the private cluster
    creds = make_tenant(core)
    secret = new_secret()
    with Receiver(secret) as receiver, ExitStack() as stack:
        with core.db.transaction() as tx:
            endpoints.create(
                tx.conn,
                creds.tenant_id,
                tx.now,
                url=receiver.url,
                description="outage test",
                event_types=["run.finished"],
                sealed_secret=core.box.seal(secret),
                rate_limit_per_s=None,
            )
        core.db.dispose()

        env = child_env(
            tmp_path,
            url,
            RUNBELL_SCHEDULER_INTERVAL_S="0.2",
            RUNBELL_SSE_KEEPALIVE_S="0.5",
            RUNBELL_FEED_FALLBACK_POLL_S="0.5",
        )
        if topology == "serve":
            api: ApiProc = ServeProc(env, tmp_path / "serve.log")
            procs: list[WorkerProc] = [api]
        else:
            api = ApiProc(env, tmp_path / "api.log")
            procs = [api, SchedulerProc(env, tmp_path / "worker.log")]
        start_all(stack, procs)
        base = api.url
        pids = [p.proc.pid for p in procs if p.proc is not None]
        with (
            Stream(base, creds.runtime_key) as stream,
            Load(base, creds.runtime_key, creds.owner_email) as load,
        ):
            wait_for(lambda: load.count(2) >= 40, "a warm load", procs)
            cluster.stop("fast")
            load.phase = "down"
            wait_for(lambda: load.count(503, "down") >= 6, "503s while down", procs)
            # The open stream is not left silent while the database is away (a silent
            # stream is what a client or proxy times out): keep-alives go on.
            quiet_from = stream.keepalives
            wait_for(
                lambda: stream.keepalives >= quiet_from + 3,
                "keep-alives on the open stream while the database is down",
                procs,
            )
            cluster.start()
            load.phase = "after"
            wait_for(lambda: load.count(2, "after") >= 40, "successes after", procs)
            # The stream opened before the outage carries on with what committed after.
            after_runs = {a.run_id for a in load.answers if a.phase == "after" and a.status < 300}
            wait_for(
                lambda: any(run in after_runs for _, _, run in stream.events),
                "the open stream to deliver events committed after the restart",
                procs,
            )

        # The worker and the scheduler survived too: a run finished now is delivered.
        with httpx.Client(base_url=base, headers=load.auth, timeout=WAIT) as finish:
            made = finish.put("/v1/runs/final", json={"owner": creds.owner_email})
            assert made.is_success, made.text
            done = finish.post(
                "/v1/runs/final/signals",
                json={"event_id": "final-done", "state": "completed"},
            )
            assert done.status_code == 200, done.text
        wait_for(lambda: len(receiver.processed) == 1, "the run.finished webhook", procs)
        assert [p.proc.pid for p in procs if p.alive() and p.proc] == pids  # never restarted
        for p in procs:
            p.stop()

    assert load.errors == [], load.errors[:5]
    assert (stream.error, stream.ended) == (None, False)
    ids = [event_id for event_id, _, _ in stream.events]
    assert ids == sorted(set(ids)), "feed ids strictly increase on one stream"
    statuses = {a.status for a in load.answers}
    assert statuses <= {200, 201, 503}, statuses  # in particular, no 500
    unavailable = [a for a in load.answers if a.status == 503]
    assert unavailable, "the outage was never seen"
    for a in unavailable:
        assert a.headers["content-type"].startswith("application/problem+json")
        assert int(a.headers["retry-after"]) >= 1
        assert a.body["type"].endswith("/database-unavailable"), a.body
    assert load.count(2, "after") >= 40

    # Nothing committed lost: every 2xx run and signal is in the database.
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        stored_runs = set(
            conn.execute(
                sa.select(t.runs.c.run_id).where(t.runs.c.tenant_id == creds.tenant_id)
            ).scalars()
        )
        stored_events = set(
            conn.execute(
                sa.select(t.inbound_events.c.event_id).where(
                    t.inbound_events.c.tenant_id == creds.tenant_id
                )
            ).scalars()
        )
        working = set(
            conn.execute(
                sa.select(t.runs.c.run_id).where(
                    t.runs.c.tenant_id == creds.tenant_id, t.runs.c.state == "working"
                )
            ).scalars()
        )
    engine.dispose()
    answered_runs = {a.run_id for a in load.answers if a.kind == "put" and a.status < 300}
    answered_signals = [a for a in load.answers if a.kind == "signal" and a.status < 300]
    assert answered_runs <= stored_runs, sorted(answered_runs - stored_runs)[:10]
    assert {a.event_id for a in answered_signals} <= stored_events
    assert {a.run_id for a in answered_signals if a.body["outcome"] == "applied"} <= working

    # In each process, one warning when the outage started, one when it ended; never a
    # traceback.
    for p in procs:
        output = p.output
        assert "Traceback" not in output, output[-4000:]
        assert output.count("database.unavailable") == 1, output[-4000:]
        assert output.count("database.recovered") == 1, output[-4000:]
        for noise in ("api.unhandled", "tick_failed", "process_failed"):
            assert noise not in output, output[-4000:]
