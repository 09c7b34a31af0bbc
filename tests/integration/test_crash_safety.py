"""A failure anywhere inside the signal transaction commits nothing, and the retry of the
same event id is processed fresh, exactly once (DESIGN §2 inv. 1 and 12).

Faults are injected at library boundaries inside our own transaction (a repository
function, the feed flush); the behaviour under test is the real one, on real databases.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
import sqlalchemy as sa
import structlog
from fastapi.testclient import TestClient

from runbell.app import create_app
from runbell.flows.context import Core
from runbell.logging import configure
from runbell.store import accounts
from runbell.store import db as store_db
from runbell.store import outbox as store_outbox
from runbell.store import runs as store_runs
from runbell.store import tables as t
from runbell.testing import TenantCreds
from tests.conftest import bearer


class InjectedFault(RuntimeError):
    pass


def boom(*_: Any, **__: Any) -> NoReturn:
    raise InjectedFault("injected fault")


@pytest.fixture
def lenient(core: Core) -> Iterator[TestClient]:
    """A client that returns the server's 500 instead of re-raising the fault in the test."""
    with TestClient(create_app(core, bridge=False), raise_server_exceptions=False) as c:
        yield c


def snapshot(core: Core, tenant_id: str) -> dict[str, Any]:
    """Everything a committed signal would leave behind, counted."""
    with core.db.read() as conn:

        def count(table: sa.Table) -> int:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(table)
                    .where(table.c.tenant_id == tenant_id)
                ).scalar_one()
            )

        run = conn.execute(
            sa.select(t.runs.c.state, t.runs.c.version, t.runs.c.title).where(
                t.runs.c.tenant_id == tenant_id, t.runs.c.run_id == "r1"
            )
        ).one()
        return {
            "run": tuple(run),
            "notifications": count(t.notifications),
            "deliveries": count(t.deliveries),
            "transitions": count(t.transitions),
            "inbound_events": count(t.inbound_events),
            "feed_events": count(t.feed_events),
            "feed_seq": conn.execute(
                sa.select(t.tenants.c.feed_seq).where(t.tenants.c.id == tenant_id)
            ).scalar_one(),
        }


def create_run(client: TestClient, creds: TenantCreds) -> None:
    r = client.put(
        "/v1/runs/r1",
        json={"owner": creds.owner_email, "state": "working", "notify_on_complete": True},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 201, r.text


def complete(client: TestClient, creds: TenantCreds) -> Any:
    return client.post(
        "/v1/runs/r1/signals",
        json={"event_id": "evt-1", "state": "completed"},
        headers=bearer(creds.runtime_key),
    )


FAULTS = [
    pytest.param((store_outbox, "add_deliveries"), id="outbox-insert"),
    pytest.param((store_runs, "defer_transition"), id="history-insert"),
    pytest.param((store_db.Tx, "flush_deferred"), id="deferred-flush"),
    pytest.param((store_runs, "defer_inbound"), id="dedupe-record"),
    pytest.param((store_db.Tx, "flush_events"), id="feed-flush"),
]


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_after_notification_insert_commits_nothing_and_retry_applies_once(
    monkeypatch: pytest.MonkeyPatch,
    lenient: TestClient,
    core: Core,
    creds: TenantCreds,
    fault: tuple[Any, str],
) -> None:
    """Inv. 12: transition, notification, outbox, dedupe row and feed commit together or not
    at all; the same event id retried afterwards is applied exactly once."""
    target, name = fault
    create_run(lenient, creds)
    before = snapshot(core, creds.tenant_id)
    assert before["run"] == ("working", 1, None)

    monkeypatch.setattr(target, name, boom)
    with structlog.testing.capture_logs() as logs:
        r = complete(lenient, creds)
    assert any(e["event"] == "api.unhandled" and e["log_level"] == "error" for e in logs)
    assert r.status_code == 500, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["status"] == 500
    assert "injected" not in r.text  # internals do not leak into the answer
    assert snapshot(core, creds.tenant_id) == before
    with core.db.read() as conn:
        source_id = accounts.api_source_id(conn, creds.tenant_id)
        assert store_runs.find_inbound(conn, creds.tenant_id, source_id, "evt-1") is None

    monkeypatch.undo()
    retry = complete(lenient, creds)
    assert retry.status_code == 200, retry.text
    body = retry.json()
    assert body["outcome"] == "applied"
    assert (body["run"]["state"], body["run"]["version"]) == ("completed", 2)
    (note,) = body["notifications"]
    after = snapshot(core, creds.tenant_id)
    assert after["run"] == ("completed", 2, None)
    assert after["notifications"] == 1
    assert after["transitions"] == before["transitions"] + 1
    assert after["inbound_events"] == 1
    assert after["feed_seq"] > before["feed_seq"]

    again = complete(lenient, creds)
    assert again.json()["outcome"] == "duplicate"
    assert [n["id"] for n in again.json()["notifications"]] == [note["id"]]
    assert snapshot(core, creds.tenant_id) == after


def test_feed_flush_fault_leaves_the_run_untouched(
    monkeypatch: pytest.MonkeyPatch, lenient: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Inv. 12: a failure while writing the feed at commit time rolls back the whole signal;
    nobody reading the run or the inbox can tell it was attempted."""
    create_run(lenient, creds)
    monkeypatch.setattr(store_db.Tx, "flush_events", boom)
    with structlog.testing.capture_logs():
        assert complete(lenient, creds).status_code == 500
    monkeypatch.undo()
    run = lenient.get("/v1/runs/r1", headers=bearer(creds.runtime_key)).json()
    assert (run["state"], run["version"], run["open_notifications"]) == ("working", 1, [])
    inbox = lenient.get("/v1/notifications", headers=bearer(creds.owner_token)).json()
    assert inbox["notifications"] == []
    events = lenient.get("/v1/events?after=earliest", headers=bearer(creds.runtime_key)).json()
    assert [e["type"] for e in events["events"]] == ["run.created"]


def test_fault_during_put_update_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, lenient: TestClient, core: Core, creds: TenantCreds
) -> None:
    """Inv. 12: a run update whose history row cannot be written is not half-applied."""
    create_run(lenient, creds)
    before = snapshot(core, creds.tenant_id)
    monkeypatch.setattr(store_runs, "add_transition", boom)
    with structlog.testing.capture_logs():
        r = lenient.put("/v1/runs/r1", json={"title": "renamed"}, headers=bearer(creds.runtime_key))
    assert r.status_code == 500
    assert snapshot(core, creds.tenant_id) == before
    monkeypatch.undo()
    r = lenient.put("/v1/runs/r1", json={"title": "renamed"}, headers=bearer(creds.runtime_key))
    assert r.status_code == 200, r.text
    assert (r.json()["title"], r.json()["version"]) == ("renamed", 2)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # a logging matter, not a DB one
def test_crash_log_does_not_contain_the_callers_credentials(
    monkeypatch: pytest.MonkeyPatch, lenient: TestClient, creds: TenantCreds
) -> None:
    """Never log secrets: the unhandled-error log line of a crash omits the API key."""
    create_run(lenient, creds)
    saved = structlog.get_config()
    sink = io.StringIO()
    configure(json=False)  # the console set-up `runbell serve` uses
    # Same processors, but written to our buffer and never cached, so that restoring the
    # previous configuration afterwards leaves no logger bound to this test's buffer.
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(file=sink), cache_logger_on_first_use=False
    )
    try:
        monkeypatch.setattr(store_runs, "defer_transition", boom)
        assert complete(lenient, creds).status_code == 500
    finally:
        structlog.configure(**saved)
    written = sink.getvalue()
    assert "api.unhandled" in written
    assert creds.runtime_key not in written
