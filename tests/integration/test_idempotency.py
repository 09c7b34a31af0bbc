"""Idempotency-Key on every POST that creates or acts (DESIGN §6): the same key and body
return the original answer byte for byte without acting again, the same key with another
body is a 422, two requests with one key at once have one effect, and the stored answer
commits with the action. Every test runs on SQLite and PostgreSQL, over real HTTP for the
races."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.signatures import new_secret
from runbell.store import tables as t
from runbell.testing import Clock, TenantCreds, make_tenant
from tests.conftest import LiveServer, bearer
from tests.plain_http import TLS
from tests.timeouts import WAIT, scaled

PUSH_KEYS = {"p256dh": "B" * 87, "auth": "A" * 22}


@dataclass
class Case:
    """One create/act endpoint: a request, another request, and how to count its effect."""

    path: str
    body: dict[str, Any] | None
    other: dict[str, Any] | None  # another request body (or other query, in ``other_path``)
    token: str
    effect: Callable[[], Any]
    other_path: str | None = None


def count(core: Core, table: sa.Table, tenant_id: str, **where: Any) -> int:
    q = sa.select(sa.func.count()).select_from(table).where(table.c.tenant_id == tenant_id)
    for name, value in where.items():
        q = q.where(table.c[name] == value)
    with core.db.read() as conn:
        return int(conn.execute(q).scalar_one())


def column(core: Core, table: sa.Table, name: str, **where: Any) -> Any:
    q = sa.select(table.c[name])
    for key, value in where.items():
        q = q.where(table.c[key] == value)
    with core.db.read() as conn:
        return conn.execute(q).scalar_one()


def ok(r: httpx.Response, *codes: int) -> Any:
    assert r.status_code in (codes or (200,)), r.text
    return r.json()


def working_run(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    ok(
        client.put(
            f"/v1/runs/{run_id}",
            json={"owner": creds.owner_email, "state": "working"},
            headers=bearer(creds.runtime_key),
        ),
        201,
    )


def endpoint(client: TestClient, creds: TenantCreds) -> str:
    body = ok(
        client.post(
            "/v1/webhook-endpoints",
            json={"url": "http://127.0.0.1:9/setup"},
            headers=bearer(creds.admin_key),
        ),
        201,
    )
    return str(body["id"])


def dead_message(client: TestClient, core: Core, creds: TenantCreds) -> str:
    """A dead webhook message (the endpoint's run.created), as a failed receiver leaves it."""
    endpoint(client, creds)
    working_run(client, creds, "dl-1")
    d = t.deliveries
    with core.db.transaction() as tx:
        msg_id = tx.conn.execute(
            sa.select(d.c.id).where(d.c.tenant_id == creds.tenant_id, d.c.channel == "webhook")
        ).scalar_one()
        tx.conn.execute(
            sa.update(d).where(d.c.id == msg_id).values(status="dead", next_attempt_at=None)
        )
    return str(msg_id)


def input_required_note(client: TestClient, creds: TenantCreds) -> str:
    working_run(client, creds, "ask-1")
    answer = ok(
        client.post(
            "/v1/runs/ask-1/signals",
            json={"event_id": "e1", "state": "input_required"},
            headers=bearer(creds.runtime_key),
        )
    )
    return str(answer["notifications"][0]["id"])


def make_case(name: str, client: TestClient, core: Core, creds: TenantCreds) -> Case:
    tid, admin, me = creds.tenant_id, creds.admin_key, creds.owner_token
    if name == "webhook-endpoint":
        return Case(
            "/v1/webhook-endpoints",
            {"url": "http://127.0.0.1:9/a"},
            {"url": "http://127.0.0.1:9/b"},
            admin,
            lambda: count(core, t.webhook_endpoints, tid),
        )
    if name == "endpoint-rotate":
        ep = endpoint(client, creds)
        return Case(
            f"/v1/webhook-endpoints/{ep}/rotate-secret",
            {"overlap_s": 60},
            {"overlap_s": 120},
            admin,
            lambda: len(column(core, t.webhook_endpoints, "secrets", id=ep)),
        )
    if name == "endpoint-recover":
        msg = dead_message(client, core, creds)
        ep = column(core, t.deliveries, "destination", id=msg)
        return Case(
            f"/v1/webhook-endpoints/{ep}/recover?since=2000-01-01T00:00:00Z",
            None,
            None,
            admin,
            lambda: column(core, t.deliveries, "updated_at", id=msg),
            other_path=f"/v1/webhook-endpoints/{ep}/recover?since=2001-01-01T00:00:00Z",
        )
    if name == "source":
        body = {"name": "ci", "kind": "webhook", "mapper": "generic", "trust": "authoritative"}
        return Case(
            "/v1/sources",
            body,
            {**body, "name": "ci-2"},
            admin,
            lambda: count(core, t.sources, tid),
        )
    if name == "source-rotate":
        src = ok(
            client.post(
                "/v1/sources",
                json={
                    "name": "ci",
                    "kind": "webhook",
                    "mapper": "generic",
                    "trust": "authoritative",
                },
                headers=bearer(admin),
            ),
            201,
        )["id"]
        return Case(
            f"/v1/sources/{src}/rotate-secret",
            None,
            # Another request: a provider-issued secret instead of a generated one.
            {"signing_secret": new_secret()},
            admin,
            lambda: tuple(column(core, t.sources, "secrets", id=src)),
        )
    if name == "input-request":
        working_run(client, creds, "run-ir")
        body = {"input_request_id": "ir-1", "kind": "approval", "summary": "Push?"}
        return Case(
            "/v1/runs/run-ir/input-requests",
            body,
            {**body, "summary": "Push now?"},
            creds.runtime_key,
            lambda: count(core, t.transitions, tid, run_id="run-ir"),
        )
    if name == "push-subscription":
        body = {"endpoint": "http://127.0.0.1:9/push/abc", "keys": PUSH_KEYS}
        return Case(
            "/v1/me/push-subscriptions",
            body,
            {**body, "endpoint": "http://127.0.0.1:9/push/def"},
            me,
            lambda: count(core, t.push_subscriptions, tid),
        )
    if name == "my-chat":
        return Case(
            "/v1/me/chat-destinations",
            {"url": "json://127.0.0.1:9/chat"},
            {"url": "json://127.0.0.1:9/other"},
            me,
            lambda: count(core, t.chat_destinations, tid),
        )
    if name == "shared-chat":
        return Case(
            "/v1/chat-destinations",
            {"url": "json://127.0.0.1:9/room"},
            {"url": "json://127.0.0.1:9/room", "label": "ops"},
            admin,
            lambda: count(core, t.chat_destinations, tid),
        )
    if name == "delivery-replay":
        msg = dead_message(client, core, creds)
        return Case(
            f"/v1/deliveries/{msg}/replay",
            None,
            {"x": 1},
            admin,
            lambda: column(core, t.deliveries, "updated_at", id=msg),
        )
    if name == "ack":
        note = input_required_note(client, creds)
        return Case(
            f"/v1/notifications/{note}/ack",
            None,
            {"x": 1},
            me,
            lambda: count(core, t.feed_events, tid, type="notification.closed"),
        )
    if name == "receipt":
        note = input_required_note(client, creds)
        return Case(
            f"/v1/notifications/{note}/receipts",
            {"kind": "opened"},
            {"kind": "dismissed"},
            me,
            lambda: count(core, t.receipts, tid),
        )
    raise AssertionError(name)


CASES = [
    "webhook-endpoint",
    "endpoint-rotate",
    "endpoint-recover",
    "source",
    "source-rotate",
    "input-request",
    "push-subscription",
    "my-chat",
    "shared-chat",
    "delivery-replay",
    "ack",
    "receipt",
]


def post(
    client: TestClient | httpx.Client,
    case: Case,
    key: str | None,
    *,
    other: bool = False,
) -> httpx.Response:
    headers = bearer(case.token)
    if key is not None:
        headers["Idempotency-Key"] = key
    path = case.other_path if other and case.other_path else case.path
    body = case.other if other and case.other_path is None else case.body
    return client.post(path, json=body, headers=headers)


@pytest.mark.parametrize("name", CASES)
def test_the_same_key_and_body_replay_the_first_answer_without_acting_again(
    name: str, client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    case = make_case(name, client, core, creds)
    before = case.effect()
    first = post(client, case, "k-1")
    assert 200 <= first.status_code < 300, first.text
    assert "idempotent-replayed" not in first.headers
    after_first = case.effect()
    assert after_first != before  # it did act

    clock.freeze(clock() + timedelta(seconds=5))  # a retry a little later changes nothing
    again = post(client, case, "k-1")
    assert again.status_code == first.status_code
    assert again.content == first.content  # byte for byte (secrets included)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == "application/json"
    assert case.effect() == after_first  # and it did not act again


@pytest.mark.parametrize("name", CASES)
def test_the_same_key_with_another_request_is_a_422(
    name: str, client: TestClient, core: Core, creds: TenantCreds
) -> None:
    case = make_case(name, client, core, creds)
    first = post(client, case, "k-2")
    assert 200 <= first.status_code < 300, first.text
    after_first = case.effect()
    other = post(client, case, "k-2", other=True)
    assert other.status_code == 422, other.text
    assert other.headers["content-type"].startswith("application/problem+json")
    assert other.json()["field"] == "Idempotency-Key"
    assert case.effect() == after_first


@pytest.mark.parametrize("name", CASES)
def test_without_a_key_nothing_changes(
    name: str, client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """The key is optional: without it each request is handled on its own, as before."""
    case = make_case(name, client, core, creds)
    first = post(client, case, None)
    assert 200 <= first.status_code < 300, first.text
    assert count(core, t.idempotency_keys, creds.tenant_id) == 0


def race(n: int, job: Callable[[int], httpx.Response]) -> list[httpx.Response]:
    barrier = threading.Barrier(n)

    def gated(i: int) -> httpx.Response:
        barrier.wait(timeout=WAIT)
        return job(i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return [f.result(timeout=scaled(120)) for f in [pool.submit(gated, i) for i in range(n)]]


@pytest.mark.parametrize("name", CASES)
def test_concurrent_requests_with_one_key_have_one_effect(
    name: str, client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Four requests with the same key at the same moment, over real HTTP: one effect, and
    every caller gets the same answer."""
    case = make_case(name, client, core, creds)
    before = case.effect()
    with LiveServer(core, bridge=False) as server:

        def job(_: int) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=scaled(60), verify=TLS) as c:
                return post(c, case, "k-race")

        answers = race(4, job)
    assert len({(r.status_code, r.content) for r in answers}) == 1, [r.text for r in answers]
    assert 200 <= answers[0].status_code < 300, answers[0].text
    assert sum("idempotent-replayed" not in r.headers for r in answers) == 1
    after = case.effect()
    assert after != before
    # Exactly one effect: a replay of the same request afterwards changes nothing either.
    again = post(client, case, "k-race")
    assert again.content == answers[0].content
    assert case.effect() == after
    assert count(core, t.idempotency_keys, creds.tenant_id) == 1


def test_keys_are_per_caller_and_per_tenant(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """One key value used by two callers is two keys: neither sees the other's answer."""
    other_tenant = make_tenant(core, "globex")
    body = {"url": "http://127.0.0.1:9/a"}
    mine = client.post(
        "/v1/webhook-endpoints",
        json=body,
        headers={**bearer(creds.admin_key), "Idempotency-Key": "shared"},
    )
    theirs = client.post(
        "/v1/webhook-endpoints",
        json=body,
        headers={**bearer(other_tenant.admin_key), "Idempotency-Key": "shared"},
    )
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]
    assert "idempotent-replayed" not in theirs.headers
    # The owner (a person) and the admin key of one tenant do not share keys either.
    person = client.post(
        "/v1/chat-destinations",
        json={"url": "json://127.0.0.1:9/room"},
        headers={**bearer(creds.owner_token), "Idempotency-Key": "shared"},
    )
    assert person.status_code == 201, person.text


def test_a_failed_request_leaves_its_key_unused(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A refused request commits nothing, its key included: the corrected retry acts."""
    headers = {**bearer(creds.admin_key), "Idempotency-Key": "fix-me"}
    bad = client.post("/v1/deliveries/dlv_nope/replay", headers=headers)
    assert bad.status_code == 404
    refused = client.post(
        "/v1/webhook-endpoints", json={"url": "http://10.0.0.1/x"}, headers=headers
    )
    assert refused.status_code == 422
    assert count(core, t.idempotency_keys, creds.tenant_id) == 0
    good = client.post(
        "/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}, headers=headers
    )
    assert good.status_code == 201, good.text


def test_a_blank_or_long_key_is_a_422_naming_the_header(
    client: TestClient, creds: TenantCreds
) -> None:
    for key in ("  ", "k" * 201):
        r = client.post(
            "/v1/webhook-endpoints",
            json={"url": "http://127.0.0.1:9/a"},
            headers={**bearer(creds.admin_key), "Idempotency-Key": key},
        )
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "Idempotency-Key"


def test_stored_answers_are_sealed_at_rest(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    """A replayable answer that shows a signing secret is stored encrypted, never in clear."""
    r = client.post(
        "/v1/webhook-endpoints",
        json={"url": "http://127.0.0.1:9/a"},
        headers={**bearer(creds.admin_key), "Idempotency-Key": "sealed"},
    )
    secret = r.json()["secret"]
    with core.db.read() as conn:
        stored = conn.execute(sa.select(t.idempotency_keys)).one()
    assert secret not in str(stored.response)
    assert set(stored.response) == {"sealed"}
    assert core.box.open(stored.response["sealed"]).encode() == r.content


def test_an_answer_stored_before_sealing_still_replays(core: Core, creds: TenantCreds) -> None:
    """Records written by an older release hold the body object itself (keys sorted):
    they still replay, as the same JSON."""
    from runbell.flows import idempotency
    from runbell.store import idempotency as records

    key = idempotency.IdempotencyKey(creds.tenant_id, creds.owner_id, "old", "d" * 64)
    with core.db.transaction() as tx:
        records.claim(tx.conn, key.tenant_id, key.principal, key.key, key.digest, tx.now)
        records.settle(tx.conn, key.tenant_id, key.principal, key.key, 200, {"b": 1, "a": [2]})
    with core.db.read() as conn:
        answer = idempotency.stored(conn, core.box, key)
    assert answer is not None and answer.replayed
    assert (answer.status, answer.body) == (200, b'{"a":[2],"b":1}\n')
