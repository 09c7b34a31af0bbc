"""The SDK (runbell.client) against a real running Runbell: the ``live`` uvicorn server on
SQLite and PostgreSQL, and runbell.testing.server(). Answers come through the API as the
owner, from another thread; a dropped connection comes from a real loopback TCP proxy."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

import runbell.testing
from runbell.client import (
    AsyncClient,
    Client,
    ConfigError,
    Conflict,
    ConnectionFailed,
    Event,
    FeedReset,
    NotApproved,
    NotFound,
    RetryPolicy,
    ValidationFailed,
    load_config,
    write_config,
)
from runbell.client.config import ClientConfig
from runbell.flows import sweeps
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, add_user
from tests.conftest import LiveServer, bearer
from tests.sdk import Connect
from tests.timeouts import WAIT

FAST = RetryPolicy(attempts=4, base_delay=0.05, max_delay=0.2)


@pytest.fixture
def rb(live: LiveServer, creds: TenantCreds, sdk: Connect) -> Iterator[Client]:
    """The sync client, then the async one through the same surface (tests/sdk.py)."""
    with sdk(live.url, creds.runtime_key, creds.owner_email, retry=FAST, timeout=WAIT) as client:
        yield client


@pytest.fixture
def sync_rb(live: LiveServer, creds: TenantCreds) -> Iterator[Client]:
    """The sync client alone, for what has no async form with the same call (a decorator
    of plain functions: the async one wraps coroutine functions, tested below)."""
    with Client(live.url, creds.runtime_key, creds.owner_email, retry=FAST, timeout=WAIT) as client:
        yield client


class Answerer(threading.Thread):
    """Another thread, as the owner through the API: waits for the run's pending request,
    then answers it bound to the versions it saw (the web app's way). ``join`` re-raises
    what went wrong in it."""

    def __init__(self, url: str, token: str, run_id: str, decision: str, value: str | None) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.run_id = url, token, run_id
        self.decision, self.value = decision, value
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._answer()
        except BaseException as exc:  # reported by join(), in the test's own thread
            self.error = exc

    def _answer(self) -> None:
        with httpx.Client(base_url=self.url, headers=bearer(self.token), timeout=WAIT) as http:
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                run = http.get(f"/v1/runs/{self.run_id}").json()
                pending = run.get("pending_input_request")
                if pending:
                    body: dict[str, Any] = {
                        "decision": self.decision,
                        "expected_run_version": run["version"],
                        "expected_request_version": pending["version"],
                    }
                    if self.value is not None:
                        body["value"] = self.value
                    r = http.post(
                        f"/v1/input-requests/{pending['id']}/responses",
                        json=body,
                        headers={"Idempotency-Key": f"ans-{pending['id']}"},
                    )
                    assert r.status_code == 200, r.text
                    return
                time.sleep(0.02)
            raise AssertionError("no pending input request appeared")

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error


def answer_when_pending(
    url: str, token: str, run_id: str, decision: str, value: str | None = None
) -> Answerer:
    thread = Answerer(url, token, run_id, decision, value)
    thread.start()
    return thread


def transitions(core: Core, tenant_id: str, run_id: str) -> list[dict[str, Any]]:
    q = sa.select(t.transitions).where(
        t.transitions.c.tenant_id == tenant_id, t.transitions.c.run_id == run_id
    )
    with core.db.read() as conn:
        return [dict(r._mapping) for r in conn.execute(q).all()]


class DroppingProxy:
    """A loopback TCP proxy to ``target``. While ``drop_next`` is set, the next connection
    whose request reached the server and began to be answered is closed before any byte
    of that answer reaches the client: the server applied it, the client saw an error."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.drop_next = False
        self.dropped = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)

        def pump_up() -> None:
            try:
                while data := client.recv(65536):
                    upstream.sendall(data)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)

        threading.Thread(target=pump_up, daemon=True).start()
        try:
            while data := upstream.recv(65536):
                with self._lock:
                    drop, self.drop_next = self.drop_next, False
                    self.dropped += drop
                if drop:
                    return
                client.sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def proxy(live: LiveServer) -> Iterator[DroppingProxy]:
    p = DroppingProxy(live.port)
    yield p
    p.close()


# --- configuration ---------------------------------------------------------------------


def test_config_env_wins_over_the_file_written_0600(tmp_path: Any) -> None:
    path = tmp_path / "runbell" / "config.toml"
    write_config(ClientConfig("http://file.example:1/", "rbk_file", "file@x.test"), path)
    assert path.stat().st_mode & 0o777 == 0o600
    from_file = load_config(environ={"RUNBELL_CONFIG": str(path)})
    assert from_file == ClientConfig("http://file.example:1", "rbk_file", "file@x.test")
    env = {"RUNBELL_CONFIG": str(path), "RUNBELL_KEY": "rbk_env"}
    assert load_config(environ=env) == ClientConfig(
        "http://file.example:1", "rbk_env", "file@x.test"
    )
    with pytest.raises(ConfigError, match="RUNBELL_URL and RUNBELL_KEY not set"):
        load_config(environ={"RUNBELL_CONFIG": str(tmp_path / "none.toml")})


# --- runs, signals, errors -------------------------------------------------------------


def test_run_signal_progress_and_problem_errors(rb: Client, creds: TenantCreds) -> None:
    run = rb.put_run("sdk-1", title="SDK run", state="working", notify_on_complete=True)
    assert (run.state, run.title, run.owner) == ("working", "SDK run", creds.owner_id)
    progressed = rb.progress("sdk-1", "step 1", {"done": 1, "total": 2})
    assert progressed.accepted and progressed.run.progress
    assert progressed.run.progress["message"] == "step 1"
    done = rb.signal("sdk-1", "completed", reason="all good", report={"iterations": 3})
    assert (done.outcome, done.run.state, done.run.stop_reason) == (
        "applied",
        "completed",
        "all good",
    )
    again = rb.signal("sdk-1", "completed", event_id=done.event_id)
    assert (again.outcome, again.original_outcome) == ("duplicate", "applied")
    with pytest.raises(Conflict) as conflict:
        rb.put_run("sdk-1", title="edited after the end")
    assert conflict.value.status == 409
    assert conflict.value.current["state"] == "completed"
    assert conflict.value.type == "https://runbell.dev/problems/conflict"
    with pytest.raises(NotFound) as missing:
        rb.get_run("no-such-run")
    assert missing.value.detail == "no run 'no-such-run'"


def test_the_default_owner_applies_to_new_runs_only(
    rb: Client, live: LiveServer, core: Core, creds: TenantCreds, tmp_path: Any, sdk: Connect
) -> None:
    bob_id, _ = add_user(core, creds.tenant_id, "bob@acme.test")
    assert rb.put_run("own-1", title="Mine").owner == creds.owner_id
    with sdk(live.url, creds.runtime_key, "bob@acme.test", retry=FAST, timeout=WAIT) as bobs:
        assert bobs.put_run("own-1", title="Renamed").owner == creds.owner_id
        assert bobs.put_run("own-2").owner == bob_id
        assert bobs.put_run("own-1", owner="bob@acme.test").owner == bob_id
    nobody = tmp_path / "none.toml"
    with (
        sdk(live.url, creds.runtime_key, environ={}, config_path=nobody) as unowned,
        pytest.raises(ValidationFailed) as refused,
    ):
        unowned.put_run("own-3")
    assert refused.value.field == "owner"


def test_connection_dropped_mid_request_is_retried_once_with_the_same_event_id(
    live: LiveServer, creds: TenantCreds, core: Core, proxy: DroppingProxy, sdk: Connect
) -> None:
    with sdk(proxy.url, creds.runtime_key, creds.owner_email, retry=FAST, timeout=WAIT) as client:
        client.put_run("drop-1", state="working")
        before = len(transitions(core, creds.tenant_id, "drop-1"))
        proxy.drop_next = True
        result = client.signal("drop-1", "completed", reason="done")
    assert proxy.dropped == 1
    # The first attempt was applied by the server; the retry reused its event id.
    assert (result.outcome, result.original_outcome) == ("duplicate", "applied")
    assert result.run.state == "completed"
    after = transitions(core, creds.tenant_id, "drop-1")
    assert len(after) == before + 1
    assert after[-1]["to_state"] == "completed"


def test_a_server_that_never_answers_is_connection_failed(sdk: Connect) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    with (
        sdk(f"http://127.0.0.1:{port}", "rbk_x", retry=FAST) as client,
        pytest.raises(ConnectionFailed, match="cannot reach Runbell"),
    ):
        client.get_run("x")


def test_503_is_retried_honouring_retry_after(sdk: Connect) -> None:
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        if len(calls) == 1:
            return httpx.Response(
                503,
                headers={"Retry-After": "0"},
                json={"type": "x/database-unavailable", "status": 503, "detail": "busy"},
            )
        return httpx.Response(200, json={"run_id": "r", "state": "working", "version": 1})

    with sdk(
        "http://runbell.invalid", "rbk_x", transport=httpx.MockTransport(handler), retry=FAST
    ) as client:
        assert client.get_run("r").state == "working"
    assert len(calls) == 2


# --- ask -------------------------------------------------------------------------------


def test_ask_answered_by_the_owner_through_the_api(
    rb: Client, live: LiveServer, creds: TenantCreds
) -> None:
    rb.put_run("ask-1", state="working")
    helper = answer_when_pending(live.url, creds.owner_token, "ask-1", "approve")
    answer = rb.ask("ask-1", "Push to main?", details={"cmd": "git push"}, timeout=WAIT)
    helper.join()
    assert answer.outcome == "answered" and answer.approved
    assert answer.answered_by == creds.owner_id
    assert rb.get_run("ask-1").state == "working"


def test_ask_choice_returns_the_value(rb: Client, live: LiveServer, creds: TenantCreds) -> None:
    rb.put_run("ask-2", state="working")
    helper = answer_when_pending(live.url, creds.owner_token, "ask-2", "answer", "window")
    answer = rb.ask("ask-2", "Which?", kind="choice", options=["online", "window"], timeout=WAIT)
    helper.join()
    assert (answer.outcome, answer.decision, answer.value) == ("answered", "answer", "window")


def test_ask_timeout_and_expiry(rb: Client) -> None:
    rb.put_run("ask-3", state="working")
    timed_out = rb.ask("ask-3", "Anyone?", timeout=0.5)
    assert timed_out.outcome == "timeout" and not timed_out.approved
    assert rb.get_input_request(timed_out.request_id).state == "pending"
    expired = rb.ask("ask-3", "Quick?", expires_in=1, timeout=WAIT)
    assert expired.outcome == "expired"


def test_ask_superseded_by_a_newer_request(rb: Client) -> None:
    """Found whether the newer request lands before or after the waiter's cursor."""
    rb.put_run("ask-4", state="working")
    first = rb.open_input_request("ask-4", summary="First?", request_id="first")
    result: list[Any] = []
    waiter = threading.Thread(
        target=lambda: result.append(rb.wait_for_answer("first", timeout=WAIT)), daemon=True
    )
    waiter.start()
    rb.open_input_request("ask-4", summary="Second?", request_id="second")
    waiter.join(WAIT)
    assert first.created
    assert result and result[0].outcome == "superseded"


# --- await_run and watch ---------------------------------------------------------------


def test_await_run_returns_the_terminal_run(rb: Client) -> None:
    rb.put_run("wait-1", state="working")
    assert rb.await_run("wait-1", timeout=0.3).state == "working"
    timer = threading.Timer(0.3, lambda: rb.signal("wait-1", "failed", reason="broke"))
    timer.start()
    run = rb.await_run("wait-1", timeout=WAIT)
    timer.join()
    assert (run.state, run.terminal, run.stop_reason) == ("failed", True, "broke")


def test_watch_resumes_and_recovers_from_an_expired_cursor(
    rb: Client, core: Core, clock: Clock
) -> None:
    clock.freeze()
    head = rb.head_cursor()
    rb.put_run("watch-1", state="working")
    rb.progress("watch-1", "hello")
    feed = rb.watch(after=head, wait=1)
    first, second = next(feed), next(feed)
    assert isinstance(first, Event) and first.type == "run.created"
    assert isinstance(second, Event) and second.type == "run.progress"
    # Resuming from the first event's cursor yields the second again.
    again = next(rb.watch(after=first.id, wait=1))
    assert isinstance(again, Event) and again.id == second.id
    # Retention prunes both: the cursor is now older than the feed (410).
    clock.advance(core.settings.feed_retention_s + 86400)
    rb.progress("watch-1", "kept")
    assert sweeps.prune(core, clock()) >= 2
    resumed = rb.watch(after=first.id, wait=1)
    reset = next(resumed)
    assert isinstance(reset, FeedReset)
    assert [r.run_id for r in reset.snapshot.runs] == ["watch-1"]
    rb.progress("watch-1", "after the snapshot")
    following = next(resumed)
    assert isinstance(following, Event) and following.data["message"] == "after the snapshot"


# --- client.run and requires_approval --------------------------------------------------


def test_run_block_reports_working_then_completed(rb: Client) -> None:
    with rb.run("block-1", title="Nightly", notify_on_complete=True) as run:
        assert rb.get_run("block-1").state == "working"
        run.progress("half way", {"done": 1, "total": 2})
        run.report = {"summary": "synced 2 tables"}
    finished = rb.get_run("block-1")
    assert (finished.state, finished.title) == ("completed", "Nightly")
    assert finished.report and finished.report["summary"] == "synced 2 tables"


def test_run_block_on_an_exception_reports_failed_and_reraises(rb: Client) -> None:
    secret = "token=abc123"

    def explode() -> None:
        local_secret = secret  # a local that must never be reported
        raise ValueError(f"bad input\n{local_secret}")

    with pytest.raises(ValueError, match="bad input"), rb.run("block-2", title="Boom"):
        explode()
    failed = rb.get_run("block-2")
    assert failed.state == "failed"
    assert failed.stop_reason == "raised ValueError"  # public: the class only
    assert failed.error and failed.error["code"] == "ValueError"
    assert failed.error["message"] == "bad input"  # the first line, no traceback
    assert secret not in str(failed.raw)
    assert "Traceback" not in str(failed.raw)


def test_requires_approval_runs_only_when_approved_and_records_the_call(
    sync_rb: Client, live: LiveServer, creds: TenantCreds
) -> None:
    rb = sync_rb
    calls: list[str] = []

    @rb.requires_approval(summary="Push the branch?", timeout=WAIT)
    def push(branch: str) -> str:
        calls.append(branch)
        return f"pushed {branch}"

    with rb.run("approve-1", title="Release"):
        helper = answer_when_pending(live.url, creds.owner_token, "approve-1", "approve")
        assert push("main") == "pushed main"
        helper.join()
        request = rb.get_run("approve-1")
        helper = answer_when_pending(live.url, creds.owner_token, "approve-1", "reject")
        with pytest.raises(NotApproved) as refused:
            push("dev")
        helper.join()
    assert calls == ["main"]
    assert refused.value.answer.rejected
    ops = rb.operations("approve-1")
    assert [(o.intent, o.state) for o in ops] == [("push", "confirmed")]
    assert ops[0].target and ops[0].target["type"] == "function"
    assert ops[0].target["id"] == f"{__name__}.{push.__qualname__}"
    assert [h["state"] for h in ops[0].raw["history"]] == ["planned", "sent", "confirmed"]
    assert request.state == "working"
    assert rb.get_run("approve-1").outcome == "verified"


def test_requires_approval_needs_a_run(sync_rb: Client) -> None:
    rb = sync_rb

    @rb.requires_approval()
    def act() -> None:
        raise AssertionError("must not run")

    with pytest.raises(Exception, match="no run is given"):
        act()


# --- the async client ------------------------------------------------------------------


async def test_async_requires_approval_wraps_a_coroutine_function(
    live: LiveServer, creds: TenantCreds
) -> None:
    """The async client's decorator, for what the sync test above does with a plain
    function: it runs only when approved, inside a run block, and records the call."""
    calls: list[str] = []
    async with AsyncClient(
        live.url, creds.runtime_key, creds.owner_email, retry=FAST, timeout=WAIT
    ) as rb:

        @rb.requires_approval(summary="Deploy?", timeout=WAIT)
        async def deploy(env: str) -> str:
            calls.append(env)
            return f"deployed {env}"

        async with rb.run("async-approve", title="Release"):
            helper = answer_when_pending(live.url, creds.owner_token, "async-approve", "approve")
            assert await deploy("prod") == "deployed prod"
            await asyncio.to_thread(helper.join)
            helper = answer_when_pending(live.url, creds.owner_token, "async-approve", "reject")
            with pytest.raises(NotApproved):
                await deploy("dev")
            await asyncio.to_thread(helper.join)
        ops = await rb.operations("async-approve")
    assert calls == ["prod"]
    assert [(o.intent, o.state) for o in ops] == [("deploy", "confirmed")]


async def test_async_ask_round_trip_timeout_and_block(live: LiveServer, creds: TenantCreds) -> None:
    async with AsyncClient(
        live.url, creds.runtime_key, creds.owner_email, retry=FAST, timeout=WAIT
    ) as rb:
        await rb.put_run("async-1", state="working")
        helper = answer_when_pending(live.url, creds.owner_token, "async-1", "reject")
        answer = await rb.ask("async-1", "Delete the bucket?", timeout=WAIT)
        await asyncio.to_thread(helper.join)
        assert (answer.outcome, answer.decision, answer.rejected) == ("answered", "reject", True)
        timed_out = await rb.ask("async-1", "Still there?", timeout=0.5)
        assert timed_out.outcome == "timeout"

        with pytest.raises(RuntimeError):
            async with rb.run("async-2", title="async block") as run:
                await run.progress("working on it")
                raise RuntimeError("lost the lease")
        failed = await rb.get_run("async-2")
        assert (failed.state, failed.stop_reason) == ("failed", "raised RuntimeError")
        assert failed.error and failed.error["message"] == "lost the lease"

        async with rb.run("async-3", title="fine"):
            pass
        assert (await rb.await_run("async-3", timeout=WAIT)).state == "completed"


async def test_async_connection_dropped_mid_request_is_one_signal(
    live: LiveServer, creds: TenantCreds, core: Core, proxy: DroppingProxy
) -> None:
    async with AsyncClient(
        proxy.url, creds.runtime_key, creds.owner_email, retry=FAST, timeout=WAIT
    ) as rb:
        await rb.put_run("adrop-1", state="working")
        proxy.drop_next = True
        result = await rb.signal("adrop-1", "failed", reason="gave up")
    assert proxy.dropped == 1
    assert (result.outcome, result.original_outcome) == ("duplicate", "applied")
    states = [tr["to_state"] for tr in transitions(core, creds.tenant_id, "adrop-1")]
    assert states.count("failed") == 1


async def test_async_watch_yields_events(live: LiveServer, creds: TenantCreds) -> None:
    async with AsyncClient(live.url, creds.runtime_key, creds.owner_email, timeout=WAIT) as rb:
        head = await rb.head_cursor()
        await rb.put_run("awatch-1", state="working")
        feed = rb.watch(after=head, wait=1)
        event = await feed.__anext__()
        await feed.aclose()
    assert isinstance(event, Event) and (event.type, event.run_id) == ("run.created", "awatch-1")


# --- runbell.testing.server() ----------------------------------------------------------


def test_testing_server_is_a_whole_runbell_for_user_tests() -> None:
    with runbell.testing.server() as srv:
        with Client(srv.url, srv.runtime_key, srv.owner_email, timeout=WAIT) as rb:
            rb.put_run("user-1", title="Mine", state="working")
            rb.open_input_request("user-1", summary="Ship?", request_id="ship-1")
            answered = srv.answer("ship-1", "approve")
            assert answered["input_request"]["state"] == "answered"
            assert rb.wait_for_answer("ship-1", timeout=WAIT).approved
            # the scheduler runs: an expiring request ends as expired on the server too
            ended = rb.ask("user-1", "Quick?", request_id="quick-1", expires_in=0.5, timeout=WAIT)
            assert ended.outcome == "expired"
        r = httpx.get(f"{srv.url}/v1/notifications", headers=bearer(srv.owner_token), timeout=WAIT)
        assert r.status_code == 200 and r.json()["notifications"]
