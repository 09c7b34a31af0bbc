"""The writing steps of a transition (``flows.transitions``), each called on its own in a
real transaction on SQLite and PostgreSQL: what it writes, and what it leaves to the
steps after it. (``apply`` runs them in order; tests/unit/test_transition_steps.py has
the pure ones.)"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from runbell.domain.records import Run
from runbell.flows import accounts as accounts_flow
from runbell.flows import runs as runs_flow
from runbell.flows import transitions as steps
from runbell.flows.attention import raise_attention
from runbell.flows.context import Core
from runbell.flows.policy import policy_in
from runbell.flows.transitions import Moving
from runbell.store import runs as run_store
from runbell.store import tables as t
from runbell.store.db import Tx
from runbell.testing import TenantCreds
from tests.unit.test_transition_steps import move


def working_run(core: Core, creds: TenantCreds, run_id: str) -> Run:
    who = accounts_flow.authenticate(core, creds.runtime_key)
    assert who is not None
    run, _ = runs_flow.put_run(core, who, run_id, {"owner": creds.owner_email, "state": "working"})
    return run


def moving(core: Core, tx: Tx, run_id: str, tenant_id: str, state: str, **fields: Any) -> Moving:
    run = run_store.require_run(tx.conn, tenant_id, run_id, for_update=True)
    request = move(state, **fields)
    return Moving(core, tx, request, run, run, run.version + 1, request.reason)


def open_notes(core: Core, tenant_id: str, run_id: str) -> list[tuple[str, str]]:
    n = t.notifications
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(n.c.attention_type, n.c.state)
            .where(n.c.tenant_id == tenant_id, n.c.run_id == run_id)
            .order_by(n.c.created_at, n.c.id)
        ).all()
    return [(r.attention_type, r.state) for r in rows]


def test_move_run_writes_the_run_row_and_restarts_the_stall_clock(
    core: Core, creds: TenantCreds
) -> None:
    working_run(core, creds, "s-move")
    with core.db.transaction() as tx:
        m = moving(core, tx, "s-move", creds.tenant_id, "completed", reason="done", sequence=7)
        steps.move_run(m)
        assert (m.run.state, m.run.version, m.run.sequence) == ("completed", 2, 7)
        assert m.run.finished_at == tx.now and m.run.stop_reason == "done"
        assert m.run.stall_due_at is None  # a finished run's clock does not run
    with core.db.read() as conn:
        stored = run_store.require_run(conn, creds.tenant_id, "s-move")
    assert (stored.state, stored.version, stored.sequence) == ("completed", 2, 7)


def test_notify_raises_one_notification_per_recipient_run_version_and_type(
    core: Core, creds: TenantCreds
) -> None:
    working_run(core, creds, "s-notify")
    with core.db.transaction() as tx:
        m = moving(core, tx, "s-notify", creds.tenant_id, "failed", reason="broke")
        steps.move_run(m)
        steps.settle_cancellation(m)  # facts for the policy
        steps.notify(m)
        assert len(m.ids) == 1 and m.decision is not None
        again = moving(core, tx, "s-notify", creds.tenant_id, "failed")
        again.run, again.version = m.run, m.version  # the same version once more
        steps.notify(again)
        # Invariant 1: one per recipient, run, version and type: the same one is named.
        assert again.ids == m.ids
    assert open_notes(core, creds.tenant_id, "s-notify") == [("failed", "open")]


def test_settle_cancellation_stores_what_was_kept_and_names_it_the_reason(
    core: Core, creds: TenantCreds
) -> None:
    working_run(core, creds, "s-cancel")
    with core.db.transaction() as tx:
        m = moving(core, tx, "s-cancel", creds.tenant_id, "cancelled", report={"summary": "2 of 5"})
        steps.move_run(m)
        steps.settle_cancellation(m)
        assert m.run.cancel_summary is not None
        assert m.note_reason == m.run.cancel_summary["text"]
        assert "2 of 5" in m.note_reason
        assert m.facts["cancelled_by_owner"] is False  # the runtime stopped it itself
    with core.db.read() as conn:
        stored = run_store.require_run(conn, creds.tenant_id, "s-cancel")
    assert stored.cancel_summary == m.run.cancel_summary


def test_close_moot_resolves_a_mismatch_alert_of_a_finished_run(
    core: Core, creds: TenantCreds
) -> None:
    run = working_run(core, creds, "s-moot")
    with core.db.transaction() as tx:
        raise_attention(
            tx,
            policy_in(core, tx, creds.tenant_id),
            run,
            attention="mismatch",
            version=run.version,
            facts={},
            reason="the reader saw otherwise",
            owner_present=False,
        )
    assert open_notes(core, creds.tenant_id, "s-moot") == [("mismatch", "open")]
    with core.db.transaction() as tx:
        m = moving(core, tx, "s-moot", creds.tenant_id, "completed")
        steps.move_run(m)
        steps.supersede(m)  # reads the open notifications close_moot looks at
        assert [n["attention_type"] for n in m.open_notes] == ["mismatch"]
        steps.close_moot(m)
    assert open_notes(core, creds.tenant_id, "s-moot") == [("mismatch", "resolved")]


def test_record_history_writes_one_row_at_commit_with_the_decision(
    core: Core, creds: TenantCreds
) -> None:
    working_run(core, creds, "s-history")
    with core.db.transaction() as tx:
        m = moving(core, tx, "s-history", creds.tenant_id, "failed", reason="broke")
        steps.move_run(m)
        steps.settle_cancellation(m)
        steps.notify(m)
        steps.record_history(m)
        # Deferred: the statement runs with the others at the end of the transaction.
        assert run_store.get_transition(tx.conn, creds.tenant_id, "s-history", 2) is None
    with core.db.read() as conn:
        row = run_store.get_transition(conn, creds.tenant_id, "s-history", 2)
    assert row is not None
    assert (row.from_state, row.to_state, row.reason) == ("working", "failed", "broke")
    assert row.decision is not None and m.decision is not None
    assert (row.decision["rule_id"], row.decision["kind"]) == (
        m.decision["rule_id"],
        m.decision["kind"],
    )
