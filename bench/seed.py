"""History for P7: ``rows`` rows in each history table, written with bulk SQL.

For one tenant and its owner, ``rows`` finished runs' worth of history: a
``working → completed`` transition, an applied inbound event, an acknowledged
``completed`` notification, its inbox delivery, and feed events (alternating
``run.transitioned`` and ``notification.created``) numbered 1…rows, with the tenant's
feed counter moved past them. Timestamps spread over the day before the last two hours:
older than anything the policy counts as recent, younger than feed retention (the
server's retention sweep must not delete them while P7 runs).

The rows are shaped like the code's (ids sort before real ones, so "newest first"
pages still start with the benchmark's own rows) and are generated inside the database:
``generate_series`` on PostgreSQL, a recursive CTE on SQLite. PostgreSQL is ``ANALYZE``d
afterwards, as autovacuum would; SQLite is left as Runbell leaves it.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

SPREAD_S = 86_400.0  # history covers one day …
AGE_S = 7_200.0  # … ending two hours ago

TABLES = ("transitions", "inbound_events", "notifications", "deliveries", "feed_events")


def _statements(dialect: str) -> list[str]:
    pg = dialect == "postgresql"
    if pg:
        series = "generate_series(1, :n) AS g(i)"
        pad = "lpad(i::text, 12, '0')"
        ts = "to_timestamp(:base - (:n - i) * :step)"
        js = "jsonb_build_object"
        cast = "::jsonb"
    else:
        series = "g"
        pad = "printf('%012d', i)"
        ts = "strftime('%Y-%m-%d %H:%M:%S', :base - (:n - i) * :step, 'unixepoch') || '.000000'"
        js = "json_object"
        cast = ""
    cte = (
        ""
        if pg
        else "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < :n) "
    )
    run = "'hist-' || " + pad
    note = "'ntf_00hist' || " + pad
    return [
        f"""{cte}INSERT INTO transitions (tenant_id, run_id, version, kind, from_state,
              to_state, source_id, event_id, sequence, reason, decision, at, reported_at)
            SELECT :t, {run}, 2, 'state', 'working', 'completed', :src, {run} || '-done',
              NULL, NULL, '{{"kind":"inbox","rule_id":"completed.default"}}'{cast}, {ts}, NULL
            FROM {series}""",
        f"""{cte}INSERT INTO inbound_events (tenant_id, source_id, event_id, run_id,
              claimed_state, sequence, outcome, reason, run_version, notification_ids,
              received_at)
            SELECT :t, :src, {run} || '-done', {run}, 'completed', NULL, 'applied', NULL, 2,
              {"jsonb_build_array" if pg else "json_array"}({note}), {ts}
            FROM {series}""",
        f"""{cte}INSERT INTO notifications (id, tenant_id, recipient_user_id, run_id,
              transition_version, attention_type, urgency, decision, rule_id, inputs,
              summary, subject_version, input_request_id, reason, expires_at, state,
              closed_at, closed_reason, created_at, first_delivered_at, first_seen_at)
            SELECT {note}, :t, :owner, {run}, 2, 'completed', 'low', 'inbox',
              'completed.default', '{{}}'{cast}, 'A run finished', NULL, NULL, NULL, NULL,
              'acknowledged', {ts}, 'acknowledged', {ts}, NULL, {ts}
            FROM {series}""",
        f"""{cte}INSERT INTO deliveries (id, tenant_id, notification_id, channel, destination,
              status, run_id, event_type, event_key, payload, urgency, attempt_count,
              next_attempt_at, lease_until, claimed_by, last_error, created_at, updated_at)
            SELECT 'dlv_00hist' || {pad}, :t, {note}, 'inbox', :owner, 'accepted', {run},
              NULL, NULL, NULL, 'low', 0, NULL, NULL, NULL, NULL, {ts}, {ts}
            FROM {series}""",
        f"""{cte}INSERT INTO feed_events (tenant_id, seq, type, run_id, notification_id,
              user_id, data, created_at)
            SELECT :t, i,
              CASE WHEN i % 2 = 0 THEN 'notification.created' ELSE 'run.transitioned' END,
              {run},
              CASE WHEN i % 2 = 0 THEN {note} ELSE NULL END,
              CASE WHEN i % 2 = 0 THEN :owner ELSE NULL END,
              {js}('run_id', {run}, 'state', 'completed', 'version', 2), {ts}
            FROM {series}""",
        "UPDATE tenants SET feed_seq = feed_seq + :n WHERE id = :t",
    ]


def history(url: str, tenant_id: str, source_id: str, owner_id: str, rows: int) -> float:
    """Write the history (the tenant's feed must still be empty); returns seconds taken."""
    t0 = time.monotonic()
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            seq = conn.execute(
                sa.text("SELECT feed_seq FROM tenants WHERE id = :t"), {"t": tenant_id}
            ).scalar_one()
            if seq:
                raise RuntimeError("seed history before the tenant has feed events")
            params = {
                "n": rows,
                "t": tenant_id,
                "src": source_id,
                "owner": owner_id,
                "base": time.time() - AGE_S,
                "step": SPREAD_S / max(1, rows),
            }
            for statement in _statements(engine.dialect.name):
                conn.execute(sa.text(statement), params)
        if engine.dialect.name == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                for table in TABLES:
                    conn.execute(sa.text(f"ANALYZE {table}"))
    finally:
        engine.dispose()
    return time.monotonic() - t0
