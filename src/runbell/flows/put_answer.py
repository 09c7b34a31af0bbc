"""``PUT /v1/runs/{id}`` and ``POST /v1/runs/{id}/progress`` as the API answers them: the
write is one unit of the process's writer (:mod:`runbell.flows.written`), awaited by the
event loop instead of a thread; the answer is the run snapshot.

A run the request created is answered from the row its unit wrote, as committed: nothing
can refer to it yet — no input request, notification, mismatch, amendment, operation or
review — so the only reads left are its links, its dependency and its schedule, and only
when the body named them. (Read again, as :func:`runbell.flows.runs.get_run` does, the
snapshot cost more than the creation itself: eight statements, ~2.5 ms of CPU; see
``bench/profile/p2-put.md``.) An update is answered with the run read again.
"""

from __future__ import annotations

from functools import partial

from anyio.to_thread import run_sync as to_thread
from sqlalchemy.exc import IntegrityError

from runbell.domain import capabilities
from runbell.domain.jobs import RunLink, check_links
from runbell.domain.principal import Principal
from runbell.domain.records import Run
from runbell.domain.text import public_text
from runbell.flows import dependencies, operations, schedule_views, views
from runbell.flows.context import Core
from runbell.flows.inputs import RunFields
from runbell.flows.runs import (
    PROGRESS_MAX,
    Counts,
    ProgressAnswer,
    RunSnapshot,
    get_run,
    progress_in_tx,
    put_run,
    put_run_in_tx,
)
from runbell.store import links as run_links
from runbell.store.db import Tx


def put_run_answer(
    core: Core, who: Principal, run_id: str, body: RunFields
) -> tuple[RunSnapshot, bool]:
    """``PUT /v1/runs/{id}``: :func:`~runbell.flows.runs.put_run`, answered with the run
    snapshot (see the module docstring)."""
    run, created = put_run(core, who, run_id, body)
    if not created:
        return get_run(core, who, run_id, capability=capabilities.REPORT), False
    return _created_snapshot(core, run, linked="links" in body), True


async def put_run_answer_async(
    core: Core, who: Principal, run_id: str, body: RunFields
) -> tuple[RunSnapshot, bool]:
    """:func:`put_run_answer` for an event loop: the request awaits the writer instead of
    holding a thread; a read (an update's snapshot, a new run's links, dependency or
    schedule) runs in a thread."""
    who.require(capabilities.REPORT)
    links = check_links(body["links"]) if "links" in body else None

    def unit(tx: Tx) -> tuple[Run, bool]:
        return put_run_in_tx(core, tx, who, run_id, body, links)

    key = (who.tenant_id, run_id)
    try:
        run, created = await core.writer.run_async(unit, key=key)
    except IntegrityError:  # lost a create race to another process: now an update
        run, created = await core.writer.run_async(unit, key=key)
    if not created:
        snapshot = await to_thread(
            partial(get_run, core, who, run_id, capability=capabilities.REPORT)
        )
        return snapshot, False
    linked = "links" in body
    if _reads_to_answer(run, linked):
        return await to_thread(partial(_created_snapshot, core, run, linked=linked)), True
    return _created_snapshot(core, run, linked=linked), True


def _reads_to_answer(run: Run, linked: bool) -> bool:
    return linked or views.depends_on_view(run) is not None or run.schedule_id is not None


def _created_snapshot(core: Core, run: Run, *, linked: bool) -> RunSnapshot:
    ledger = operations.snapshot(None, run)  # no operations yet: no read
    links: list[RunLink] = []
    dependency, schedule = None, None
    if _reads_to_answer(run, linked):
        with core.db.read() as conn:
            links = run_links.links_of(conn, run.tenant_id, run.run_id) if linked else []
            dependency = dependencies.view(conn, run)
            schedule = schedule_views.run_schedule(conn, run)
    return {
        **views.run_view(run, include_details=True),
        "pending_input_request": None,
        "open_notifications": [],
        "open_mismatches": 0,
        "pending_amendments": [],
        **ledger,
        "badge": views.badge_view(run.state, run.outcome, ledger["operations"]["counts"]),
        "pending_review": None,
        "links": links,
        "dependency": dependency,
        "schedule": schedule,
    }


async def record_progress_async(
    core: Core, who: Principal, run_id: str, message: str | None, counts: Counts | None
) -> ProgressAnswer:
    """:func:`record_progress` for an event loop: the request awaits the writer."""
    who.require(capabilities.REPORT)
    message = public_text(message, PROGRESS_MAX)
    return await core.writer.run_async(
        lambda tx: progress_in_tx(core, tx, who, run_id, message, counts),
        key=(who.tenant_id, run_id),
    )
