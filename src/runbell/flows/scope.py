"""The capability and scope check every run write and read of a runtime credential goes
through (issue 18 item 1; the decisions are :mod:`runbell.domain.capabilities`).

A missing capability is a 403 naming it (``missing_capability``); a run outside the
credential's scope answers exactly like a run that does not exist (404), so a scope never
tells whether a run exists. People (user tokens, sessions) and unscoped keys pass.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from runbell.domain.errors import NotFound
from runbell.domain.principal import Principal
from runbell.domain.records import Run
from runbell.store import runs


def in_scope(who: Principal, run: Run) -> bool:
    """Whether ``run`` is within ``who``'s scope (always, for people and unscoped keys)."""
    if who.kind != "key" or who.scope is None:
        return True
    return who.scope.run_in_scope(run.run_id, run.created_by_credential)


def check_run(who: Principal, run: Run | None, run_id: str) -> Run:
    """``run``, or the 404 of a run that does not exist if it is missing or out of scope."""
    if run is None or not in_scope(who, run):
        raise NotFound(f"no run {run_id!r}")
    return run


def require_run(
    conn: Connection, who: Principal, run_id: str, capability: str, *, for_update: bool = False
) -> Run:
    """The run ``who`` may act on with ``capability``: 403 naming the capability if the
    credential lacks it, 404 if the run does not exist or is outside its scope."""
    who.require(capability)
    return check_run(who, runs.get_run(conn, who.tenant_id, run_id, for_update=for_update), run_id)


def may_create(who: Principal, run_id: str) -> None:
    """A new run's id must be within the creating credential's run patterns (or its
    bound run): 404 otherwise, as for a run outside the scope."""
    if who.kind == "key" and who.scope is not None and not who.scope.id_in_scope(run_id):
        raise NotFound(f"no run {run_id!r} in this credential's scope")
