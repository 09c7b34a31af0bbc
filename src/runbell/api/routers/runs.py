"""Runs: create/update, read, history and progress (DESIGN §6); signals are
:mod:`runbell.api.routers.signals`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, cast

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import Field, TypeAdapter, ValidationError

from runbell.api.deps import CoreDep, Runtime, Who, principal, require_runtime
from runbell.api.lean import LeanRoute, json_object
from runbell.api.openapi import problems, rule, rules
from runbell.api.responses import JSON
from runbell.api.schemas import RUN_ID_PATTERN, ProgressIn, RunPut
from runbell.domain.overview import GROUPS, STATES
from runbell.flows import overview, put_answer, run_history, runs
from runbell.flows.inputs import RunFields

router = APIRouter(prefix="/v1/runs", tags=["runs"])
RunId = Annotated[
    str, Path(min_length=1, pattern=RUN_ID_PATTERN, description="client-chosen run id")
]
# The run id as FastAPI checks the path parameter (the same pydantic constraint), for the
# lean paths (``PUT`` here, the signal route's).
RUN_ID: TypeAdapter[str] = TypeAdapter(Annotated[str, Field(min_length=1, pattern=RUN_ID_PATTERN)])


def _listed(values: tuple[str, ...]) -> Mapping[str, Any]:
    """A repeatable query value naming one of ``values``, or a comma list of them."""
    one = "|".join(values)
    items = {
        "anyOf": [
            {"type": "string", "enum": list(values)},
            # What the server takes: blanks around names and empty parts are ignored.
            {"type": "string", "pattern": rf"^\s*({one})?\s*(,\s*({one})?\s*)*$"},
        ]
    }
    return {"anyOf": [{"type": "array", "items": items}, {"type": "null"}]}


PUT_RULES = rules(
    rule("owner", "required when the run does not exist yet (optional on an update)"),
    rule("owner", "a user id (usr_…) or the email of a current member of the tenant"),
    rule("authority.users", "each a user id or the email of a current member"),
    rule("authority.viewers", "each a user id or the email of a current member"),
    rule("authority.approvers", "each a user id or the email of a current member"),
    rule("authority.amenders", "each a user id or the email of a current member"),
    rule("state", "only on creation; an existing run changes state with POST …/signals"),
    rule("links.*", "no kind:id twice; id not blank, without control characters"),
    rule("links.*.url", "an http(s) URL without credentials (shown, never fetched)"),
    rule("depends_on.run", "a run of this tenant the caller may see, not this one"),
    rule("depends_on.request_id", "an approval request of that run"),
    rule("depends_on.version", "at most the request's current version"),
    rule("done_when.*", "text not blank; operation ids not blank, none twice"),
    rule("schedule.id", "a schedule of this tenant; only on creation (409 if not active)"),
    rule(
        "worker_id",
        "only on creation; on an existing run it equals the current worker (another worker "
        "takes the run over with POST …/claim)",
    ),
)


async def put_run(run_id: RunId, body: RunPut, who: Runtime, core: CoreDep) -> JSON:
    """Create a run (201) or update its descriptive fields (200)."""
    fields = cast(RunFields, body.model_dump(exclude_unset=True, mode="json"))  # RunPut's
    snapshot, created = await put_answer.put_run_answer_async(core, who, run_id, fields)
    # Rendered once by our renderer, as the signal route does (FastAPI would first walk the
    # snapshot through the ``Mapping[str, Any]`` response model; the bytes are the same).
    return JSON(snapshot, status_code=201 if created else 200)


async def _lean_put(request: Request) -> Response | None:
    """``PUT`` answered without FastAPI's solver (:mod:`runbell.api.lean`), or None
    (nothing done yet) for FastAPI's handler to answer. FastAPI's order: the body parsed,
    the app's dependency (``reject_unstorable``), the router's (``known_query``: with no
    query string there is nothing for it to refuse), the endpoint's (``Runtime``,
    ``CoreDep``), then the path and the body checked."""
    doc = await json_object(request)
    if doc is None:
        return None
    who = require_runtime(await principal(request))
    try:
        run_id = RUN_ID.validate_python(request.path_params["run_id"])
        body = RunPut.model_validate(doc)
    except ValidationError:
        return None
    return await put_run(run_id, body, who, request.app.state.core)


class _PutRoute(LeanRoute):
    async def lean(self, request: Request) -> Response | None:
        return await _lean_put(request)


router.add_api_route(
    "/{run_id}",
    put_run,
    methods=["PUT"],
    status_code=200,
    response_model=Mapping[str, Any],
    responses={
        201: {"description": "The run was created; the body is the run snapshot"},
        **problems(401, 403, 409, 413, 422, 503),
    },
    openapi_extra=PUT_RULES,
    route_class_override=_PutRoute,
)


@router.get("/{run_id}", responses=problems(401, 403, 404, 422, 503))
def get_run(run_id: RunId, who: Who, core: CoreDep) -> Mapping[str, Any]:
    """The run snapshot: state, version, open notifications. 404 if you may not see it."""
    return runs.get_run(core, who, run_id)


@router.get(
    "",
    responses=problems(401, 403, 422, 503),
    openapi_extra=rules(
        rule("after", "a next_cursor this listing gave, with the same state and group"),
        rule("link", "kind:id with an id of at most 200 characters; not combined with group"),
    ),
)
def list_runs(
    who: Who,
    core: CoreDep,
    state: Annotated[
        list[str] | None,
        Query(
            description="keep runs in these states (repeatable, or a comma list)",
            json_schema_extra=_listed(STATES),
        ),
    ] = None,
    group: Annotated[
        list[str] | None,
        Query(
            description="the runs overview: needs_you, stalled, needs_review, working, "
            "finished (repeatable, or a comma list); each run then carries its `group`",
            json_schema_extra=_listed(GROUPS),
        ),
    ] = None,
    after: Annotated[
        str | None,
        Query(max_length=200, description="next_cursor of the previous page"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200, description="runs per page (per group)")] = 50,
    link: Annotated[
        str | None,
        Query(
            min_length=3,  # the shortest kind:id, a:b
            max_length=233,
            pattern=r"^[a-z][a-z0-9_.-]{0,31}:.+$",
            description="only the runs linked to kind:id (conversation:abc): every job "
            "of one conversation; not combined with group",
        ),
    ] = None,
) -> Mapping[str, Any]:
    """The runs the caller may see: by id, or grouped as the runs overview (``group=``).

    Tenant owners, admins and API keys see every run of the tenant; others the runs they
    own or whose authority names them."""
    return overview.list_runs(
        core, who, groups=group, states=state, after=after, limit=limit, link=link
    )


@router.get("/{run_id}/history", responses=problems(401, 403, 404, 422, 503))
def get_history(run_id: RunId, who: Who, core: CoreDep) -> Mapping[str, Any]:
    """Every step of the run, oldest first, each naming who or what caused it
    (``actor``: credential kind and id, worker, person, source; never a secret):
    transitions, operation changes and findings, owner changes, answers, amendments.
    404 if you may not see the run."""
    return run_history.run_history(core, who, run_id)


@router.post(
    "/{run_id}/progress", status_code=202, responses=problems(401, 403, 404, 413, 422, 503)
)
async def post_progress(
    run_id: RunId, body: ProgressIn, who: Runtime, core: CoreDep
) -> Mapping[str, Any]:
    """A heartbeat: live feed only, never a push (invariant 5)."""
    return await put_answer.record_progress_async(core, who, run_id, body.message, body.counts)
