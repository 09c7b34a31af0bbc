"""What ``store/fast.py`` relies on in SQLAlchemy, checked against the installed version.

The seam compiles each hot statement once and runs it on the driver's cursor, with bind
and result processors taken from the types through public API only (its docstring lists
every piece). pyproject.toml bounds SQLAlchemy (``<2.2``); an upgrade inside or past that
bound that changes any of it fails here, on both databases, rather than as wrong values
in production:

- every hot statement (every :class:`fast.Statement` in ``runbell.store``), run through
  the seam and through ``conn.execute`` on the same data, each in a savepoint rolled back
  afterwards, sends the same SQL and the same parameters, returns the same rows with the
  same keys and the same typed values, and leaves the same rows behind;
- the public pieces themselves behave as the seam expects (compiled names and values,
  processors of the types it meets, ``exported_columns``, cursor listeners, errors).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Connection

import runbell.store
from runbell.flows.context import Core
from runbell.store import accounts, fast, outbox, runs
from runbell.store import notifications as notes
from runbell.store import tables as t
from runbell.testing import TenantCreds
from tests.conftest import bearer


def hot_statements() -> dict[str, fast.Statement]:
    found = {}
    for info in pkgutil.iter_modules(runbell.store.__path__):
        module = importlib.import_module(f"runbell.store.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, fast.Statement):
                found[f"{info.name}.{name}"] = value
    return found


# --- the data every case reads or writes next to -----------------------------------------


@dataclass
class World:
    tenant: str
    owner: str
    now: datetime
    run: dict[str, Any]  # completed, with a notification
    note: dict[str, Any]
    transition: dict[str, Any]
    inbound: dict[str, Any]
    email: str = ""
    delivery_id: str = ""


def commit_runs(client: TestClient, creds: TenantCreds) -> None:
    """Through the API: a completed run (its transitions, inbound events and an open
    notification) and a working one."""
    body = {
        "owner": creds.owner_email,
        "state": "working",
        "notify_on_complete": True,
        "metadata": {"repo": "acme/web", "n": 3, "nested": {"ok": True}},
    }
    for run_id in ("seam-1", "seam-2"):
        r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
        assert r.status_code == 201, r.text
    r = client.post(
        "/v1/runs/seam-1/signals",
        json={"event_id": "e1", "state": "completed", "reason": "done"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code in (200, 201, 202), r.text
    # A third run with an answered approval (the request and response statements).
    r = client.put("/v1/runs/seam-3", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    ask = {"input_request_id": "req-seam", "kind": "approval", "summary": "Ship it?"}
    r = client.post("/v1/runs/seam-3/input-requests", json=ask, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    answer = {"decision": "approve", "expected_run_version": r.json()["run"]["version"]}
    answer["expected_request_version"] = r.json()["input_request"]["version"]
    r = client.post(
        "/v1/input-requests/req-seam/responses",
        json=answer,
        headers={**bearer(creds.owner_token), "Idempotency-Key": "seam"},
    )
    assert r.status_code in (200, 201), r.text


def make_world(creds: TenantCreds, conn: Connection) -> World:
    """The committed runs, and in ``conn``'s transaction: a policy, a webhook endpoint, a
    due escalation step and an overdue stall clock."""
    tenant = creds.tenant_id
    now = datetime.now(UTC)

    def one(table: sa.Table, *where: Any) -> dict[str, Any]:
        row = conn.execute(sa.select(table).where(table.c.tenant_id == tenant, *where)).first()
        assert row is not None, table.name
        return dict(row._mapping)

    run = one(t.runs, t.runs.c.run_id == "seam-1")
    note = one(t.notifications, t.notifications.c.run_id == "seam-1")
    transition = one(t.transitions, t.transitions.c.run_id == "seam-1", t.transitions.c.version > 1)
    inbound = one(t.inbound_events, t.inbound_events.c.event_id == "e1")

    accounts.set_tenant_policy(conn, tenant, {"rules": [{"id": "r1", "on": ["completed"]}]})
    conn.execute(
        t.webhook_endpoints.insert().values(
            id="ep_seam",
            tenant_id=tenant,
            url="https://hooks.example/seam",
            description=None,
            event_types=["run.completed"],
            secrets=[{"sealed": "x", "created_at": now.isoformat(), "expires_at": None}],
            status="enabled",
            dead_streak=0,
            rate_limit_per_s=None,
            created_at=now,
            updated_at=now,
        )
    )
    conn.execute(
        t.escalation_steps.insert().values(
            id="esc_seam",
            tenant_id=tenant,
            notification_id=note["id"],
            step_no=90,
            channel="email",
            after_s=60,
            due_at=now - timedelta(minutes=1),
            status="pending",
            created_at=now,
        )
    )
    conn.execute(
        sa.update(t.runs)
        .where(t.runs.c.tenant_id == tenant, t.runs.c.run_id == "seam-2")
        .values(stall_clock_at=now - timedelta(hours=2), stall_due_at=now - timedelta(hours=1))
    )
    conn.execute(  # a row from a subject grant, for access._DROP_GRANTED to delete
        t.run_access.insert().values(
            tenant_id=tenant, run_id="seam-1", user_id=creds.owner_id, via="grt_seam0"
        )
    )
    delivery = one(t.deliveries)["id"]
    return World(
        tenant, creds.owner_id, now, run, note, transition, inbound, creds.owner_email, delivery
    )


# --- one case per hot statement --------------------------------------------------------


@dataclass
class Case:
    params: dict[str, Any] | list[dict[str, Any]]  # a list: run as executemany
    written: sa.Select[Any] | None = None  # what it leaves behind, read after it ran


def by(table: sa.Table, **key: Any) -> sa.Select[Any]:
    return sa.select(table).where(*(table.c[k] == v for k, v in key.items()))


def digest_item(w: World) -> dict[str, Any]:
    return {
        "id": "dgi_seam",
        "tenant_id": w.tenant,
        "recipient_user_id": w.owner,
        "digest_key": "daily",
        "window_start": w.now.replace(minute=0, second=0, microsecond=0),
        "closes_at": w.now + timedelta(hours=1),
        "max_items": 20,
        "run_id": "seam-1",
        "transition_version": 2,
        "attention_type": "completed",
        "urgency": "normal",
        "rule_id": "r1",
        "notification_id": None,
        "digest_id": None,
        "created_at": w.now,
    }


def moved(w: World) -> dict[str, Any]:
    values = {name: w.run[name] for name in runs.MOVED}
    values.update(
        state="failed",
        version=w.run["version"] + 1,
        updated_at=w.now,
        error={"code": "boom", "detail": [1, 2.5, None, True]},
        stall_clock_at=None,
    )
    return {"k_tenant": w.tenant, "k_run": "seam-1", **values}


#: Statements only PostgreSQL runs (``db._FEED_IN_ONE``: the feed's bump and insert in one).
POSTGRES_ONLY = {"db._FEED_IN_ONE"}

CASES: dict[str, Callable[[World], Case]] = {
    "accounts._ROLE": lambda w: Case({"tenant_id": w.tenant, "user_id": w.owner}),
    "accounts._POLICY": lambda w: Case({"tenant_id": w.tenant}),
    "db._BUMP_FEED": lambda w: Case({"tenant_id": w.tenant, "n": 3}, by(t.tenants, id=w.tenant)),
    "db._INSERT_FEED": lambda w: Case(
        {
            "tenant_id": w.tenant,
            "seq": 10**12,
            "type": "run.updated",
            "run_id": "seam-1",
            "notification_id": None,
            "user_id": None,
            "data": {"state": "completed", "n": [1, {"x": None}]},
            "created_at": w.now,
        },
        by(t.feed_events, tenant_id=w.tenant, seq=10**12),
    ),
    "db._FEED_IN_ONE": lambda w: Case(
        {
            "tenant_id": w.tenant,
            "n": 2,
            "created_at": w.now,
            "types": ["run.updated", "notification.created"],
            "run_ids": ["seam-1", None],
            "notification_ids": [None, "ntf_x"],
            "user_ids": [None, w.owner],
            "datas": ['{"state": "completed", "n": [1, {"x": null}]}', "{}"],
        },
        by(t.feed_events, tenant_id=w.tenant).order_by(t.feed_events.c.seq),
    ),
    "digests._ADD_ITEM": lambda w: Case(digest_item(w), by(t.digest_items, id="dgi_seam")),
    "digests._DEFER_ITEM": lambda w: Case(
        [digest_item(w), {**digest_item(w), "id": "dgi_seam2", "transition_version": 3}],
        sa.select(t.digest_items).where(t.digest_items.c.id.like("dgi_seam%")).order_by("id"),
    ),
    "endpoints._FOR_FANOUT": lambda w: Case({"tenant_id": w.tenant}),
    "escalations.DUE": lambda w: Case({"now": w.now, "limit": 10}),
    "notifications._INSERT_ONCE": lambda w: Case(
        {**w.note, "id": "ntf_seam", "transition_version": 99, "inputs": {"a": [1, "b"]}},
        by(t.notifications, id="ntf_seam"),
    ),
    "notifications._INSERT_NEW": lambda w: Case(
        {**w.note, "id": "ntf_seam", "transition_version": 99, "inputs": {"a": [1, "b"]}},
        by(t.notifications, id="ntf_seam"),
    ),
    "notifications._EXISTING": lambda w: Case({c: w.note[c] for c in notes._ONCE}),
    "notifications._OPEN_FOR_RUN": lambda w: Case({"tenant_id": w.tenant, "run_id": "seam-1"}),
    "notifications._OPEN_BATCH_2": lambda w: Case(
        {"t0": w.tenant, "r0": "seam-1", "t1": w.tenant, "r1": "seam-1"}
    ),
    "notifications._COUNT_RECENT": lambda w: Case(
        {
            "tenant_id": w.tenant,
            "user_id": w.note["recipient_user_id"],
            "attention_type": w.note["attention_type"],
            "since": w.note["created_at"] - timedelta(hours=1),
            "up_to": 5,
        }
    ),
    "outbox._ADD_DELIVERIES": lambda w: Case(
        [
            {
                **outbox.delivery_row(w.tenant, w.note["id"], "email", "a@x.test", "queued", w.now),
                "id": "dlv_seam1",
            },
            {
                **outbox.delivery_row(w.tenant, None, "webhook", "ep_seam", "queued", w.now),
                "id": "dlv_seam2",
                "payload": {"event": "run.completed", "ok": True},
            },
        ],
        sa.select(t.deliveries).where(t.deliveries.c.id.like("dlv_seam%")).order_by("id"),
    ),
    "access._PEOPLE": lambda w: Case({"tenant_id": w.tenant, "run_id": "seam-1", "via": "run"}),
    "access._DROP_GRANTED": lambda w: Case(
        {"tenant_id": w.tenant, "run_id": "seam-1", "via": "run"},
        by(t.run_access, tenant_id=w.tenant, run_id="seam-1"),
    ),
    "access._INSERT": lambda w: Case(
        [
            {
                "tenant_id": w.tenant,
                "run_id": "seam-2",
                "user_id": w.owner,
                "via": "grt_seam",
                "may_answer": True,
                "may_amend": False,
            }
        ],
        by(t.run_access, tenant_id=w.tenant, run_id="seam-2", via="grt_seam"),
    ),
    "accounts._MEMBER_BY_ID": lambda w: Case({"ref": w.owner, "tenant_id": w.tenant}),
    "accounts._MEMBER_BY_EMAIL": lambda w: Case({"ref": w.email, "tenant_id": w.tenant}),
    "input_requests._GET": lambda w: Case({"tenant_id": w.tenant, "request_id": "req-seam"}),
    "input_requests._LOCK": lambda w: Case({"tenant_id": w.tenant, "request_id": "req-seam"}),
    "input_requests._ANSWER": lambda w: Case({"tenant_id": w.tenant, "request_id": "req-seam"}),
    "runs._INSERT_RUN": lambda w: Case(
        {**w.run, "run_id": "seam-new", "version": 1},
        by(t.runs, tenant_id=w.tenant, run_id="seam-new"),
    ),
    "outbox._ADD_ATTEMPTS": lambda w: Case(
        [
            {
                "id": "att_seam",
                "tenant_id": w.tenant,
                "delivery_id": w.delivery_id,
                "attempt_no": 7,
                "started_at": w.now,
                "finished_at": w.now,
                "outcome": "failed",
                "status_code": 503,
                "provider_message_id": None,
                "duration_ms": 12,
                "error": "HTTP 503",
                "response_excerpt": "busy",
            }
        ],
        by(t.delivery_attempts, id="att_seam"),
    ),
    "runs._GET_RUN": lambda w: Case({"tenant_id": w.tenant, "run_id": "seam-1"}),
    "runs._LOCK_RUN": lambda w: Case({"tenant_id": w.tenant, "run_id": "seam-1"}),
    "runs._LOCK_BATCH_2": lambda w: Case(
        {"t0": w.tenant, "r0": "seam-1", "t1": w.tenant, "r1": "seam-2"}
    ),
    "runs._INBOUND_BATCH_2": lambda w: Case(
        {
            **{f"{k[0]}0": w.inbound[k] for k in ("tenant_id", "source_id", "event_id")},
            **{f"{k[0]}1": w.inbound[k] for k in ("tenant_id", "source_id", "event_id")},
        }
    ),
    "runs._MOVE_RUN": lambda w: Case(moved(w), by(t.runs, tenant_id=w.tenant, run_id="seam-1")),
    "runs._ADD_TRANSITION": lambda w: Case(
        {**{c: w.transition[c] for c in runs.TRANSITION_COLUMNS}, "version": 77},
        by(t.transitions, tenant_id=w.tenant, run_id="seam-1", version=77),
    ),
    "runs._FIND_INBOUND": lambda w: Case(
        {c: w.inbound[c] for c in ("tenant_id", "source_id", "event_id")}
    ),
    "runs._INSERT_INBOUND": lambda w: Case(
        {**{c: w.inbound[c] for c in runs.INBOUND_COLUMNS}, "event_id": "e-seam"},
        by(t.inbound_events, tenant_id=w.tenant, event_id="e-seam"),
    ),
    "stalls.DUE": lambda w: Case({"now": w.now, "limit": 10}),
}


# --- running a statement both ways ------------------------------------------------------


def typed(rows: list[dict[str, Any]]) -> list[list[tuple[str, type, Any, Any]]]:
    """Rows as (key, type, value, UTC offset) — equal values of other types, or naive and
    aware datetimes, do not compare equal."""
    return [
        [(k, type(v), v, v.utcoffset() if isinstance(v, datetime) else None) for k, v in r.items()]
        for r in rows
    ]


@dataclass
class Outcome:
    returned: Any  # rows (SELECT, RETURNING) or the rowcount
    written: list[dict[str, Any]] | None
    sent: list[tuple[str, Any]]  # (SQL, driver parameters) as cursor listeners saw them


def run_once(conn: Connection, stmt: fast.Statement, case: Case, seam: bool) -> Outcome:
    sent: list[tuple[str, Any]] = []

    def seen(c: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        sent.append((sql, params))

    built = stmt.statement(conn.dialect.name)
    returns = bool(built.exported_columns)
    savepoint = conn.begin_nested()
    sa.event.listen(conn, "before_cursor_execute", seen)
    try:
        returned: Any
        if isinstance(case.params, list):
            if seam:
                stmt.many(conn, case.params)
            else:
                conn.execute(built, case.params)
            returned = None
        elif seam:
            returned = (
                stmt.rows(conn, **case.params) if returns else stmt.execute(conn, **case.params)
            )
        else:
            # SQLAlchemy keeps an INSERT's rowcount only when asked to
            result = conn.execute(built, case.params, execution_options={"preserve_rowcount": True})
            returned = [dict(r._mapping) for r in result] if returns else result.rowcount
        sa.event.remove(conn, "before_cursor_execute", seen)
        written = (
            None if case.written is None else [dict(r._mapping) for r in conn.execute(case.written)]
        )
    finally:
        if sa.event.contains(conn, "before_cursor_execute", seen):
            sa.event.remove(conn, "before_cursor_execute", seen)
        savepoint.rollback()
    return Outcome(returned, written, sent)


def anon(sql: str) -> str:
    """A literal's bind (``state == "open"``) is named after an object id, new on every
    compile: compare such names by their position only."""
    return re.sub(r"\b\d+ (\w+)", r"anon \1", sql)


def driver_value(value: Any) -> Any:
    """psycopg's JSON wrappers have no equality of their own: compare what they wrap."""
    if type(value).__module__.startswith("psycopg") and hasattr(value, "obj"):
        return (type(value).__name__, value.obj)
    return value


def same_parameters(seam: Any, through_sa: Any, null_json: set[Any]) -> bool:
    """Equal, but for the one documented difference: the seam sends ``None`` as SQL NULL
    where ``conn.execute`` sends the JSON ``null`` (``null_json``: how it looks)."""
    if isinstance(seam, Mapping):
        if set(seam) != set(through_sa):
            return False
        pairs = [(seam[k], through_sa[k]) for k in seam]
    else:
        if len(seam) != len(through_sa):
            return False
        pairs = list(zip(seam, through_sa, strict=True))
    return all(
        driver_value(a) == driver_value(b) or (a is None and driver_value(b) in null_json)
        for a, b in pairs
    )


@pytest.fixture
def world(client: TestClient, core: Core, creds: TenantCreds) -> Iterator[tuple[Connection, World]]:
    commit_runs(client, creds)
    with core.db.engine.connect() as conn:
        outer = conn.begin()
        try:
            yield conn, make_world(creds, conn)
        finally:
            outer.rollback()


def test_every_hot_statement_has_a_case() -> None:
    statements = hot_statements()
    assert len(statements) >= 15  # the write path's statements are all found
    assert set(statements) == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_seam_and_conn_execute_agree(world: tuple[Connection, World], name: str) -> None:
    conn, w = world
    if name in POSTGRES_ONLY and conn.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL statement (SQLite runs the two it replaces)")
    stmt = hot_statements()[name]
    case = CASES[name](w)
    seam = run_once(conn, stmt, case, seam=True)
    through_sa = run_once(conn, stmt, case, seam=False)

    # What each one returned and left behind: the same keys, values and types.
    if isinstance(seam.returned, list):  # SELECT, RETURNING
        assert typed(seam.returned) == typed(through_sa.returned), name
        assert seam.returned, name  # not vacuous: every case finds or makes a row
    elif seam.returned is not None:  # the rowcount
        assert seam.returned == through_sa.returned == 1, name
    if case.written is not None:
        assert seam.written and typed(seam.written) == typed(through_sa.written), name

    # What the driver was sent: the same SQL and parameters (one statement each; an
    # executemany may be rewritten by SQLAlchemy into a multi-row INSERT).
    assert len(seam.sent) == 1, seam.sent
    if isinstance(case.params, list):
        return
    assert len(through_sa.sent) == 1, through_sa.sent
    (seam_sql, seam_params), (sa_sql, sa_params) = seam.sent[0], through_sa.sent[0]
    assert anon(seam_sql) == anon(sa_sql), name
    json_null = {"null", ("Json", None), ("Jsonb", None)}
    assert same_parameters(seam_params, sa_params, json_null), (seam_params, sa_params)


def test_typed_values_come_back_as_conn_execute_gives_them(
    world: tuple[Connection, World],
) -> None:
    """Spot checks of what the comparison above rests on: aware UTC datetimes, decoded
    JSON, real booleans (SQLite stores 0/1)."""
    conn, w = world
    run = runs.get_run(conn, w.tenant, "seam-1")
    assert run is not None
    assert run.created_at.tzinfo is not None and run.created_at.utcoffset() == timedelta(0)
    assert run.metadata == {"repo": "acme/web", "n": 3, "nested": {"ok": True}}
    assert run.notify_on_complete is True
    assert (
        notes.count_recent(
            conn,
            w.tenant,
            w.note["recipient_user_id"],
            w.note["attention_type"],
            w.note["created_at"] - timedelta(hours=1),
            up_to=5,
        )
        == 1
    )


# --- the public API the seam reads ------------------------------------------------------


def test_compiled_names_and_fixed_values(core: Core) -> None:
    dialect = core.db.engine.dialect
    stmt = sa.select(t.runs.c.run_id).where(
        t.runs.c.tenant_id == sa.bindparam("tenant_id"), t.runs.c.state == "working"
    )
    compiled = stmt.compile(dialect=dialect)
    assert isinstance(compiled.string, str)
    names = list(compiled.positiontup) if compiled.positional else list(compiled.params)
    assert len(names) == 2 and names[0] == "tenant_id"
    fixed = names[1]
    # params: every name in the SQL, with the statement's own values; binds: their types
    assert dict(compiled.params) == {"tenant_id": None, fixed: "working"}
    assert compiled.binds["tenant_id"].required
    assert not compiled.binds[fixed].required
    assert isinstance(compiled.binds[fixed].type, sa.String)
    if compiled.positional:
        assert compiled.string.count("?") == 2
    else:
        assert all(f"%({n})s" in compiled.string for n in names), compiled.string


def test_compiled_params_with_no_one_and_many_names(core: Core) -> None:
    """``Compiled.params`` for no, one and several names: what the driver expects, in the
    SQL's order, with the statement's fixed values and processors; a missing value is a
    ``KeyError``."""
    dialect = core.db.engine.dialect
    aware = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    none = fast.Compiled(sa.select(sa.literal_column("1").label("one")), dialect)
    one = fast.Compiled(
        sa.select(t.runs.c.run_id).where(t.runs.c.tenant_id == sa.bindparam("tenant_id")),
        dialect,
    )
    many = fast.Compiled(
        sa.select(t.runs.c.run_id).where(
            t.runs.c.tenant_id == sa.bindparam("tenant_id"),
            t.runs.c.state == "working",
            t.runs.c.updated_at < sa.bindparam("before"),
        ),
        dialect,
    )
    when = t.UTCDateTime().dialect_impl(dialect).bind_processor(dialect)(aware)
    if none.positional:
        assert none.params({}) == []
        assert one.params({"tenant_id": "tn_1"}) == ["tn_1"]
        assert many.params({"tenant_id": "tn_1", "before": aware}) == ["tn_1", "working", when]
        assert many.params({"tenant_id": "tn_1", "before": None}) == ["tn_1", "working", None]
    else:
        assert none.params({}) == {}
        assert one.params({"tenant_id": "tn_1"}) == {"tenant_id": "tn_1"}
        sent = many.params({"tenant_id": "tn_1", "before": aware})
        assert list(sent.values()) == ["tn_1", "working", when]
        assert list(sent) == list(many.names)
    with pytest.raises(KeyError):
        one.params({})
    with pytest.raises(KeyError):
        many.params({"tenant_id": "tn_1"})


def test_the_seams_one_call_utc_bind_gives_what_the_types_own_chain_gives(core: Core) -> None:
    """``fast._utc_bind`` replaces UTCDateTime's bind chain (TypeDecorator, then the
    dialect's DATETIME): for every kind of aware datetime the bytes sent are the same,
    and a naive one is refused the same way."""
    dialect = core.db.engine.dialect
    chain = t.UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    fused = fast._bind_processor(t.UTCDateTime(), dialect)
    assert chain is not None and fused is not None and fused is not chain
    plus2 = timezone(timedelta(hours=2))
    values = [
        datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),  # no microseconds: still six digits
        datetime(2024, 1, 1, 1, 0, 0, 1, tzinfo=plus2),  # another zone, across a year
        datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # a three-digit year
        datetime(2026, 10, 25, 1, 30, fold=1, tzinfo=UTC),
        datetime.now(UTC),
    ]
    for value in values:
        assert fused(value) == chain(value), value
        assert type(fused(value)) is type(chain(value))
    # It remembers what it gave for UTC values (a transaction binds its ``now`` many
    # times): one value after another, equal instants in other zones, the two instants a
    # DST fold gives one local time (equal as datetimes of one tzinfo), and values bound
    # again after others all give the chain's answer.
    london = ZoneInfo("Europe/London")
    folds = [datetime(2026, 10, 25, 1, 30, fold=f, tzinfo=london) for f in (0, 1, 0, 1)]
    assert folds[0] == folds[1] and chain(folds[0]) != chain(folds[1])
    same_instant = [v.astimezone(plus2) for v in values[:2]] + values[:2]
    for value in [*values, *reversed(values), *same_instant, *folds, *values]:
        assert fused(value) == chain(value), value
        assert type(fused(value)) is type(chain(value))
    # One function per dialect, shared by every column of every statement.
    assert fast._bind_processor(t.UTCDateTime(), dialect) is fused
    for bind in (chain, fused):
        with pytest.raises(ValueError, match="naive"):
            bind(datetime(2024, 5, 6, 7, 8, 9))


def test_processors_of_the_types_the_seam_meets(core: Core) -> None:
    dialect = core.db.engine.dialect
    sqlite = dialect.name == "sqlite"
    aware = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)

    def procs(type_: Any) -> tuple[Any, Any]:
        impl = type_.dialect_impl(dialect)
        return impl.bind_processor(dialect), impl.result_processor(dialect, None)

    bind, result = procs(t.UTCDateTime())
    assert bind(aware) == ("2024-05-06 07:08:09.123456" if sqlite else aware)
    back = result("2024-05-06 07:08:09.123456" if sqlite else aware.replace(tzinfo=None))
    assert back == aware and back.utcoffset() == timedelta(0)
    with pytest.raises(ValueError, match="naive"):
        bind(aware.replace(tzinfo=None))

    doc = {"a": [1, None, True], "b": "é"}
    bind, result = procs(t.JSON)
    if sqlite:
        assert isinstance(bind(doc), str) and result(bind(doc)) == doc
    else:  # psycopg wraps on the way in and decodes on the way out itself
        assert type(bind(doc)).__name__ in ("Json", "Jsonb") and bind(doc).obj == doc
        assert result is None

    bind, result = procs(sa.Boolean())
    if sqlite:
        assert result(1) is True and result(0) is False
    else:
        assert result is None

    assert procs(sa.String())[1] is None  # plain columns cost nothing


def test_exported_columns_name_the_row_keys() -> None:
    select = sa.select(t.runs.c.run_id, t.runs.c.state, sa.func.count().label("n"))
    assert list(select.exported_columns.keys()) == ["run_id", "state", "n"]
    returning = t.runs.insert().returning(t.runs.c.version)
    assert list(returning.exported_columns.keys()) == ["version"]
    assert list(t.runs.insert().exported_columns.keys()) == []
    col = select.exported_columns["state"]
    assert isinstance(col.type, sa.String)


def test_cursor_listeners_see_seam_statements(core: Core, creds: TenantCreds) -> None:
    seen: list[tuple[str, Any, Any, bool]] = []

    def before(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        seen.append((sql, params, context, many))

    after: list[str] = []

    def on_after(conn: Any, cursor: Any, sql: str, *rest: Any) -> None:
        after.append(sql)

    engine = core.db.engine
    compiled = accounts._ROLE.compiled(engine.dialect)
    with engine.connect() as conn:
        conn.begin()  # begun already: the listeners see the seam's statement, not a BEGIN
        assert not conn.dispatch.before_cursor_execute
        assert not conn.dispatch.after_cursor_execute
        sa.event.listen(engine, "before_cursor_execute", before)
        sa.event.listen(engine, "after_cursor_execute", on_after)
        try:
            assert conn.dispatch.before_cursor_execute  # a connection made before, too
            assert accounts.membership_role(conn, creds.tenant_id, creds.owner_id) == "owner"
        finally:
            sa.event.remove(engine, "before_cursor_execute", before)
            sa.event.remove(engine, "after_cursor_execute", on_after)
        assert not conn.dispatch.before_cursor_execute
        accounts.membership_role(conn, creds.tenant_id, creds.owner_id)
    assert seen == [
        (
            compiled.sql,
            compiled.params({"tenant_id": creds.tenant_id, "user_id": creds.owner_id}),
            None,
            False,
        )
    ]
    assert after == [compiled.sql]


def test_driver_errors_come_back_as_sqlalchemy_errors(core: Core, creds: TenantCreds) -> None:
    row = {
        "tenant_id": creds.tenant_id,
        "seq": 1,
        "type": "x",
        "run_id": None,
        "notification_id": None,
        "user_id": None,
        "data": {},
        "created_at": datetime.now(UTC),
    }
    insert = fast.insert(t.feed_events)
    with core.db.engine.connect() as conn:
        outer = conn.begin()
        insert.execute(conn, **row)
        savepoint = conn.begin_nested()
        with pytest.raises(sa.exc.IntegrityError):
            insert.execute(conn, **row)
        savepoint.rollback()
        assert not conn.invalidated
        outer.rollback()


def test_a_statement_is_built_once_per_dialect() -> None:
    built: list[str] = []

    def build(dialect: str) -> fast.Built:
        built.append(dialect)
        return sa.select(t.runs.c.run_id)

    stmt = fast.Statement.per_dialect(build)
    from sqlalchemy.dialects import postgresql, sqlite

    for dialect in (sqlite.dialect(), postgresql.dialect(), sqlite.dialect()):
        stmt.compiled(dialect)
    assert built == ["sqlite", "postgresql"]
    assert isinstance(stmt.statement("sqlite"), sa.Select)
    with pytest.raises(TypeError):
        fast.Statement()


def test_sqlalchemy_is_within_the_bound_pyproject_declares() -> None:
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    doc = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    [req] = [Requirement(d) for d in doc["project"]["dependencies"] if d.startswith("sqlalchemy")]
    assert req.specifier.contains(sa.__version__), (req, sa.__version__)
    assert any(s.operator == "<" for s in req.specifier), "SQLAlchemy needs an upper bound"


def test_a_seam_statement_with_no_transaction_begins_one_as_conn_execute_does(
    core: Core, creds: TenantCreds
) -> None:
    """Else, on SQLite, a read's first statement ran before its BEGIN, in a snapshot of
    its own (test_read_snapshot)."""
    with core.db.engine.connect() as conn:
        assert conn.get_transaction() is None
        assert accounts.membership_role(conn, creds.tenant_id, creds.owner_id) == "owner"
        assert conn.in_transaction()


def test_a_connection_left_inside_a_pipeline_or_closed_is_unusable(db_url: str) -> None:
    """A database restart can cut an ``executemany`` off inside psycopg's pipeline; that
    connection cannot even roll back, so the seam invalidates it (the pool then discards
    it instead of resetting it and logging a traceback). A healthy one stays."""
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert fast._unusable(raw) is False
            if db_url.startswith("postgresql"):
                with raw.pipeline():  # type: ignore[union-attr]
                    assert fast._unusable(raw) is True
                assert fast._unusable(raw) is False
                raw.close()  # type: ignore[union-attr]
                assert fast._unusable(raw) is True
                conn.invalidate()
    finally:
        engine.dispose()
