"""Retention from an operator's shell: ``runbell tenant retention`` and ``runbell prune``,
real processes on a real SQLite file."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from runbell.app import build, create_app
from runbell.testing import Clock, make_tenant
from tests.acceptance.test_cli import cli_env, ok, refused, settings_for
from tests.conftest import bearer


def counts(text: str) -> dict[str, int]:
    """``table  count  verb`` lines → {table: count}."""
    return {
        m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+) (?:prunable|pruned)$", text, re.M)
    }


def test_tenant_retention_show_set_and_refusals(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    ok(env, "tenant", "create", "acme")
    shown = ok(env, "tenant", "retention", "show", "--tenant", "acme")
    assert re.search(r"^notifications\s+90 days\s+\(default\)$", shown, re.M), shown

    changed = ok(
        env, "tenant", "retention", "set", "--tenant", "acme", "notifications=180", "receipts=7"
    )
    assert re.search(r"^notifications\s+180 days\s+\(tenant\)$", changed, re.M), changed
    assert re.search(r"^receipts\s+7 days\s+\(tenant\)$", changed, re.M), changed

    for args, says in (
        (["inbound_events=1"], "inbound_events: days must be between 3"),
        (["notifications=soon"], "notifications: days must be a whole number"),
        (["bogus=5"], "'bogus' is not a table"),
        (["notifications"], "TABLE=DAYS"),
    ):
        message = refused(env, "tenant", "retention", "set", "--tenant", "acme", *args)
        assert says in message, message
        assert len(message.strip().splitlines()) == 1, message

    ok(env, "tenant", "retention", "set", "--tenant", "acme", "receipts=default")
    shown = ok(env, "tenant", "retention", "show", "--tenant", "acme")
    assert re.search(r"^notifications\s+180 days\s+\(tenant\)$", shown, re.M), shown
    assert re.search(r"^receipts\s+90 days\s+\(default\)$", shown, re.M), shown
    assert "nope" in refused(env, "tenant", "retention", "show", "--tenant", "nope")


def test_prune_dry_run_counts_then_prune_deletes(tmp_path: Path) -> None:
    """History made 100 days ago: --dry-run counts it per table and deletes nothing;
    prune deletes it; a second dry run finds nothing."""
    env = cli_env(tmp_path)
    ok(env, "migrate")
    past = Clock()
    past.freeze(datetime.now(UTC) - timedelta(days=100))
    core = build(settings_for(tmp_path), clock=past, migrate=False)
    try:
        creds = make_tenant(core)
        with TestClient(create_app(core, bridge=False)) as client:
            r = client.put(
                "/v1/runs/old",
                json={"owner": creds.owner_email, "state": "working"},
                headers=bearer(creds.runtime_key),
            )
            assert r.status_code == 201, r.text
            r = client.post(
                "/v1/runs/old/signals",
                json={"event_id": "old-end", "state": "completed"},
                headers=bearer(creds.runtime_key),
            )
            assert r.status_code == 200, r.text
            for note in r.json()["notifications"]:
                r = client.post(
                    f"/v1/notifications/{note['id']}/ack", headers=bearer(creds.owner_token)
                )
                assert r.status_code == 200, r.text
    finally:
        core.db.dispose()

    dry = counts(ok(env, "prune", "--dry-run"))
    assert dry["transitions"] == 2 and dry["inbound_events"] == 1 and dry["feed_events"] > 0
    assert counts(ok(env, "prune", "--dry-run")) == dry  # nothing was deleted
    done = counts(ok(env, "prune", "--tenant", "acme"))
    assert done["transitions"] == 2 and done["notifications"] >= 1
    assert done["total"] == sum(v for k, v in done.items() if k != "total")
    assert counts(ok(env, "prune", "--dry-run"))["total"] == 0
