"""The stream fan-out (``runbell.runtime.streams``): one feed read per commit however many
streams are open, each stream seeing exactly what the page query shows its principal
(tenant isolation, per-member run access, per-recipient notification events), streams
that fall behind the shared buffer catching up from the database without gap or repeat,
and keep-alives from the shared ticker at any interval.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.api.sse import FRAMING
from runbell.app import build
from runbell.domain.principal import Principal
from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.runtime.streams import Streams
from runbell.store import feed
from runbell.testing import TenantCreds, add_user, make_tenant
from tests.conftest import LiveServer, bearer, make_settings
from tests.integration.test_feed import all_events, put_run, signal, wait_until
from tests.timeouts import WAIT


def who(core: Core, token: str) -> Principal:
    found = accounts.authenticate(core, token)
    assert found is not None
    return found


def tenant_with_members(
    http: TestClient | httpx.Client, core: Core, creds: TenantCreds
) -> dict[str, str]:
    """Runs the owner alone sees, one naming a member, one the member owns, and an admin
    member: returns the tokens by name."""
    member = add_user(core, creds.tenant_id, "member@acme.test")[1]
    admin = add_user(core, creds.tenant_id, "boss@acme.test", "admin")[1]
    put_run(http, creds.runtime_key, "private", creds.owner_email, notify_on_complete=True)
    signal(http, creds.runtime_key, "private", "private-done", "completed")
    put_run(
        http,
        creds.runtime_key,
        "shared",
        creds.owner_email,
        notify_on_complete=True,
        authority={"users": ["member@acme.test"]},
    )
    signal(http, creds.runtime_key, "shared", "shared-done", "completed")
    put_run(http, creds.runtime_key, "mine", "member@acme.test", notify_on_complete=True)
    signal(http, creds.runtime_key, "mine", "mine-done", "completed")
    return {
        "runtime": creds.runtime_key,
        "admin key": creds.admin_key,
        "owner": creds.owner_token,
        "admin member": admin,
        "member": member,
    }


def test_python_visibility_is_the_page_query(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """The fan-out's filter (one read for everyone, filtered in Python) lets through exactly
    the events the per-principal SQL query returns, for every kind of principal."""
    tokens = tenant_with_members(client, core, creds)
    other = make_tenant(core, "other")
    put_run(client, other.runtime_key, "elsewhere", other.owner_email)
    tokens |= {"other tenant's owner": other.owner_token, "other runtime": other.runtime_key}
    for name, token in tokens.items():
        principal = who(core, token)
        users = (
            frozenset({principal.user_id})
            if feed.limited(principal) and principal.user_id
            else frozenset()
        )
        with core.db.read() as conn:
            page, _ = feed.read(conn, principal, 0, 500)
            _, everything, access = feed.read_tail(conn, principal.tenant_id, 0, 500, users)
        kept = [
            e["seq"]
            for e in everything
            if feed.visible(
                principal, e["user_id"], e["run_id"], access.get(e["run_id"], frozenset())
            )
        ]
        assert kept == [e["seq"] for e in page], name
        assert page, f"{name} should see something"


# --- many streams over HTTP --------------------------------------------------------------


def frames(raw: bytes) -> list[dict[str, list[str]]]:
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        fields: dict[str, list[str]] = {}
        for line in block.decode().split("\n"):
            if line:
                name, _, value = line.partition(":")
                fields.setdefault(name or "comment", []).append(value.removeprefix(" "))
        if fields:
            out.append(fields)
    return out


class Streams_:
    """Many SSE streams on one asyncio loop in a thread (one connection each)."""

    def __init__(self, url: str, tokens: list[str]) -> None:
        self.url = url
        self.tokens = tokens
        self.received: list[bytearray] = [bytearray() for _ in tokens]
        self.primed = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.error: BaseException | None = None

    async def _one(self, http: httpx.AsyncClient, i: int, started: list[int]) -> None:
        async with http.stream("GET", "/v1/events/stream", headers=bearer(self.tokens[i])) as r:
            assert r.status_code == 200
            async for chunk in r.aiter_bytes():
                self.received[i] += chunk
                if b"id:" in self.received[i] and i not in started:
                    started.append(i)
                    if len(started) == len(self.tokens):
                        self.primed.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        started: list[int] = []
        limits = httpx.Limits(max_connections=len(self.tokens) + 1)
        try:
            async with httpx.AsyncClient(base_url=self.url, timeout=WAIT, limits=limits) as http:
                tasks = [
                    asyncio.create_task(self._one(http, i, started))
                    for i in range(len(self.tokens))
                ]
                await self._stop.wait()
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        except BaseException as exc:
            self.error = exc
            self.primed.set()

    def __enter__(self) -> Streams_:
        self._thread.start()
        assert self.primed.wait(WAIT), "streams never primed"
        assert self.error is None, self.error
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=WAIT)

    def events(self, i: int) -> list[dict[str, Any]]:
        return [json.loads(f["data"][0]) for f in frames(bytes(self.received[i])) if "event" in f]


@pytest.fixture
def feed_statements(core: Core) -> Iterator[list[str]]:
    """Every statement on ``feed_events`` the process sends (``SELECT``/``INSERT``)."""
    seen: list[str] = []

    def count(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if "feed_events" in statement:
            seen.append(statement.lstrip().split(None, 1)[0].upper())

    sa.event.listen(core.db.engine, "before_cursor_execute", count)
    yield seen
    sa.event.remove(core.db.engine, "before_cursor_execute", count)


def test_many_streams_cost_one_feed_read_per_commit_and_see_only_their_own(
    core: Core, creds: TenantCreds, feed_statements: list[str]
) -> None:
    """60 streams of seven principals on one process: each commit is read from the feed
    once (not once per stream), and every stream gets exactly what the page query shows
    its principal, in order, once."""
    with LiveServer(core) as live, httpx.Client(base_url=live.url, timeout=WAIT) as http:
        tokens = tenant_with_members(http, core, creds)
        other = make_tenant(core, "other")
        tokens["other tenant"] = other.runtime_key
        tokens["other owner"] = other.owner_token
        names = [name for name in tokens for _ in range(60 // len(tokens) + 1)][:60]
        head = {
            n: int(
                http.get(
                    "/v1/events", params={"after": "latest"}, headers=bearer(tokens[n])
                ).json()["next_cursor"]
            )
            for n in tokens
        }
        with Streams_(live.url, [tokens[n] for n in names]) as streams:
            before = len(feed_statements)
            for i in range(4):
                put_run(
                    http,
                    creds.runtime_key,
                    f"s{i}",
                    creds.owner_email,
                    notify_on_complete=True,
                    authority={"users": ["member@acme.test"]} if i % 2 else {},
                )
                signal(http, creds.runtime_key, f"s{i}", f"s{i}-done", "completed")
                wait_until(
                    lambda i=i: all(
                        any(
                            e["run_id"] == f"s{i}" and e["type"] == "run.transitioned"
                            for e in streams.events(j)
                        )
                        for j, n in enumerate(names)
                        if n in ("runtime", "owner")
                    ),
                    "the commit to reach the streams",
                )
            put_run(http, other.runtime_key, "theirs", other.owner_email)
            wait_until(
                lambda: all(streams.events(j) for j, n in enumerate(names) if n == "other tenant"),
                "the other tenant's event",
            )
            window = feed_statements[before:]
            # A commit's feed write: an INSERT, or on PostgreSQL one ``WITH bump AS
            # (UPDATE tenants …), ins AS (INSERT INTO feed_events …)`` (store/db.py).
            reads = window.count("SELECT")
            commits = window.count("INSERT") + window.count("WITH")
            expected = {
                n: [e for e in all_events(http, t) if int(e["id"]) > head[n]]
                for n, t in tokens.items()
            }
            wait_until(
                lambda: all(
                    len(streams.events(j)) >= len(expected[n]) for j, n in enumerate(names)
                ),
                "every stream to be complete",
            )
        for j, n in enumerate(names):
            assert streams.events(j) == expected[n], n
    assert expected["member"] and expected["owner"] and expected["other tenant"]
    assert not any(e["run_id"] == "s0" for e in expected["member"])  # not named on s0
    # At most one read per commit that wrote feed events (an INSERT each), whatever the
    # number of streams (60 here); before the fan-out it was one per stream and commit.
    assert commits >= 9 and 0 < reads <= commits, (reads, commits)


# --- falling behind the buffer -----------------------------------------------------------


def test_a_stream_behind_the_buffer_catches_up_without_gap_or_repeat(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """With a buffer of 3 events, a stream that stops reading while 12 commits go by, and
    one that starts from ``earliest``, both get every event once, in order, then go on
    live from the buffer."""
    rt = who(core, creds.runtime_key)

    async def main() -> tuple[list[int], list[int], list[int]]:
        streams = Streams(
            core.db,
            core.hub,
            FRAMING,
            keepalive_s=60,
            recheck_s=60,
            fallback_s=0.1,
            buffer_events=3,
        )
        with core.db.read() as conn:
            head, _ = feed.bounds(conn, creds.tenant_id)
        slow = streams.subscribe(rt, head)
        for i in range(12):
            await asyncio.to_thread(put_run, client, creds.runtime_key, f"b{i}", creds.owner_email)
        await asyncio.sleep(0.3)  # the tail has read them all; slow never asked
        late = streams.subscribe(rt, 0)

        async def take(sub: Any, n: int) -> list[int]:
            ids: list[int] = []
            while len(ids) < n:
                chunk = await asyncio.wait_for(sub.next(), WAIT)
                ids += [int(f["id"][0]) for f in frames(chunk) if "event" in f]
            return ids

        got_slow = await take(slow, 12)
        got_late = await take(late, 12)
        await asyncio.to_thread(put_run, client, creds.runtime_key, "after", creds.owner_email)
        live_ids = await take(slow, 1)
        assert (await take(late, 1)) == live_ids
        slow.close()
        late.close()
        assert not streams.subscribers and not streams.tails
        return got_slow, got_late, live_ids

    got_slow, got_late, live_ids = asyncio.run(main())
    ids = [int(e["id"]) for e in all_events(client, creds.runtime_key)]
    assert got_slow == got_late == ids[:12]
    assert live_ids == ids[12:]


# --- keep-alives -------------------------------------------------------------------------


def test_sub_second_keep_alives_flow(db_url: str, tmp_path: Path) -> None:
    """RUNBELL_SSE_KEEPALIVE_S below one second still sends keep-alives (it was truncated to
    0, which turned them off: an idle stream then went silent and clients timed out)."""
    core = build(make_settings(tmp_path, db_url, sse_keepalive_s=0.2), migrate=False)
    try:
        creds = make_tenant(core)
        with LiveServer(core) as server, httpx.Client(base_url=server.url, timeout=WAIT) as http:
            with http.stream("GET", "/v1/events/stream", headers=bearer(creds.runtime_key)) as r:
                comments = 0
                for line in r.iter_lines():
                    if line.startswith(":"):
                        comments += 1
                        if comments == 3:
                            break
                assert comments == 3
            # The stream is forgotten once the client has gone.
            wait_until(
                lambda: not any(s.subscribers for s in list(core.hub.per_loop.values())),
                "the server to drop the closed stream",
            )
    finally:
        core.db.dispose()


def test_the_id_moves_past_unseen_events_with_the_next_keep_alive(
    db_url: str, tmp_path: Path
) -> None:
    """Events a stream may not see wake nothing and write nothing at once; its
    Last-Event-ID still moves past them, with the next keep-alive."""
    core = build(make_settings(tmp_path, db_url, sse_keepalive_s=0.3), migrate=False)
    try:
        creds = make_tenant(core)
        with LiveServer(core) as server, httpx.Client(base_url=server.url, timeout=WAIT) as http:
            put_run(http, creds.runtime_key, "r1", creds.owner_email, notify_on_complete=True)
            signal(http, creds.runtime_key, "r1", "r1-done", "completed")
            with http.stream("GET", "/v1/events/stream", headers=bearer(creds.runtime_key)) as r:
                lines = r.iter_lines()
                assert next(lines).startswith("retry:")
                inbox = http.get("/v1/notifications", headers=bearer(creds.owner_token)).json()
                (note,) = inbox["notifications"]
                acked = http.post(
                    f"/v1/notifications/{note['id']}/ack", headers=bearer(creds.owner_token)
                )
                assert acked.status_code == 200, acked.text
                head = all_events(http, creds.admin_key)[-1]
                assert head["type"] == "notification.closed"  # the owner's, not the runtime's
                ids = []
                for line in lines:
                    assert not line.startswith(("event:", "data:")), line
                    if line.startswith("id:"):
                        ids.append(line.removeprefix("id:").strip())
                        if ids[-1] == head["id"]:
                            break
                assert ids[-1] == head["id"]
    finally:
        core.db.dispose()


def test_a_commit_in_another_process_reaches_the_streams(db_url: str, tmp_path: Path) -> None:
    """On PostgreSQL a commit through server B reaches streams held by server A at once:
    A's tail is woken over LISTEN/NOTIFY (its fallback re-read is 30 s away)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("cross-process wake-up uses PostgreSQL LISTEN/NOTIFY; SQLite is one process")
    core_a = build(make_settings(tmp_path / "a", db_url, feed_fallback_poll_s=30), migrate=False)
    core_b = build(make_settings(tmp_path / "b", db_url, feed_fallback_poll_s=30), migrate=False)
    try:
        creds = make_tenant(core_a)
        with (
            LiveServer(core_a) as server_a,
            LiveServer(core_b) as server_b,
            httpx.Client(base_url=server_b.url, timeout=WAIT) as via_b,
        ):
            put_run(via_b, creds.runtime_key, "r1", creds.owner_email)
            # Both bridges connect in the background: wait until B's commits reach A's hub.
            deadline = time.monotonic() + WAIT
            while core_a.hub.head(creds.tenant_id) is None:
                assert time.monotonic() < deadline, "process A never heard of B's commits"
                r = via_b.post(
                    "/v1/runs/r1/progress",
                    json={"message": "warming up"},
                    headers=bearer(creds.runtime_key),
                )
                assert r.status_code == 202, r.text
                time.sleep(0.2)
            with Streams_(server_a.url, [creds.runtime_key] * 3) as streams:
                signal(via_b, creds.runtime_key, "r1", "r1-done", "completed")
                wait_until(
                    lambda: all(
                        any(e["type"] == "run.transitioned" for e in streams.events(i))
                        for i in range(3)
                    ),
                    "the commit on B to reach the streams on A",
                    timeout=WAIT,
                )
    finally:
        core_a.db.dispose()
        core_b.db.dispose()
