"""How the fan-out writes streams (``runbell.runtime.streams`` with ``runbell.api.sse``):
the tail writes idle streams itself, the same rendered bytes to every stream of one
audience, and a stream whose client stops taking writes holds back no other; its own
writes wait, in order, and what piled up meanwhile goes out coalesced, from which a
``Last-Event-ID`` resumes without gap or repeat.

The streams are driven straight through the ASGI app, as a server would: each has its own
``send``, which can be held the way a server's ``send`` waits for a client that does not
read (the fan-out must never wait on it).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import bearer
from tests.integration.test_feed import all_events, put_run
from tests.integration.test_feed_streams import frames
from tests.timeouts import WAIT


class AsgiStream:
    """``GET /v1/events/stream`` on the app itself; ``hold()`` makes ``send`` wait."""

    def __init__(self, app: Any, token: str, last_event_id: str | None = None) -> None:
        headers = [(b"host", b"test"), (b"authorization", f"Bearer {token}".encode())]
        if last_event_id is not None:
            headers.append((b"last-event-id", last_event_id.encode()))
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/v1/events/stream",
            "raw_path": b"/v1/events/stream",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("test", 80),
            "state": {},
        }
        self.app = app
        self.status: int | None = None
        self.bodies: list[bytes] = []  # one per write, as the server was given them
        self.open = asyncio.Event()
        self.open.set()
        self.gone = asyncio.Event()
        self._requested = False
        self.task: asyncio.Task[None] | None = None

    async def receive(self) -> dict[str, Any]:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            return
        await self.open.wait()  # a client that stopped reading: the write waits
        if message.get("body"):
            self.bodies.append(message["body"])

    def start(self) -> AsgiStream:
        self.task = asyncio.create_task(self.app(self.scope, self.receive, self.send))
        return self

    def hold(self) -> None:
        self.open.clear()

    def release(self) -> None:
        self.open.set()

    async def close(self) -> None:
        self.gone.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, WAIT)

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(f["data"][0]) for f in frames(b"".join(self.bodies)) if "event" in f]

    def ids(self) -> list[int]:
        return [int(e["id"]) for e in self.events()]

    def events_per_write(self) -> list[int]:
        return [sum(1 for f in frames(b) if "event" in f) for b in self.bodies]


def head(client: TestClient, token: str) -> int:
    r = client.get("/v1/events", params={"after": "latest"}, headers=bearer(token))
    assert r.status_code == 200, r.text
    return int(r.json()["next_cursor"])


async def until(condition: Any, what: str) -> None:
    """Synchronisation only (not a timing assertion)."""
    async with asyncio.timeout(WAIT):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


def test_a_stream_that_takes_no_writes_holds_back_no_other_and_loses_nothing(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """While one stream's client takes no writes, five commits reach every other stream
    (two on the runtime key get the very same bytes; a member gets only the runs naming
    them); the held stream gets nothing meanwhile, then every event once, in order, the
    ones that piled up coalesced into fewer writes than events. Resuming from an id in
    the middle of a coalesced write gives exactly the events after it."""
    member_token = add_user(core, creds.tenant_id, "member@acme.test")[1]
    tokens = {"runtime": creds.runtime_key, "member": member_token, "owner": creds.owner_token}
    before = {n: head(client, t) for n, t in tokens.items()}

    async def main() -> dict[str, Any]:
        app = client.app
        rt1 = AsgiStream(app, creds.runtime_key).start()
        rt2 = AsgiStream(app, creds.runtime_key).start()
        member = AsgiStream(app, member_token).start()
        owner = AsgiStream(app, creds.owner_token).start()
        slow = AsgiStream(app, creds.runtime_key).start()
        streams = (rt1, rt2, member, owner, slow)
        await until(lambda: all(s.bodies for s in streams), "every stream to be primed")
        assert all(s.status == 200 for s in streams)
        slow.hold()
        for i in range(5):
            await asyncio.to_thread(
                put_run,
                client,
                creds.runtime_key,
                f"w{i}",
                creds.owner_email,
                authority={"users": ["member@acme.test"]} if i % 2 else {},
            )
            # The others get each commit while the held stream's write waits.
            await until(
                lambda i=i: any(e["run_id"] == f"w{i}" for e in rt1.events()), f"w{i} on rt1"
            )
        await until(lambda: any(e["run_id"] == "w4" for e in owner.events()), "w4 on owner")
        await until(lambda: any(e["run_id"] == "w3" for e in member.events()), "w3 on member")
        assert slow.events() == []  # priming only: its writes are waiting
        slow.release()
        await until(lambda: len(slow.events()) >= len(rt1.events()), "the held stream")
        # Resume from an id inside the coalesced write.
        coalesced = next(b for b in slow.bodies if sum(1 for f in frames(b) if "event" in f) > 1)
        middle = next(int(f["id"][0]) for f in frames(coalesced) if "event" in f)
        resumed = AsgiStream(app, creds.runtime_key, last_event_id=str(middle)).start()
        await until(lambda: len(resumed.ids()) >= len([i for i in rt1.ids() if i > middle]), "")
        await asyncio.to_thread(put_run, client, creds.runtime_key, "later", creds.owner_email)
        await until(lambda: any(e["run_id"] == "later" for e in resumed.events()), "later")
        await until(lambda: any(e["run_id"] == "later" for e in rt1.events()), "later on rt1")
        for s in (*streams, resumed):
            await s.close()
        return {
            "runtime": rt1.events(),
            "runtime again": rt2.events(),
            "member": member.events(),
            "owner": owner.events(),
            "held": slow.events(),
            "per write": slow.events_per_write(),
            "same bytes": b"".join(rt1.bodies) == b"".join(rt2.bodies),
            "resumed": resumed.ids(),
            "middle": middle,
        }

    got = asyncio.run(main())
    expected = {
        n: [e for e in all_events(client, t) if int(e["id"]) > before[n]] for n, t in tokens.items()
    }
    assert got["runtime"] == got["runtime again"] == expected["runtime"]
    assert got["same bytes"]  # rendered once, written to both
    assert got["member"] == expected["member"]
    assert {e["run_id"] for e in got["member"]} == {"w1", "w3"}  # only runs naming them
    assert got["owner"] == expected["owner"]
    # The held stream: every event once, in order; what piled up went out coalesced.
    held_expected = [e for e in expected["runtime"] if e["run_id"] != "later"]
    assert got["held"][: len(held_expected)] == held_expected
    assert len([n for n in got["per write"] if n]) < len(held_expected)
    assert got["resumed"] == [
        int(e["id"]) for e in expected["runtime"] if int(e["id"]) > got["middle"]
    ]
    assert not any(s.subscribers for s in list(core.hub.per_loop.values()))
