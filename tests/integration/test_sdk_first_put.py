"""The SDK's first PUT of a run (issue 16 row 18): it used to send the PUT without the
default owner, get "422 owner is required when a run is created" (logged by httpx at INFO
in every program that logs), then send it again. Now it sends no request the server must
refuse — for a new run, for an existing run of someone else, and for a run it already
knows. Real server (the ``live`` uvicorn, SQLite and PostgreSQL); the statuses are read
off the wire by a recording httpx transport."""

from __future__ import annotations

import asyncio

import httpx

from runbell.client import AsyncClient, Client
from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import LiveServer


class Recording(httpx.HTTPTransport):
    """The real HTTP transport, noting each (method, path, status) it carried."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.seen.append((request.method, request.url.path, response.status_code))
        return response


class AsyncRecording(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.seen.append((request.method, request.url.path, response.status_code))
        return response


def test_a_run_block_sends_no_request_the_server_refuses(
    live: LiveServer, creds: TenantCreds
) -> None:
    wire = Recording()
    with Client(live.url, creds.runtime_key, creds.owner_email, transport=wire) as rb:
        created = rb.put_run("first-put-1", title="First PUT", state="working")
        again = rb.put_run("first-put-1", title="Renamed")
        with rb.run("first-put-1b", title="A run block") as run:
            run.progress("one step")
    assert created.owner == again.owner == creds.owner_id and again.title == "Renamed"
    assert not [s for s in wire.seen if s[2] == 422], wire.seen
    first = [s for s in wire.seen if s[1] == "/v1/runs/first-put-1"]
    # Asked once whether it exists (no), created with the default owner, then updated
    # without asking again: the client knows it now.
    assert first == [
        ("GET", "/v1/runs/first-put-1", 404),
        ("PUT", "/v1/runs/first-put-1", 201),
        ("PUT", "/v1/runs/first-put-1", 200),
    ], first
    block = [s for s in wire.seen if s[1] == "/v1/runs/first-put-1b" and s[0] == "PUT"]
    assert block == [("PUT", "/v1/runs/first-put-1b", 201)], wire.seen


def test_an_existing_run_keeps_its_owner_and_gets_no_refused_put(
    live: LiveServer, core: Core, creds: TenantCreds
) -> None:
    with Client(live.url, creds.runtime_key, creds.owner_email) as mine:
        mine.put_run("first-put-2", title="Mine")
    bob_id, _ = add_user(core, creds.tenant_id, "bob@first-put.test")
    wire = Recording()
    with Client(live.url, creds.runtime_key, "bob@first-put.test", transport=wire) as bobs:
        assert bobs.put_run("first-put-2", title="Renamed").owner == creds.owner_id
        assert bobs.put_run("first-put-3").owner == bob_id
    assert not [s for s in wire.seen if s[2] >= 400 and s[0] == "PUT"], wire.seen


def test_the_async_client_sends_no_refused_put_either(live: LiveServer, creds: TenantCreds) -> None:
    wire = AsyncRecording()

    async def go() -> None:
        async with (
            AsyncClient(live.url, creds.runtime_key, creds.owner_email, transport=wire) as rb,
            rb.run("first-put-4", title="Async") as run,
        ):
            await run.progress("one step")

    asyncio.run(go())
    assert not [s for s in wire.seen if s[2] == 422], wire.seen
    assert [s[2] for s in wire.seen if s[0] == "PUT"] == [201]
