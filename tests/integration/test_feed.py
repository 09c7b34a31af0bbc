"""The event feed (DESIGN §6 "Event feed semantics", invariant 17): cursors, retention,
visibility, long-poll wake-ups (in-process and over LISTEN/NOTIFY) and Server-Sent Events.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.app import build
from runbell.flows import members, sweeps
from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import LiveServer, bearer, make_settings
from tests.timeouts import WAIT, scaled

DAY_S = 24 * 3600


# --- helpers -------------------------------------------------------------------------


def put_run(
    http: TestClient | httpx.Client, key: str, run_id: str, owner: str, **body: Any
) -> None:
    r = http.put(
        f"/v1/runs/{run_id}",
        json={"owner": owner, "state": "working", **body},
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text


def signal(
    http: TestClient | httpx.Client, key: str, run_id: str, event_id: str, state: str
) -> dict[str, Any]:
    r = http.post(
        f"/v1/runs/{run_id}/signals",
        json={"event_id": event_id, "state": state},
        headers=bearer(key),
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def feed(http: TestClient | httpx.Client, key: str, after: str, **params: Any) -> dict[str, Any]:
    r = http.get("/v1/events", params={"after": after, **params}, headers=bearer(key))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def all_events(http: TestClient | httpx.Client, key: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = feed(http, key, "earliest", limit=500)["events"]
    return events


def finished_run(http: TestClient | httpx.Client, creds: TenantCreds, run_id: str) -> None:
    """A run that is created working and then completes (notify_on_complete)."""
    put_run(http, creds.runtime_key, run_id, creds.owner_email, notify_on_complete=True)
    assert signal(http, creds.runtime_key, run_id, f"{run_id}-done", "completed")["outcome"] == (
        "applied"
    )


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Synchronisation only (not a timing assertion): wait for ``condition`` to hold."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Poll:
    """A long-poll running in a thread with its own HTTP client."""

    def __init__(self, base_url: str, key: str, after: str, wait: float) -> None:
        self.response: httpx.Response | None = None
        self.elapsed: float | None = None
        self.error: BaseException | None = None
        self._args = (base_url, key, after, wait)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        base_url, key, after, wait = self._args
        try:
            with httpx.Client(base_url=base_url, timeout=wait + WAIT) as http:
                started = time.monotonic()
                self.response = http.get(
                    "/v1/events", params={"after": after, "wait": wait}, headers=bearer(key)
                )
                self.elapsed = time.monotonic() - started
        except BaseException as exc:  # surfaced in join()
            self.error = exc

    def start(self) -> Poll:
        self._thread.start()
        return self

    def join(self) -> httpx.Response:
        self._thread.join(timeout=scaled(40))
        assert not self._thread.is_alive(), "long-poll never returned"
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response


Frame = dict[str, list[str]]


def sse_frames(response: httpx.Response) -> Iterator[Frame]:
    """Server-Sent Event frames, each a mapping of field name to its lines.

    A comment line (``: text``) is collected under the name ``comment``.
    """
    fields: Frame = {}
    for line in response.iter_lines():
        if line == "":
            if fields:
                yield fields
                fields = {}
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name or "comment", []).append(value.removeprefix(" "))
    if fields:
        yield fields


def expect_event(frame: Frame) -> dict[str, Any]:
    """An event frame: exactly one id, one event name and one single-line data field."""
    assert set(frame) == {"id", "event", "data"}, frame
    assert len(frame["id"]) == len(frame["event"]) == len(frame["data"]) == 1, frame
    data: dict[str, Any] = json.loads(frame["data"][0])
    assert data["id"] == frame["id"][0]
    assert data["type"] == frame["event"][0]
    return data


class EventStream:
    """Reads an SSE response as a browser does: yields events, tracks the Last-Event-ID."""

    def __init__(self, response: httpx.Response) -> None:
        self.frames = sse_frames(response)
        self.last_id: str | None = None

    def frame(self) -> Frame:
        frame = next(self.frames)
        for new_id in frame.get("id", []):
            if self.last_id is not None:
                assert int(new_id) >= int(self.last_id), "the event id went backwards"
            self.last_id = new_id
        return frame

    def event(self) -> dict[str, Any]:
        """The next event, skipping id-only frames (which only move the Last-Event-ID on
        past events this viewer may not see) and keep-alive comments."""
        while True:
            frame = self.frame()
            if set(frame) in ({"id"}, {"comment"}):
                continue
            return expect_event(frame)


def open_stream(
    http: httpx.Client, key: str, *, after: str | None = None, last_event_id: str | None = None
) -> Any:
    headers = bearer(key)
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    params = {} if after is None else {"after": after}
    return http.stream("GET", "/v1/events/stream", params=params, headers=headers)


def expire_old_events(
    http: TestClient | httpx.Client, core: Core, clock: Clock, creds: TenantCreds
) -> tuple[list[str], list[str]]:
    """Events at t0, then events past retention, then pruning. Returns (old ids, new ids)
    as the admin key (which sees every event of the tenant) reads them."""
    clock.freeze()
    finished_run(http, creds, "old-1")
    finished_run(http, creds, "old-2")
    old = [e["id"] for e in all_events(http, creds.admin_key)]
    clock.advance(core.settings.feed_retention_s + DAY_S)
    put_run(http, creds.runtime_key, "new-1", creds.owner_email)
    finished_run(http, creds, "new-2")
    assert sweeps.prune(core, clock()) == len(old)
    new = [e["id"] for e in all_events(http, creds.admin_key)]
    assert new and int(new[0]) > int(old[-1])
    return old, new


# --- cursors -------------------------------------------------------------------------


def test_paging_and_resume_return_every_later_event_in_order(
    client: TestClient, creds: TenantCreds
) -> None:
    """Reading page by page and resuming from any cursor yields every later event, in order."""
    for i in range(4):
        finished_run(client, creds, f"r{i}")
    rt = creds.runtime_key
    head = all_events(client, creds.admin_key)[-1]["id"]  # admin keys see every event
    everything = all_events(client, rt)
    expected = [(t, f"r{i}") for i in range(4) for t in ("run.created", "run.transitioned")]
    assert [(e["type"], e["run_id"]) for e in everything] == expected

    pages: list[list[dict[str, Any]]] = []
    cursor = "earliest"
    while True:
        page = feed(client, rt, cursor, limit=3)
        if not page["events"]:
            assert page["next_cursor"] == cursor  # an empty page keeps the cursor
            break
        assert len(page["events"]) <= 3
        # It may move past events this key cannot see, never before the last one shown.
        assert int(page["next_cursor"]) >= int(page["events"][-1]["id"])
        pages.append(page["events"])
        cursor = page["next_cursor"]
    assert [len(p) for p in pages] == [3, 3, 2]
    paged = [e for p in pages for e in p]
    assert paged == everything
    ids = [int(e["id"]) for e in paged]
    assert ids == sorted(set(ids)), "ids must be strictly increasing"

    middle = everything[3]["id"]
    resumed = feed(client, rt, middle)
    assert resumed["events"] == everything[4:]
    assert int(resumed["next_cursor"]) >= int(everything[-1]["id"])
    assert feed(client, rt, resumed["next_cursor"])["events"] == []

    timed_out = feed(client, rt, head, wait=0.2)
    assert timed_out == {"events": [], "next_cursor": head}


def test_earliest_and_latest_cursors(client: TestClient, creds: TenantCreds) -> None:
    """after=earliest replays what is retained; after=latest starts at the head."""
    finished_run(client, creds, "a")
    admin_view = all_events(client, creds.admin_key)
    head = admin_view[-1]["id"]  # admin keys see every event, so this is the tenant's head
    assert feed(client, creds.runtime_key, "earliest")["events"][0]["type"] == "run.created"

    latest = feed(client, creds.runtime_key, "latest")
    assert latest == {"events": [], "next_cursor": head}

    put_run(client, creds.runtime_key, "b", creds.owner_email)
    after_head = feed(client, creds.runtime_key, latest["next_cursor"])
    assert [(e["type"], e["run_id"]) for e in after_head["events"]] == [("run.created", "b")]


def test_cursor_ahead_of_the_head_is_refused(client: TestClient, creds: TenantCreds) -> None:
    """A cursor this feed never handed out is a 422, not an empty page that hides events."""
    finished_run(client, creds, "a")
    r = client.get("/v1/events", params={"after": "999999"}, headers=bearer(creds.runtime_key))
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")


# --- retention -------------------------------------------------------------------------


def test_expired_cursor_answers_410_with_where_to_resume(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """A cursor older than retention is a 410 with the snapshot to load, never a silent gap."""
    old, new = expire_old_events(client, core, clock, creds)

    r = client.get("/v1/events", params={"after": old[0]}, headers=bearer(creds.runtime_key))
    assert r.status_code == 410
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["status"] == 410
    assert problem["oldest_available_cursor"] == old[-1]
    assert problem["head_cursor"] == new[-1]
    assert problem["snapshot_url"] == "/v1/events/snapshot"
    assert "events" not in problem

    # What is left is readable from the start, and from the oldest available cursor.
    assert [e["id"] for e in all_events(client, creds.admin_key)] == new
    resumed = feed(client, creds.admin_key, problem["oldest_available_cursor"])
    assert [e["id"] for e in resumed["events"]] == new

    snap = client.get(problem["snapshot_url"], headers=bearer(creds.owner_token))
    assert snap.status_code == 200
    snapshot = snap.json()
    assert snapshot["head_cursor"] == problem["head_cursor"]
    assert [run["run_id"] for run in snapshot["runs"]] == ["new-1"]
    assert {n["run_id"] for n in snapshot["notifications"]} >= {"new-2"}

    # Resuming from the snapshot's head misses nothing that happens next.
    signal(client, creds.runtime_key, "new-1", "new-1-done", "completed")
    after_snap = feed(client, creds.runtime_key, snapshot["head_cursor"])
    assert [(e["type"], e["run_id"]) for e in after_snap["events"]] == [
        ("run.transitioned", "new-1")
    ]


def test_a_prune_between_the_cursor_check_and_the_read_is_a_410_not_a_gap(
    client: TestClient,
    core: Core,
    clock: Clock,
    creds: TenantCreds,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cursor passed the retention check, then a prune batch committed before the
    page was read: the reader gets 410 (retention is checked again after the read)."""
    from runbell.flows import feed as feed_flow

    clock.freeze()
    finished_run(client, creds, "old-1")
    old = [e["id"] for e in all_events(client, creds.admin_key)]
    position = "0"  # a reader that has seen nothing yet: every old event is still due
    clock.advance(core.settings.feed_retention_s + DAY_S)
    put_run(client, creds.runtime_key, "new-1", creds.owner_email)
    real = feed_flow.resolve_cursor

    def checked_then_pruned(*args: Any, **kwargs: Any) -> int:
        found = real(*args, **kwargs)  # passes: nothing is pruned yet
        assert sweeps.prune(core, clock()) == len(old)  # ... then the old events go
        return found

    monkeypatch.setattr(feed_flow, "resolve_cursor", checked_then_pruned)
    r = client.get("/v1/events", params={"after": position}, headers=bearer(creds.admin_key))
    assert r.status_code == 410, r.text
    assert r.json()["oldest_available_cursor"] == old[-1]


def test_scheduler_retention_sweep_expires_cursors(
    client: TestClient, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """The scheduler's retention sweep prunes the feed the same way (410 afterwards)."""
    from runbell.dispatch.scheduler import Scheduler

    clock.freeze()
    finished_run(client, creds, "old")
    first = all_events(client, creds.runtime_key)[0]["id"]
    now = clock.advance(core.settings.feed_retention_s + 120)
    Scheduler(core).tick(now)
    r = client.get("/v1/events", params={"after": first}, headers=bearer(creds.runtime_key))
    assert r.status_code == 410
    assert r.json()["snapshot_url"] == "/v1/events/snapshot"


# --- visibility --------------------------------------------------------------------------


def kinds(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["run_id"]) for e in events]


def test_runtime_key_sees_run_events_but_no_notification_events(
    client: TestClient, creds: TenantCreds
) -> None:
    """Runtimes follow runs; what a person was told, and what they did, stays with them."""
    finished_run(client, creds, "r1")
    inbox = client.get("/v1/notifications", headers=bearer(creds.owner_token)).json()
    (note,) = inbox["notifications"]
    r = client.post(f"/v1/notifications/{note['id']}/ack", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text

    assert ("notification.closed", "r1") in kinds(all_events(client, creds.admin_key))
    assert ("notification.closed", "r1") in kinds(all_events(client, creds.owner_token))
    assert kinds(all_events(client, creds.runtime_key)) == [
        ("run.created", "r1"),
        ("run.transitioned", "r1"),
    ]


def test_recipient_sees_the_notification_created_event(
    client: TestClient, creds: TenantCreds
) -> None:
    """The person alerted sees notification.created in their feed, after the transition."""
    finished_run(client, creds, "r1")
    owner_view = kinds(all_events(client, creds.owner_token))
    assert owner_view == [
        ("run.created", "r1"),
        ("run.transitioned", "r1"),
        ("notification.created", "r1"),
    ]


def shared_runs(client: TestClient, core: Core, creds: TenantCreds) -> str:
    """Three finished runs: the owner's own, one naming the member, the member's own.
    Returns the member's token."""
    member_token: str = add_user(core, creds.tenant_id, "member@acme.test")[1]
    finished_run(client, creds, "private")  # the owner's; names nobody else
    put_run(
        client,
        creds.runtime_key,
        "shared",
        creds.owner_email,
        notify_on_complete=True,
        authority={"users": ["member@acme.test"]},
    )
    signal(client, creds.runtime_key, "shared", "shared-done", "completed")
    put_run(client, creds.runtime_key, "mine", "member@acme.test", notify_on_complete=True)
    signal(client, creds.runtime_key, "mine", "mine-done", "completed")
    return member_token


def test_members_see_only_runs_that_name_them(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A member sees the events of runs they own or are named on, not other runs."""
    member_token = shared_runs(client, core, creds)
    member_events = [e for e in all_events(client, member_token) if e["type"].startswith("run.")]
    assert kinds(member_events) == [
        ("run.created", "shared"),
        ("run.transitioned", "shared"),
        ("run.created", "mine"),
        ("run.transitioned", "mine"),
    ]
    assert "private" not in json.dumps(member_events)
    # The tenant's owner sees every run of the tenant.
    owner_runs = {e["run_id"] for e in all_events(client, creds.owner_token)}
    assert owner_runs == {"private", "shared", "mine"}


def test_notification_events_reach_only_their_recipient(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Each person sees notification events of their own alerts only, even on shared runs."""
    member_token = shared_runs(client, core, creds)
    owner_notes = [
        e["run_id"]
        for e in all_events(client, creds.owner_token)
        if e["type"] == "notification.created"
    ]
    member_notes = [
        e for e in all_events(client, member_token) if e["type"] == "notification.created"
    ]
    assert owner_notes == ["private", "shared"]
    assert [e["run_id"] for e in member_notes] == ["mine"]
    inbox = client.get("/v1/notifications", headers=bearer(member_token)).json()
    assert [n["id"] for n in inbox["notifications"]] == [member_notes[0]["notification_id"]]


def test_another_tenant_sees_nothing(client: TestClient, core: Core, creds: TenantCreds) -> None:
    """Nothing crosses tenants: another tenant's people and keys read only their own feed."""
    finished_run(client, creds, "acme-run")
    other = make_tenant(core, "other")
    for key in (other.owner_token, other.runtime_key, other.admin_key):
        assert all_events(client, key) == []
        assert feed(client, key, "latest") == {"events": [], "next_cursor": "0"}
        snap = client.get("/v1/events/snapshot", headers=bearer(key)).json()
        assert snap["runs"] == [] and snap["notifications"] == []
    put_run(client, other.runtime_key, "other-run", other.owner_email)
    assert kinds(all_events(client, other.owner_token)) == [("run.created", "other-run")]
    assert "other-run" not in {e["run_id"] for e in all_events(client, creds.admin_key)}


# --- long-poll wake-ups --------------------------------------------------------------------


def test_long_poll_is_woken_by_the_commit(live: LiveServer, core: Core, creds: TenantCreds) -> None:
    """A long-poll returns the committed event at once, not when its 20 s wait runs out."""
    with httpx.Client(base_url=live.url, timeout=WAIT) as http:
        put_run(http, creds.runtime_key, "r1", creds.owner_email)
        head = feed(http, creds.admin_key, "latest")["next_cursor"]
        poll = Poll(live.url, creds.runtime_key, head, wait=20).start()
        wait_until(lambda: core.hub.waiter_count() >= 1, "the long-poll to start waiting")
        signal(http, creds.runtime_key, "r1", "r1-done", "completed")
        response = poll.join()
    assert response.status_code == 200
    body = response.json()
    assert kinds(body["events"]) == [("run.transitioned", "r1")]
    assert int(body["next_cursor"]) >= int(body["events"][-1]["id"])
    # Woken: back before its 20 s wait ran out (not woken, it returns at 20 s at the
    # earliest), however slow the machine; never a bound on how fast it is.
    assert poll.elapsed is not None and poll.elapsed < 20, poll.elapsed


@pytest.mark.parametrize("listen", ["database_url", "listen_database_url"])
def test_long_poll_is_woken_by_a_commit_in_another_process(
    db_url: str, tmp_path: Path, listen: str
) -> None:
    """On PostgreSQL a commit through server B wakes a long-poll on server A (LISTEN/NOTIFY),
    over RUNBELL_DATABASE_URL or, when set, RUNBELL_LISTEN_DATABASE_URL (what a deployment
    behind PgBouncer in transaction mode points at the database directly)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("cross-process wake-up uses PostgreSQL LISTEN/NOTIFY; SQLite is one process")
    extra: dict[str, Any] = {"feed_fallback_poll_s": 30}
    if listen == "listen_database_url":
        # The same database under a name the bridge's sessions can be recognised by.
        extra["listen_database_url"] = (
            sa.make_url(db_url)
            .update_query_dict({"application_name": "runbell-listen"})
            .render_as_string(hide_password=False)
        )
    # A long fallback poll: only a NOTIFY from B can wake A before the 20 s wait ends.
    core_a = build(make_settings(tmp_path / "a", db_url, **extra), migrate=False)
    core_b = build(make_settings(tmp_path / "b", db_url, **extra), migrate=False)
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

            head = feed(via_b, creds.admin_key, "latest")["next_cursor"]
            poll = Poll(server_a.url, creds.runtime_key, head, wait=20).start()
            wait_until(lambda: core_a.hub.waiter_count() >= 1, "the long-poll on A to wait")
            signal(via_b, creds.runtime_key, "r1", "r1-done", "completed")
            response = poll.join()
            with core_a.db.read() as conn:
                listening = conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE application_name = 'runbell-listen' AND datname = current_database()"
                    )
                ).scalar_one()
        assert response.status_code == 200
        assert kinds(response.json()["events"]) == [("run.transitioned", "r1")]
        assert poll.elapsed is not None and poll.elapsed < 20, poll.elapsed  # woken, as above
        # Each process's bridge holds two sessions on that URL: one LISTENs, one NOTIFYs.
        assert listening == (4 if listen == "listen_database_url" else 0), "two per process"
    finally:
        core_a.db.dispose()
        core_b.db.dispose()


# --- Server-Sent Events ----------------------------------------------------------------------


def test_sse_frames_and_resume_with_last_event_id(live: LiveServer, creds: TenantCreds) -> None:
    """SSE sends retry, a priming id, then events; Last-Event-ID resumes without gap or repeat."""
    rt = creds.runtime_key
    with httpx.Client(base_url=live.url, timeout=WAIT) as http:
        put_run(http, rt, "live-run", creds.owner_email)
        for i in range(3):
            finished_run(http, creds, f"r{i}")
        expected = all_events(http, rt)
        assert len(expected) == 7

        with open_stream(http, rt, after="earliest") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = EventStream(response)
            assert stream.frame() == {"retry": ["3000"]}
            assert stream.frame() == {"id": ["0"]}  # priming id: the resume point
            first = [stream.event() for _ in range(3)]
        assert first == expected[:3]

        last = stream.last_id
        assert last == first[-1]["id"]
        # The header wins over ?after=: "earliest" would repeat the first three events.
        with open_stream(http, rt, after="earliest", last_event_id=last) as response:
            assert response.status_code == 200
            stream = EventStream(response)
            assert stream.frame() == {"retry": ["3000"]}
            assert stream.frame() == {"id": [last]}
            rest = [stream.event() for _ in range(len(expected) - 3)]
            assert rest == expected[3:]
            # And what commits while connected arrives next.
            r = http.post(
                "/v1/runs/live-run/progress", json={"message": "halfway"}, headers=bearer(rt)
            )
            assert r.status_code == 202, r.text
            fresh = stream.event()
        assert (fresh["type"], fresh["run_id"]) == ("run.progress", "live-run")
        assert int(fresh["id"]) > int(expected[-1]["id"])

        # What commits while disconnected arrives first after the next reconnect, once.
        r = http.post("/v1/runs/live-run/progress", json={"message": "later"}, headers=bearer(rt))
        assert r.status_code == 202, r.text
        assert stream.last_id is not None
        with open_stream(http, rt, last_event_id=stream.last_id) as response:
            stream = EventStream(response)
            assert stream.frame() == {"retry": ["3000"]}
            stream.frame()  # priming id
            later = stream.event()
        assert (later["type"], later["data"]["message"]) == ("run.progress", "later")


def test_sse_expired_cursor_is_an_event_then_the_stream_closes(
    live: LiveServer, core: Core, clock: Clock, creds: TenantCreds
) -> None:
    """An expired Last-Event-ID: 200, `cursor_expired` with the snapshot URL, stream ends."""
    with httpx.Client(base_url=live.url, timeout=WAIT) as http:
        old, new = expire_old_events(http, core, clock, creds)
        with open_stream(http, creds.runtime_key, last_event_id=old[0]) as response:
            assert response.status_code == 200
            frames = list(sse_frames(response))  # returns only because the stream closes
    assert frames[0] == {"retry": ["3000"]}
    assert len(frames) == 2, frames
    assert set(frames[1]) == {"event", "data"} and frames[1]["event"] == ["cursor_expired"]
    assert len(frames[1]["data"]) == 1
    data = json.loads(frames[1]["data"][0])
    assert data["snapshot_url"] == "/v1/events/snapshot"
    assert data["oldest_available_cursor"] == old[-1]
    assert data["head_cursor"] == new[-1]


def test_sse_sends_keep_alive_comments_while_idle(db_url: str, tmp_path: Path) -> None:
    """An idle stream carries `:` comment lines so proxies keep it open."""
    core = build(make_settings(tmp_path, db_url, sse_keepalive_s=1), migrate=False)
    try:
        creds = make_tenant(core)
        with (
            LiveServer(core) as server,
            httpx.Client(base_url=server.url, timeout=WAIT) as http,
            open_stream(http, creds.runtime_key, after="latest") as response,
        ):
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(lines).startswith("retry:")
            seen: list[str] = []
            for line in lines:
                seen.append(line)
                if line.startswith(":"):
                    break
            assert seen[0] == "" and seen[1].startswith("id:")
            assert seen[-1].startswith(":"), seen
            assert not any(line.startswith(("event:", "data:")) for line in seen)
    finally:
        core.db.dispose()


def test_sse_stream_ends_when_access_is_revoked(db_url: str, tmp_path: Path) -> None:
    """An open stream does not outlive a revoked membership: it says so and closes."""
    core = build(
        make_settings(tmp_path, db_url, sse_access_recheck_s=0.2, feed_fallback_poll_s=0.2),
        migrate=False,
    )
    try:
        creds = make_tenant(core)
        with (
            LiveServer(core) as server,
            httpx.Client(base_url=server.url, timeout=WAIT) as http,
            open_stream(http, creds.owner_token, after="latest") as response,
        ):
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(lines).startswith("retry:")
            members.revoke_member(core, creds.tenant_id, creds.owner_id)
            rest = list(lines)  # ends when the server closes the stream
            assert "event: access_ended" in rest
    finally:
        core.db.dispose()
