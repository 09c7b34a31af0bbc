"""`runbell worker` as real processes: SIGKILL mid-delivery, two workers on one database,
and the dead-letter commands (DESIGN §2 invariants 1, 12, 14; §5).

Each scenario seeds its database in-process (a tenant, a webhook endpoint subscribed to
``run.finished`` pointing at a local :class:`~tests.acceptance.receivers.Receiver`, and
runs completed through the core, so each run makes exactly one webhook delivery), then
runs ``runbell worker`` children against the same database and watches the receiver and
the rows. Every wait polls a condition with a deadline; children are killed in
``finally``.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from runbell.app import build
from runbell.channels.webhook import WebhookChannel
from runbell.dispatch.worker import Worker
from runbell.domain.principal import Principal
from runbell.flows import runs as runs_flow
from runbell.flows import signals
from runbell.flows.context import Core
from runbell.flows.signals import Signal
from runbell.outbound import safe_async_client
from runbell.signatures import new_secret
from runbell.store import accounts, endpoints
from runbell.store import tables as t
from runbell.testing import Clock, make_tenant
from tests.acceptance.receivers import Receiver
from tests.conftest import SECRET_KEY, make_settings
from tests.terminal import in_a_terminal
from tests.timeouts import WAIT, scaled

RUNBELL = str(Path(sys.executable).with_name("runbell"))
WAIT_S = scaled(60)
LEASE_S = "3"
ATTEMPTED = re.compile(r"delivery\.attempted\s.*\bdelivery_id=(\S+).*\boutcome=(\S+)")


# --- set-up --------------------------------------------------------------------------------


@dataclass
class Seeded:
    core: Core
    tenant_id: str
    endpoint_id: str
    secret: str
    owner_email: str
    source: dict[str, Any]

    @property
    def delivery_ids(self) -> list[str]:
        return sorted(webhook_rows(self.core))

    def complete(self, runs: range, threads: int = 1) -> None:
        """Drive each run to completed through the core: one webhook delivery each."""
        runtime = Principal(tenant_id=self.tenant_id, kind="key", role="runtime")

        def finish(i: int) -> None:
            runs_flow.put_run(
                self.core, runtime, f"run-{i}", {"owner": self.owner_email, "state": "working"}
            )
            res = signals.accept_signal(
                self.core,
                self.tenant_id,
                self.source,
                f"run-{i}",
                Signal(event_id=f"done-{i}", state="completed"),
            )
            assert res.outcome == "applied", res

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(finish, runs))


def seed(core: Core, receiver_url: str, secret: str, runs: int, threads: int = 1) -> Seeded:
    """Tenant ``acme``, one endpoint for ``run.finished`` and ``runs`` completed runs:
    one queued webhook delivery each."""
    creds = make_tenant(core)
    tenant_id = creds.tenant_id
    with core.db.transaction() as tx:
        endpoint_id = endpoints.create(
            tx.conn,
            tenant_id,
            tx.now,
            url=receiver_url,
            description="crash-test receiver",
            event_types=["run.finished"],
            sealed_secret=core.box.seal(secret),
            rate_limit_per_s=None,
        )
    with core.db.read() as conn:
        source = accounts.get_source(conn, tenant_id, accounts.api_source_id(conn, tenant_id))
    seeded = Seeded(core, tenant_id, endpoint_id, secret, creds.owner_email, source)
    seeded.complete(range(runs), threads)
    assert len(seeded.delivery_ids) == runs, "one run.finished delivery per completed run"
    return seeded


def webhook_rows(core: Core) -> dict[str, dict[str, Any]]:
    d = t.deliveries
    with core.db.read() as conn:
        rows = conn.execute(sa.select(d).where(d.c.channel == "webhook")).all()
    return {r.id: dict(r._mapping) for r in rows}


def statuses(core: Core) -> Counter[str]:
    d = t.deliveries
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(d.c.status, sa.func.count())
            .where(d.c.channel == "webhook")
            .group_by(d.c.status)
        ).all()
    return Counter({r[0]: int(r[1]) for r in rows})


def attempts(core: Core, delivery_id: str) -> list[tuple[int, str, int | None]]:
    a = t.delivery_attempts
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(a.c.attempt_no, a.c.outcome, a.c.status_code)
            .where(a.c.delivery_id == delivery_id)
            .order_by(a.c.attempt_no)
        ).all()
    return [(r[0], r[1], r[2]) for r in rows]


def attempt_counts(core: Core, outcome: str | None = None) -> Counter[str]:
    """Attempt rows per delivery (only those with ``outcome``, if given)."""
    a = t.delivery_attempts
    q = sa.select(a.c.delivery_id, sa.func.count()).group_by(a.c.delivery_id)
    if outcome is not None:
        q = q.where(a.c.outcome == outcome)
    with core.db.read() as conn:
        rows = conn.execute(q).all()
    return Counter({r[0]: int(r[1]) for r in rows})


# --- child processes -----------------------------------------------------------------------


def child_env(data_dir: Path, database_url: str, **extra: str) -> dict[str, str]:
    """A fresh shell's environment (no RUNBELL_* leaking in), sharing the test's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNBELL_")}
    env.update(
        RUNBELL_DATA_DIR=str(data_dir),
        RUNBELL_DATABASE_URL=database_url,
        RUNBELL_SECRET_KEY=SECRET_KEY,
        RUNBELL_OUTBOUND_ALLOW_HOSTS='["127.0.0.1"]',
        RUNBELL_WORKER_POLL_S="0.2",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class WorkerProc:
    """One `runbell worker` child; its output goes to a file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [RUNBELL, "worker"], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def ready(self) -> None:
        wait_for(lambda: "worker.started" in self.output, f"{self.log.name} to start", [self])

    def __enter__(self) -> WorkerProc:
        self.launch()
        self.ready()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last write."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=WAIT)

    def stop(self) -> int:
        """SIGTERM and wait: a clean stop exits 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WAIT_S)
        finally:
            self.kill()

    def accepted_ids(self) -> list[str]:
        """Delivery ids this worker logged as accepted (one line per recorded attempt)."""
        return [m[0] for m in ATTEMPTED.findall(self.output) if m[1] == "accepted"]


def start_workers(
    stack: ExitStack, env: dict[str, str], logs: Path, count: int
) -> list[WorkerProc]:
    """Launch ``count`` workers at the same moment, then wait until each runs."""
    workers = [WorkerProc(env, logs / f"worker{n}.log") for n in range(1, count + 1)]
    for w in workers:
        stack.callback(w.kill)
        w.launch()
    for w in workers:
        w.ready()
    return workers


def wait_for(
    condition: Callable[[], bool],
    what: str,
    workers: list[WorkerProc] | None = None,
    timeout: float = WAIT_S,
) -> None:
    """Poll ``condition`` until true; fail with the workers' output if it never is, or if
    a worker that should be running died."""
    deadline = time.monotonic() + timeout
    while not condition():
        dead = [w for w in workers or [] if not w.alive()]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(f"--- {w.log.name}\n{w.output[-4000:]}" for w in workers or [])
            reason = "a worker exited" if dead else f"not within {timeout:.0f}s"
            raise AssertionError(f"waiting for {what}: {reason}\n{logs}")
        # Ten checks a second: a check is a query (or a request) that costs the test, the
        # database and the children CPU, on two cores shared by six test workers.
        time.sleep(0.1)


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RUNBELL, *args], env=env, capture_output=True, text=True, timeout=scaled(120), check=False
    )


def clean(output: str) -> None:
    assert "Traceback" not in output, output[-4000:]
    assert "tick_failed" not in output, output[-4000:]
    assert "process_failed" not in output, output[-4000:]


@pytest.fixture
def sqlite_dead_letters(
    tmp_path: Path, sqlite_template: Path, core_for: Callable[..., Core]
) -> tuple[str, list[str]]:
    """A SQLite file with tenant ``acme`` and two webhook deliveries marked dead (for CLI
    checks that do not depend on how they died)."""
    db = tmp_path / "runbell.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    core = core_for(url)
    seeded = seed(core, "http://127.0.0.1:9/hook", new_secret(), runs=2)
    with core.db.transaction() as tx:
        tx.conn.execute(
            sa.update(t.deliveries)
            .where(t.deliveries.c.id.in_(seeded.delivery_ids))
            .values(status="dead", attempt_count=8, last_error="gave up after 8 attempts")
        )
    return url, seeded.delivery_ids


@pytest.fixture
def core_for(tmp_path: Path) -> Iterator[Callable[..., Core]]:
    """Build cores on the test's database; all are disposed afterwards."""
    built: list[Core] = []

    def make(url: str, **kwargs: Any) -> Core:
        core = build(make_settings(tmp_path, url), migrate=False, **kwargs)
        built.append(core)
        return core

    yield make
    for core in built:
        core.db.dispose()


# --- 1. killed after the claim, before the send was recorded -------------------------------


def test_kill_before_send_recorded_resends_once_after_the_lease(
    tmp_path: Path, db_url: str, core_for: Callable[..., Core]
) -> None:
    """SIGKILL while the request was never read: the next worker re-sends it once after
    the lease, same webhook-id, and every other delivery still arrives once."""
    core = core_for(db_url)
    secret = new_secret()
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        seeded = seed(core, rx.url, secret, runs=3)
        rx.hold_next_connection()
        env = child_env(tmp_path, db_url, RUNBELL_WORKER_LEASE_S=LEASE_S)
        # A long client timeout: the worker must still be inside its send when killed.
        first = stack.enter_context(
            WorkerProc({**env, "RUNBELL_OUTBOUND_TIMEOUT_S": "60"}, tmp_path / "first.log")
        )
        wait_for(
            lambda: rx.snapshot()[1] == 1 and statuses(core) == {"accepted": 2, "sending": 1},
            "one send stuck on a held connection, the two others accepted",
            [first],
        )
        rows = webhook_rows(core)
        stuck = next(i for i, r in rows.items() if r["status"] == "sending")
        assert rows[stuck]["claimed_by"] and rows[stuck]["lease_until"] is not None
        first.kill()
        clean(first.output)

        rx.release()  # the held connection is dropped unread: that request never arrived
        assert stuck not in rx.ids()
        second = stack.enter_context(WorkerProc(env, tmp_path / "second.log"))
        wait_for(lambda: statuses(core) == {"accepted": 3}, "the stuck delivery to go", [second])
        assert second.stop() == 0
        clean(second.output)

    assert rx.ids() == Counter(dict.fromkeys(seeded.delivery_ids, 1)), "each exactly once"
    (resent,) = rx.of(stuck)
    assert resent.webhook_id == stuck and resent.verified
    rows = webhook_rows(core)
    assert rows[stuck]["attempt_count"] == 2, "claimed twice: by the dead worker, then again"
    assert attempts(core, stuck) == [(2, "accepted", 200)]
    assert rows[stuck]["claimed_by"] is None and rows[stuck]["lease_until"] is None
    for other in set(seeded.delivery_ids) - {stuck}:
        assert rows[other]["attempt_count"] == 1
        assert attempts(core, other) == [(1, "accepted", 200)]
    assert second.accepted_ids() == [stuck], "the second worker sent only the orphan"


# --- 2. killed after the receiver accepted, before the worker recorded it -----------------


def test_kill_after_accept_before_record_redelivers_same_id_receiver_dedupes(
    tmp_path: Path, db_url: str, core_for: Callable[..., Core]
) -> None:
    """SIGKILL after the receiver took the message but before the 200 was recorded: it
    arrives again under the same webhook-id with the same bytes; dedupe sees one message."""
    core = core_for(db_url)
    secret = new_secret()
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        seeded = seed(core, rx.url, secret, runs=3)
        rx.hold_next_answer()
        env = child_env(tmp_path, db_url, RUNBELL_WORKER_LEASE_S=LEASE_S)
        first = stack.enter_context(
            WorkerProc({**env, "RUNBELL_OUTBOUND_TIMEOUT_S": "60"}, tmp_path / "first.log")
        )
        wait_for(
            lambda: len(rx.snapshot()[2]) == 1 and statuses(core) == {"accepted": 2, "sending": 1},
            "one answer held, the two others accepted",
            [first],
        )
        (held,) = rx.snapshot()[2]
        assert webhook_rows(core)[held]["status"] == "sending"
        first.kill()
        clean(first.output)

        rx.release()  # the 200 goes to a dead socket
        second = stack.enter_context(WorkerProc(env, tmp_path / "second.log"))
        wait_for(lambda: statuses(core) == {"accepted": 3}, "the redelivery", [second])
        assert second.stop() == 0
        clean(second.output)

    arrivals = rx.ids()
    assert arrivals[held] == 2, "sent again: the worker never learned it was accepted"
    assert arrivals == Counter({**dict.fromkeys(seeded.delivery_ids, 1), held: 2})
    assert sorted(rx.processed) == sorted(seeded.delivery_ids), "dedupe: one message each"
    before, after = rx.of(held)
    assert before.verified and after.verified
    assert before.body == after.body, "the payload is fixed at commit: identical bytes"
    assert int(after.timestamp) >= int(before.timestamp)
    rows = webhook_rows(core)
    assert rows[held]["attempt_count"] == 2
    assert attempts(core, held) == [(2, "accepted", 200)]
    assert second.accepted_ids() == [held]


def test_sigterm_lets_the_in_flight_send_finish_and_be_recorded(
    tmp_path: Path, db_url: str, core_for: Callable[..., Core]
) -> None:
    """SIGTERM while a send awaits its answer: the worker records the answer, then exits 0
    (nothing left `sending`, nothing to send again)."""
    core = core_for(db_url)
    secret = new_secret()
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        seeded = seed(core, rx.url, secret, runs=1)
        rx.hold_next_answer()
        worker = stack.enter_context(
            WorkerProc(child_env(tmp_path, db_url), tmp_path / "worker.log")
        )
        wait_for(lambda: len(rx.snapshot()[2]) == 1, "the answer to be held", [worker])
        assert worker.proc is not None
        worker.proc.send_signal(signal.SIGTERM)
        rx.release()
        assert worker.proc.wait(timeout=WAIT_S) == 0
        clean(worker.output)
        assert "worker.stopped" in worker.output

    (delivery_id,) = seeded.delivery_ids
    assert rx.ids() == Counter({delivery_id: 1})
    assert statuses(core) == {"accepted": 1}
    assert attempts(core, delivery_id) == [(1, "accepted", 200)]


def test_a_failing_delivery_does_not_log_the_endpoint_url(
    tmp_path: Path, sqlite_template: Path, core_for: Callable[..., Core]
) -> None:
    """A worker that cannot open the endpoint's secret (another RUNBELL_SECRET_KEY) logs
    the failure, but not the endpoint URL, whose path may be a capability token."""
    db = tmp_path / "runbell.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    core = core_for(url)
    token = "tok_do_not_leak_9f8e7d"
    with Receiver(new_secret()) as rx:
        (delivery_id,) = seed(core, f"{rx.url}/{token}", new_secret(), runs=1).delivery_ids
        env = child_env(tmp_path, url, RUNBELL_SECRET_KEY=Fernet.generate_key().decode())

        def reported() -> bool:
            # The end of the logged record (the whole traceback is written), or an error
            # recorded on the row.
            logged = "cannot be opened with" in worker.output
            return logged or bool(webhook_rows(core)[delivery_id]["last_error"])

        with WorkerProc(env, tmp_path / "worker.log") as worker:
            wait_for(reported, "the failure to be reported", [worker])
            worker.kill()
    assert rx.ids() == Counter(), "nothing can be signed, nothing is sent"
    assert token not in worker.output, worker.output[-3000:]
    assert token not in (webhook_rows(core)[delivery_id]["last_error"] or "")


def test_a_delivery_that_cannot_be_prepared_is_recorded_not_reclaimed_silently(
    tmp_path: Path, sqlite_template: Path, core_for: Callable[..., Core]
) -> None:
    """A delivery whose processing fails leaves a trace the operator can see (an attempt
    row and last_error), instead of cycling through `sending` on every lease."""
    db = tmp_path / "runbell.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    core = core_for(url)
    with Receiver(new_secret()) as rx:
        (delivery_id,) = seed(core, rx.url, new_secret(), runs=1).delivery_ids
        env = child_env(
            tmp_path,
            url,
            RUNBELL_SECRET_KEY=Fernet.generate_key().decode(),
            RUNBELL_WORKER_LEASE_S="1",
        )

        def settled_or_reclaimed() -> bool:
            row = webhook_rows(core)[delivery_id]
            tries = int(row["attempt_count"])
            return tries >= 3 or (tries > 0 and row["status"] != "sending")

        with WorkerProc(env, tmp_path / "worker.log") as worker:
            wait_for(settled_or_reclaimed, "the failure to settle or recur", [worker])
            worker.kill()
    row = webhook_rows(core)[delivery_id]
    assert row["last_error"], f"no error recorded: {row['status']}, {row['attempt_count']} tries"
    assert attempts(core, delivery_id), "no attempt row for a failed try"


# --- 3. two workers, one database, a thousand deliveries -----------------------------------


@pytest.mark.slow
def test_two_workers_deliver_each_message_exactly_once(
    tmp_path: Path, db_url: str, core_for: Callable[..., Core]
) -> None:
    """Two `runbell worker` processes drain a backlog and a stream of new commits: every
    delivery reaches the receiver exactly once, both take part, one accepted attempt each."""
    if db_url.startswith("sqlite"):
        pytest.skip(
            "several worker processes share PostgreSQL (DESIGN §5 scale-out); the embedded "
            "SQLite default runs one dispatcher inside `runbell serve`"
        )
    total = 1000
    core = core_for(db_url)
    secret = new_secret()
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        # Half a backlog to drain in batches, then the other half committed while both
        # workers run, so they also race for each freshly committed row.
        seeded = seed(core, rx.url, secret, runs=total // 2, threads=8)
        env = child_env(tmp_path, db_url, RUNBELL_WORKER_BATCH="20")
        workers = start_workers(stack, env, tmp_path, 2)
        seeded.complete(range(total // 2, total), threads=8)
        wait_for(
            lambda: statuses(core) == {"accepted": total},
            f"{total} deliveries accepted",
            workers,
            timeout=scaled(120),
        )
        assert [w.stop() for w in workers] == [0, 0]  # nothing more can arrive after this
        for w in workers:
            clean(w.output)

    arrivals = rx.ids()
    assert len(rx.arrivals) == total, f"{len(rx.arrivals) - total} duplicate sends"
    assert arrivals == Counter(dict.fromkeys(seeded.delivery_ids, 1))
    assert all(a.verified for a in rx.arrivals)
    once = Counter(dict.fromkeys(seeded.delivery_ids, 1))
    assert attempt_counts(core, "accepted") == once, "one accepted attempt recorded for each"
    # Tries that never reached the receiver (a refused connection on a loaded machine) may
    # add failed attempt rows; a second claim of a row would show as a second arrival.
    one, two = (w.accepted_ids() for w in workers)
    assert one and two, f"both workers took part ({len(one)} and {len(two)})"
    assert not set(one) & set(two)
    assert sorted(one + two) == seeded.delivery_ids


def test_lease_running_out_while_queued_behind_the_rate_limit_does_not_resend(
    tmp_path: Path, db_url: str, core_for: Callable[..., Core]
) -> None:
    """Two workers, a tenant rate limit slower than one batch: a claimed delivery whose
    lease runs out while it waits for its turn is still sent by one worker only."""
    if db_url.startswith("sqlite"):
        pytest.skip("several worker processes share PostgreSQL (DESIGN §5 scale-out)")
    core = core_for(db_url)
    secret = new_secret()
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret))
        seeded = seed(core, rx.url, secret, runs=20)
        # The lease stays above the send timeout, as the setting's help asks; the receiver
        # answers at once. Only the wait between claim and send is longer than the lease
        # (20 rows at 2/s: about 9 s).
        env = child_env(
            tmp_path,
            db_url,
            RUNBELL_WORKER_LEASE_S=LEASE_S,
            RUNBELL_OUTBOUND_TIMEOUT_S="2",
            RUNBELL_WEBHOOK_RATE_PER_S="2",
        )
        # Launched together: whichever claims first takes all 20, the other is up long
        # before that batch has gone out.
        workers = start_workers(stack, env, tmp_path, 2)
        wait_for(lambda: statuses(core) == {"accepted": 20}, "20 accepted", workers)
        assert [w.stop() for w in workers] == [0, 0]

    twice = sorted(i for i, n in rx.ids().items() if n > 1)
    assert not twice, f"{len(twice)} of 20 deliveries were sent by both workers"
    assert rx.ids() == Counter(dict.fromkeys(seeded.delivery_ids, 1))


# --- 4. dead letters: list and replay from the CLI ------------------------------------------


def drive_to_dead(core: Core, clock: Clock, expected: int) -> None:
    """An in-process worker on a frozen clock, moved through the whole retry schedule."""

    async def main() -> None:
        settings = core.settings
        async with safe_async_client(
            allow_hosts=settings.outbound_allow_hosts, timeout=WAIT
        ) as client:
            worker = Worker(core, {"webhook": WebhookChannel(client)}, rng=random.Random(7))
            for _ in range(20):
                await worker.run_once()
                if statuses(core) == {"dead": expected}:
                    return
                clock.advance(11 * 3600)  # past the longest step of the schedule (10 h ±20 %)
            raise AssertionError(f"not dead after 20 rounds: {statuses(core)}")

    asyncio.run(main())


def test_dead_letters_listed_and_replayed_from_the_cli(
    tmp_path: Path, db_url: str, core_for: Callable[..., Core]
) -> None:
    """`deliveries list --status dead` shows the dead letters; `deliveries replay --status
    dead` queues them again under the same ids, and a worker then delivers them."""
    clock = Clock()
    clock.freeze()
    core = core_for(db_url, clock=clock)
    secret = new_secret()
    env = child_env(tmp_path, db_url)
    with ExitStack() as stack:
        rx = stack.enter_context(Receiver(secret, status=500))
        seeded = seed(core, rx.url, secret, runs=3)
        drive_to_dead(core, clock, expected=3)
        ids = seeded.delivery_ids
        rows = webhook_rows(core)
        assert {r["attempt_count"] for r in rows.values()} == {8}
        assert all("gave up after 8 attempts" in (r["last_error"] or "") for r in rows.values())
        assert rx.ids() == Counter(dict.fromkeys(ids, 8)), "every retry under the same id"

        listed = run_cli(env, "deliveries", "list", "--tenant", "acme", "--status", "dead")
        assert listed.returncode == 0, listed.stderr
        clean(listed.stdout + listed.stderr)
        for delivery_id in ids:
            assert delivery_id in listed.stdout, listed.stdout
        # Piped: one tab-separated line per delivery (id, channel, status, …).
        assert listed.stdout.count("\twebhook\tdead\t") == 3, listed.stdout

        rx.status = 200
        replayed = run_cli(env, "deliveries", "replay", "--tenant", "acme", "--status", "dead")
        assert replayed.returncode == 0, replayed.stderr
        clean(replayed.stdout + replayed.stderr)
        assert "queued 3 again, 0 refused" in replayed.stdout
        assert "replaying" in replayed.stderr, "the progress bar is on stderr"
        assert statuses(core) == {"queued": 3}

        worker = stack.enter_context(WorkerProc(env, tmp_path / "worker.log"))
        wait_for(lambda: statuses(core) == {"accepted": 3}, "the replayed deliveries", [worker])
        assert worker.stop() == 0
        clean(worker.output)

    assert rx.ids() == Counter(dict.fromkeys(ids, 9)), "replayed under the same ids"
    assert sorted(rx.processed) == ids
    assert all(rx.of(i)[-1].verified for i in ids)
    with core.db.read() as conn:
        ep = endpoints.get(conn, seeded.tenant_id, seeded.endpoint_id)
    assert ep["status"] == "enabled" and ep["dead_streak"] == 0

    after = run_cli(env, "deliveries", "list", "--tenant", "acme", "--status", "dead")
    assert after.returncode == 0, after.stderr
    assert not any(i in after.stdout for i in ids), after.stdout


def test_dead_letter_list_shows_whole_ids_in_an_80_column_terminal(
    tmp_path: Path, sqlite_dead_letters: tuple[str, list[str]]
) -> None:
    """`runbell deliveries list` in a standard 80-column terminal prints every id whole."""
    url, ids = sqlite_dead_letters
    env = child_env(tmp_path, url, COLUMNS="80")
    listed = run_cli(env, "deliveries", "list", "--tenant", "acme", "--status", "dead")
    assert listed.returncode == 0, listed.stderr
    for delivery_id in ids:
        assert delivery_id in listed.stdout, listed.stdout


def deliveries_table(env: dict[str, str], columns: int) -> str:
    """`runbell deliveries list --tenant acme` as a terminal ``columns`` wide shows it."""
    code, text = in_a_terminal([RUNBELL, "deliveries", "list", "--tenant", "acme"], env, columns)
    assert code == 0, text
    return text


def test_deliveries_list_fits_an_80_column_terminal(
    tmp_path: Path, db_url: str, core_for: Callable[..., Core]
) -> None:
    """Issue 16 row 17: the table was unreadable at 80 columns. Every line fits, every id
    is whole (it is copied into `deliveries replay`), and the columns an operator acts on
    are there, the longest status and a long last error included."""
    core = core_for(db_url)
    seeded = seed(core, "http://127.0.0.1:9/hook", new_secret(), runs=3)
    ids = seeded.delivery_ids
    with core.db.transaction() as tx:
        tx.conn.execute(
            sa.update(t.deliveries)
            .where(t.deliveries.c.id.in_(ids))
            .values(
                status="delivery_unknown",
                attempt_count=8,
                last_error="the endpoint answered 500 Internal Server Error " + "x" * 200,
            )
        )
    shown = deliveries_table(child_env(tmp_path, db_url), 80)
    lines = [line for line in shown.splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    header = lines[0].split()
    assert header[:4] == ["id", "channel", "status", "tries"], lines[0]
    assert "last error" in lines[0]
    for delivery_id in ids:
        row = next(line for line in lines if delivery_id in line)
        assert row.split()[1:4] == ["webhook", "delivery_unknown", "8"], row
        assert "the endpoint" in row, row  # the last error, cut to what is left
    wide = deliveries_table(child_env(tmp_path, db_url), 140)
    assert "event / notification" in wide and "run.finished" in wide, wide


@pytest.mark.parametrize("command", ["list", "replay"])
def test_a_mistyped_status_is_refused(
    tmp_path: Path, sqlite_dead_letters: tuple[str, list[str]], command: str
) -> None:
    """`deliveries list|replay --status deadd` exits 2 and names the valid statuses."""
    url, _ = sqlite_dead_letters
    res = run_cli(
        child_env(tmp_path, url), "deliveries", command, "--tenant", "acme", "--status", "deadd"
    )
    assert res.returncode == 2, res.stdout
    assert "deadd" in res.stderr and "dead" in res.stderr.replace("deadd", "")
    assert "Traceback" not in res.stderr
