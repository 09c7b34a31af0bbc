"""Counting what was stored against what was sent: plain SQL over the schema's tables.

Each benchmark gives its runs a unique id prefix (``p2-pg1-3-``, no underscores, so
``LIKE prefix%`` matches exactly them) and asks here how many transitions,
notifications, outbox rows and inbound events those runs got. A missing row is lost
work, a second one is doubled work; either raises :class:`CorrectnessError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from bench.common import CorrectnessError, Tally

SIGNALS_SQL = sa.text(
    """
    SELECT
      (SELECT count(*) FROM transitions
        WHERE tenant_id = :t AND run_id LIKE :p AND to_state = 'completed') AS transitions,
      (SELECT count(*) FROM (SELECT run_id FROM transitions
        WHERE tenant_id = :t AND run_id LIKE :p AND to_state = 'completed'
        GROUP BY run_id HAVING count(*) > 1) AS d) AS doubled_transitions,
      (SELECT count(*) FROM notifications
        WHERE tenant_id = :t AND run_id LIKE :p) AS notifications,
      (SELECT count(*) FROM (SELECT run_id FROM notifications
        WHERE tenant_id = :t AND run_id LIKE :p
        GROUP BY run_id HAVING count(*) > 1) AS d) AS doubled_notifications,
      (SELECT count(*) FROM deliveries
        WHERE tenant_id = :t AND run_id LIKE :p AND notification_id IS NOT NULL) AS outbox,
      (SELECT count(*) FROM inbound_events
        WHERE tenant_id = :t AND run_id LIKE :p AND outcome = 'applied') AS inbound,
      (SELECT count(*) FROM runs
        WHERE tenant_id = :t AND run_id LIKE :p AND state = 'completed') AS completed_runs
    """
)

WEBHOOK_SQL = sa.text(
    """
    SELECT status, count(*) FROM deliveries
     WHERE tenant_id = :t AND channel = 'webhook' AND run_id LIKE :p
     GROUP BY status
    """
)

ATTEMPTS_SQL = sa.text(
    """
    SELECT count(*) FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
     WHERE d.tenant_id = :t AND d.channel = 'webhook' AND d.run_id LIKE :p
    """
)

WEBHOOK_IDS_SQL = sa.text(
    "SELECT id FROM deliveries WHERE tenant_id = :t AND channel = 'webhook' AND run_id LIKE :p"
)


def read_engine(url: str) -> sa.Engine:
    """A plain engine for counting (reads only; never takes SQLite's write lock)."""
    if url.startswith("sqlite"):
        return sa.create_engine(url, connect_args={"timeout": 30}, poolclass=sa.pool.NullPool)
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


def signal_counts(engine: sa.Engine, tenant_id: str, prefix: str) -> dict[str, int]:
    with engine.connect() as conn:
        row = conn.execute(SIGNALS_SQL, {"t": tenant_id, "p": prefix + "%"}).one()
    return {k: int(v) for k, v in row._mapping.items()}


def check_signals(
    engine: sa.Engine,
    tenant_id: str,
    prefix: str,
    *,
    tally_id: str,
    sent: int,
    applied: int,
    failed: int = 0,
    outcomes: dict[str, int] | None = None,
) -> Tally:
    """``sent`` completed signals to runs ``prefix…``; ``applied`` were answered
    ``applied``. Each stored exactly once: one transition, notification, outbox row,
    inbound event and completed run per applied signal; none lost, none doubled."""
    c = signal_counts(engine, tenant_id, prefix)
    problems = []
    if failed:
        problems.append(f"{failed} requests got no answer or an error status")
    other = {k: v for k, v in (outcomes or {}).items() if k != "applied"}
    if other:
        problems.append(f"outcomes other than applied: {other}")
    for key in ("transitions", "notifications", "outbox", "inbound", "completed_runs"):
        if c[key] < applied:
            problems.append(f"lost: {c[key]} {key} stored for {applied} applied signals")
        if c[key] > sent:
            problems.append(f"doubled: {c[key]} {key} stored for {sent} signals sent")
    for key in ("doubled_transitions", "doubled_notifications"):
        if c[key]:
            problems.append(f"doubled: {c[key]} runs have more than one ({key})")
    tally = Tally(
        tally_id,
        sent=sent,
        stored=c["transitions"],
        delivered=c["notifications"],
        detail=(
            f"{c['transitions']} transitions, {c['notifications']} notifications, "
            f"{c['outbox']} outbox rows, {c['inbound']} inbound events"
        ),
        ok=not problems,
    )
    if problems:
        raise CorrectnessError(f"{tally_id}: " + "; ".join(problems))
    return tally


def webhook_statuses(engine: sa.Engine, tenant_id: str, prefix: str) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(WEBHOOK_SQL, {"t": tenant_id, "p": prefix + "%"}).all()
    return {str(r[0]): int(r[1]) for r in rows}


def webhook_attempts(engine: sa.Engine, tenant_id: str, prefix: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(ATTEMPTS_SQL, {"t": tenant_id, "p": prefix + "%"}).scalar_one())


def webhook_ids(engine: sa.Engine, tenant_id: str, prefix: str) -> set[str]:
    with engine.connect() as conn:
        return {
            str(r[0]) for r in conn.execute(WEBHOOK_IDS_SQL, {"t": tenant_id, "p": prefix + "%"})
        }


def check_deliveries(
    engine: sa.Engine,
    tenant_id: str,
    prefix: str,
    received: dict[str, Any],
    *,
    tally_id: str,
    expected: int,
) -> Tally:
    """``expected`` webhook messages for runs ``prefix…``: each stored once, accepted, and
    received exactly once (``received`` is the receiver's batch answer, with ``ids``).
    More attempts than messages (a retry that then succeeded) is reported, not failed."""
    statuses = webhook_statuses(engine, tenant_id, prefix)
    attempts = webhook_attempts(engine, tenant_id, prefix)
    stored = sum(statuses.values())
    ids = webhook_ids(engine, tenant_id, prefix)
    got = set(received.get("ids") or [])
    problems = []
    if stored != expected:
        problems.append(f"{stored} webhook rows stored, {expected} expected")
    if statuses.get("accepted", 0) != expected:
        problems.append(f"statuses {statuses}, {expected} accepted expected")
    if attempts < stored:
        problems.append(f"{attempts} attempts recorded for {stored} messages")
    if received["duplicates"]:
        problems.append(f"doubled: {received['duplicates']} messages arrived more than once")
    if got != ids:
        problems.append(
            f"lost: {len(ids - got)} stored messages never arrived; "
            f"{len(got - ids)} arrivals match no stored message"
        )
    if received.get("bad_signatures"):
        problems.append(f"{received['bad_signatures']} requests failed the signature check")
    tally = Tally(
        tally_id,
        sent=expected,
        stored=stored,
        delivered=len(got & ids),
        detail=f"statuses {statuses}, {attempts} attempts, {received['duplicates']} duplicates",
        ok=not problems,
    )
    if problems:
        raise CorrectnessError(f"{tally_id}: " + "; ".join(problems))
    return tally


def merge(tallies: Iterable[Tally], tally_id: str) -> Tally:
    """One correctness line for a benchmark's every batch."""
    out = Tally(tally_id, delivered=0)
    details = []
    for t in tallies:
        out.sent += t.sent
        out.stored += t.stored
        out.delivered = (out.delivered or 0) + (t.delivered or 0)
        out.ok = out.ok and t.ok
        details.append(t.detail)
    out.detail = f"{len(details)} batches"
    return out
