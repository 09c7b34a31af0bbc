"""``POST /v1/runs/{run_id}/signals``: a runtime reports a run's state (DESIGN §6).

The hottest route of the API, and the one issue 21's P2 measures against a no-op
endpoint, so it is built to cost the event loop little besides the signal itself:

- a router of its own, matched before every other API router, and included without the
  routers' ``KnownQuery`` dependency: its one dependency, ``deps.runtime_caller``, makes
  that check, authenticates and checks the runtime key in the same order;
- a :class:`~runbell.api.lean.LeanRoute`: a well-formed request is answered by
  :func:`_lean` without FastAPI's generic dependency solver; anything else (a query
  string, a body that is not a valid JSON object, a run id or body FastAPI would refuse)
  goes to FastAPI's handler untouched, for the answer it always had;
- the core straight from the app, and the answer rendered once by our renderer (FastAPI
  would first walk it through the ``Mapping[str, Any]`` response model; the document
  says the same either way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from runbell.api.deps import RuntimeCaller, runtime_caller
from runbell.api.lean import LeanRoute, json_object
from runbell.api.openapi import problems
from runbell.api.responses import JSON
from runbell.api.routers.runs import RUN_ID, RunId
from runbell.api.schemas import SignalIn
from runbell.domain.records import ReportedError, RunReport
from runbell.flows import ownership, signals
from runbell.flows.context import Core
from runbell.flows.signals import Signal


async def _lean(request: Request) -> Response | None:
    """The signal answered without FastAPI's solver, or None (nothing done yet) for
    FastAPI's handler to answer. FastAPI's order: body parsed, the app's dependency
    (``reject_unstorable``), the route's (``runtime_caller``), then path and body checked."""
    doc = await json_object(request)
    if doc is None:
        return None
    who = await runtime_caller(request)
    try:
        run_id = RUN_ID.validate_python(request.path_params["run_id"])
        body = SignalIn.model_validate(doc)
    except ValidationError:
        return None
    return await post_signal(run_id, body, who, request)


class _SignalRoute(LeanRoute):
    async def lean(self, request: Request) -> Response | None:
        return await _lean(request)


router = APIRouter(prefix="/v1/runs", tags=["runs"], route_class=_SignalRoute)


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
