"""The SDK's job fields (issue 18 item 5), on the sync and the async client against a
live server on SQLite and PostgreSQL: ``links=`` on create, ``list_runs(link=...)``,
``done_when=`` and ``depends_on=`` with where the dependency stands."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from runbell.client import Client, ValidationFailed
from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.sdk import Connect
from tests.timeouts import WAIT


@pytest.fixture
def rb(live: LiveServer, creds: TenantCreds, sdk: Connect) -> Iterator[Client]:
    with sdk(live.url, creds.runtime_key, creds.owner_email, timeout=WAIT) as client:
        yield client


def test_links_done_when_and_depends_on_through_the_sdk(
    rb: Client, live: LiveServer, creds: TenantCreds
) -> None:
    dates = rb.put_run(
        "dates",
        state="working",
        links=["conversation:chat-7", {"kind": "message", "id": "m-1", "url": "https://x.test/m"}],
        done_when={"text": "Twelve tasks moved", "operations": ["t1"]},
    )
    assert dates.done_when == {"text": "Twelve tasks moved", "operations": ["t1"]}
    assert dates.links == [
        {"kind": "conversation", "id": "chat-7", "url": None},
        {"kind": "message", "id": "m-1", "url": "https://x.test/m"},
    ]
    rb.open_input_request("dates", summary="Move to Friday?", request_id="dates-proposal")
    announce = rb.put_run(
        "announce",
        state="working",
        links=["conversation:chat-7"],
        done_when="The announcement is drafted",
        depends_on={"run": "dates", "request_id": "dates-proposal"},
    )
    assert announce.depends_on == {"run": "dates", "request_id": "dates-proposal", "version": 1}
    assert announce.dependency is not None
    assert announce.dependency["text"] == "Depends on a proposal that is not approved yet"
    rb.put_run("elsewhere", state="working", links=["conversation:chat-8"])
    assert [r.run_id for r in rb.list_runs(link="conversation:chat-7")] == ["announce", "dates"]
    assert [r.run_id for r in rb.list_runs(link="message:m-1")] == ["dates"]

    # The owner approves (as a person, over the API); the SDK reads where it stands.
    run_version = rb.get_run("dates").version
    r = httpx.post(
        f"{live.url}/v1/input-requests/dates-proposal/responses",
        json={
            "decision": "approve",
            "expected_run_version": run_version,
            "expected_request_version": 1,
        },
        headers={**bearer(creds.owner_token), "Idempotency-Key": "a-1"},
    )
    assert r.status_code == 200, r.text
    now = rb.get_run("announce")
    assert now.dependency is not None and now.dependency["state"] == "approved"
    cleared = rb.put_run("announce", depends_on=None, done_when=None, links=None)
    assert (cleared.depends_on, cleared.done_when, cleared.links) == (None, None, [])
    with pytest.raises(ValidationFailed):
        rb.put_run("announce", depends_on={"run": "nope", "request_id": "x"})
