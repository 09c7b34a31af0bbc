"""Live updates for ownership changes (issue 18 items 2 and 3): a claim that changes the
completion owner emits ``run.owner_changed`` and a supersede ``operation.superseded``, in
their own transaction, once each (a repeat emits nothing), with ids and states only — no
secret, no details or evidence. A tenant webhook subscribed to both receives them, one
message per change. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds
from tests.conftest import bearer
from tests.integration.test_completion_owner import claim, keys, make_run, patch, post, task
from tests.peers import Dispatcher, WebhookReceiver

PLANTED = "SECRET-OWNER-EVENTS-5521"
WHY = "looked it up in the tracker: the old request never arrived"


def feed(client: TestClient, token: str) -> list[dict[str, Any]]:
    r = client.get("/v1/events", params={"after": "earliest", "limit": 500}, headers=bearer(token))
    assert r.status_code == 200, r.text
    return list(r.json()["events"])


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def takeover_and_supersede(client: TestClient, core: Core, creds: TenantCreds) -> Any:
    """worker-a sends task-4 (with a planted secret in details and evidence); worker-b
    behind a helper key takes the run over and supersedes task-4, then repeats both."""
    k = keys(core, creds)
    make_run(client, creds, "job-1", k.owner, details={"secret": PLANTED})
    claim(client, "job-1", k.owner, "worker-a")
    op = {**task("task-4"), "details": {"secret": PLANTED}}
    r = post(client, "/v1/runs/job-1/operations", k.owner, {"operations": [op], "epoch": 1})
    assert r.status_code == 201, r.text
    sent = patch(client, "job-1", "task-4", k.owner, "sent", epoch=1, evidence={"s": PLANTED})
    assert sent.status_code == 200, sent.text
    taken = claim(client, "job-1", k.helper, "worker-b", reason="worker-a stopped answering")
    assert taken["takeover"] is True
    assert claim(client, "job-1", k.helper, "worker-b")["epoch"] == 2  # the same: no change
    url = "/v1/runs/job-1/operations/task-4/supersede"
    for changed in (True, False):
        sup = post(client, url, k.helper, {"reason": WHY, "worker_id": "worker-b"})
        assert sup.status_code == 200 and sup.json()["changed"] is changed, sup.text
    return k


def test_a_takeover_and_a_supersede_each_reach_the_feed_once_without_a_secret(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    k = takeover_and_supersede(client, core, creds)
    events = feed(client, creds.runtime_key)
    changes = of_type(events, "run.owner_changed")
    assert [c["data"]["change"] for c in changes] == ["claim", "takeover"]
    first, took = (c["data"] for c in changes)
    assert first["owner"] == {"credential_id": k.owner_id, "worker_id": "worker-a"}
    assert first["previous"] == {"credential_id": k.owner_id, "worker_id": None}
    assert first["epoch"] == 1 and first["previous_may_still_act"] is False
    assert took == {
        "run_id": "job-1",
        "version": took["version"],
        "change": "takeover",
        "owner": {"credential_id": k.helper_id, "worker_id": "worker-b"},
        "previous": {"credential_id": k.owner_id, "worker_id": "worker-a"},
        "epoch": 2,
        "previous_may_still_act": True,  # task-4 is still sent under epoch 1
    }
    assert isinstance(took["version"], int)
    assert all(c["run_id"] == "job-1" for c in changes)

    [superseded] = of_type(events, "operation.superseded")
    assert superseded["run_id"] == "job-1"
    assert superseded["data"] == {
        "run_id": "job-1",
        "operation_id": "task-4",
        "state": "sent",
        "reason": WHY,
    }
    # Never a secret: no key, no details, no evidence — and the owner (a person) sees them.
    text = json.dumps([*changes, superseded])
    for secret in (PLANTED, k.owner, k.helper, creds.owner_token):
        assert secret not in text
    shown = {e["type"] for e in feed(client, creds.owner_token)}
    assert {"run.owner_changed", "operation.superseded"} <= shown


def test_a_subscribed_webhook_receives_each_ownership_change_once(
    client: TestClient, core: Core, creds: TenantCreds, clock: Clock
) -> None:
    """Two takeovers at one run version are two messages (keyed by the epoch, not the
    version); the supersede one; the repeats none."""
    clock.freeze()
    with WebhookReceiver() as rx:
        created = client.post(
            "/v1/webhook-endpoints",
            json={"url": rx.url(), "event_types": ["run.owner_changed", "operation.superseded"]},
            headers=bearer(creds.admin_key),
        )
        assert created.status_code == 201, created.text
        rx.secrets = [created.json()["secret"]]
        k = takeover_and_supersede(client, core, creds)
        back = claim(client, "job-1", k.owner, "worker-a", reason="worker-a is back")
        assert back["takeover"] is True and back["epoch"] == 3
        with Dispatcher(core, clock) as d:
            for _ in range(10):
                if not d.tick():
                    break
        changes = [m.json()["data"] for m in rx.of_type("run.owner_changed")]
        assert sorted((c["change"], c["epoch"]) for c in changes) == [
            ("claim", 1),
            ("takeover", 2),
            ("takeover", 3),
        ]
        assert len({c["version"] for c in changes}) == 1  # a claim bumps no version
        [superseded] = rx.of_type("operation.superseded")
        data = superseded.json()["data"]
        assert (data["operation_id"], data["state"], data["reason"]) == ("task-4", "sent", WHY)
        assert data["tenant_id"] == creds.tenant_id
        assert len(rx.requests) == 4
        assert PLANTED not in json.dumps([m.json() for m in rx.requests])
