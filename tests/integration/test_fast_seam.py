"""What ``store/fast.py`` relies on in SQLAlchemy, checked against the installed version.

The seam runs hot statements on the driver's cursor with SQLAlchemy's own bind and result
processors, read through private attributes (``_bind_processors``, ``_result_columns``,
``_cached_result_processor``, ``_has_events``). pyproject.toml bounds SQLAlchemy
(``<2.2``); an upgrade inside or past that bound that changes any of these fails here,
on both databases, rather than as wrong values in production: every hot statement must
still compile to what the seam sends, and rows read through the seam must equal rows
read through ``conn.execute`` — datetimes, JSON and all.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import sqlalchemy as sa
from fastapi.testclient import TestClient

import runbell.store
from runbell.domain.records import Run
from runbell.flows.context import Core
from runbell.store import fast, runs
from runbell.store import notifications as notes
from runbell.testing import TenantCreds
from tests.conftest import bearer


def anon(text: str) -> str:
    """A literal's bind (``state == "open"``) is named after an object id, new on every
    compile: compare such names by their position only."""
    return re.sub(r"\b\d+ (\w+)", r"anon \1", text)


def hot_statements() -> dict[str, fast.Statement]:
    found = {}
    for info in pkgutil.iter_modules(runbell.store.__path__):
        module = importlib.import_module(f"runbell.store.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, fast.Statement):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_hot_statement_compiles_to_what_the_seam_sends(core: Core) -> None:
    statements = hot_statements()
    assert len(statements) >= 15  # the write path's statements are all found
    with core.db.read() as conn:
        dialect = conn.dialect
        for name, stmt in statements.items():
            compiled = stmt._for(conn)
            built = stmt._build() if stmt._build is not None else stmt._build_for(dialect.name)  # type: ignore[attr-defined]
            public = built.compile(dialect=dialect)
            assert anon(compiled.sql) == anon(public.string), name
            order = public.positiontup if public.positional else list(public.binds)
            assert [anon(n) for n in compiled.names] == [anon(n) for n in order], name
            # The private pieces the seam reads, in the shapes it reads them.
            assert isinstance(public._bind_processors, dict), name
            for column in public._result_columns:
                assert isinstance(column[0], str), name
                assert hasattr(column[3], "_cached_result_processor"), name
    assert isinstance(conn._has_events, bool)
    assert isinstance(core.db.engine._has_events, bool)


def test_rows_through_the_seam_equal_rows_through_sqlalchemy(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    body = {
        "owner": creds.owner_email,
        "state": "working",
        "notify_on_complete": True,
        "metadata": {"repo": "acme/web", "n": 3, "nested": {"ok": True}},
    }
    r = client.put("/v1/runs/seam-1", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text
    r = client.post(
        "/v1/runs/seam-1/signals",
        json={"event_id": "e1", "state": "completed", "reason": "done"},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code in (200, 201, 202), r.text
    params = {"tenant_id": creds.tenant_id, "run_id": "seam-1"}
    with core.db.read() as conn:
        for stmt in (runs._GET_RUN, notes._OPEN_FOR_RUN):
            built = stmt._build()  # type: ignore[misc]
            through_sa = [dict(row._mapping) for row in conn.execute(built, params)]
            through_seam = stmt.rows(conn, **params)
            assert through_seam == through_sa
            assert through_seam  # not vacuous: the run and its notification exist
    run = through_seam_run(core, creds)
    assert run.created_at.tzinfo is not None  # aware UTC, as conn.execute gives
    assert run.metadata == body["metadata"]


def through_seam_run(core: Core, creds: TenantCreds) -> Run:
    with core.db.read() as conn:
        found = runs.get_run(conn, creds.tenant_id, "seam-1")
    assert found is not None
    return found


def test_sqlalchemy_is_within_the_bound_pyproject_declares() -> None:
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    doc = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    [req] = [Requirement(d) for d in doc["project"]["dependencies"] if d.startswith("sqlalchemy")]
    assert req.specifier.contains(sa.__version__), (req, sa.__version__)
    assert any(s.operator == "<" for s in req.specifier), "SQLAlchemy needs an upper bound"
