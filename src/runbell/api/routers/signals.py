"""``POST /v1/runs/{run_id}/signals``: a runtime reports a run's state (DESIGN §6).

The hottest route of the API, and the one issue 21's P2 measures against a no-op
endpoint, so it is built to cost the event loop little besides the signal itself:

- a router of its own, matched before every other API router, and included without the
  routers' ``KnownQuery`` dependency: its one dependency, ``deps.runtime_caller``, makes
  that check, authenticates and checks the runtime key in the same order;
- the core straight from the app, and the answer rendered once by our renderer (FastAPI
  would first walk it through the ``Mapping[str, Any]`` response model; the document
  says the same either way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runbell.api.deps import RuntimeCaller
from runbell.api.openapi import problems
from runbell.api.responses import JSON
from runbell.api.routers.runs import RunId
from runbell.api.schemas import SignalIn
from runbell.domain.records import ReportedError, RunReport
from runbell.flows import ownership, signals
from runbell.flows.context import Core
from runbell.flows.signals import Signal

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.post(
    "/{run_id}/signals",
    response_model=Mapping[str, Any],
    responses=problems(401, 403, 404, 409, 413, 422, 503),
)
async def post_signal(run_id: RunId, body: SignalIn, who: RuntimeCaller, request: Request) -> JSON:
    """Report a run state. Outcome: applied | duplicate | stale | mismatch | rejected."""
    core: Core = request.app.state.core
    source = signals.remembered_source(core, who)
    if source is None:
        source = await run_in_threadpool(signals.api_source, core, who)
    signal = Signal(
        event_id=body.event_id,
        state=body.state,
        sequence=body.sequence,
        at=body.at,
        reason=body.reason,
        error=cast(ReportedError, body.error.model_dump()) if body.error else None,  # validated
        effects_verified=body.effects_verified,
        report=cast(RunReport, body.report.model_dump(exclude_none=True)) if body.report else None,
        actor=ownership.actor_of(who, body.worker_id),
    )
    result = await signals.accept_signal_async(core, who.tenant_id, source, run_id, signal, who=who)
    return JSON(result.as_dict())
