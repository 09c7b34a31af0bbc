"""HTTP hooks (issue 20 item 2): ``POST /v1/hooks/claude-code`` and ``/v1/hooks/codex``.

Claude Code's ``type: "http"`` hooks POST the JSON a command hook reads on stdin; this
face answers with the JSON ``runbell hook …`` would print (``{}`` when it would print
nothing), so no process starts per event. It authenticates a runtime key (a scoped one
needs what the command hook needs: ``runs.report``, ``input_requests.create``,
``runs.read``), plans the event with the command hook's own pure mapping, and carries the
plan out through :mod:`runbell.flows.hook_reports`. A ``PermissionRequest`` (or a gated
``PreToolUse``) waits here for the person's answer, without holding a worker thread: the
wait sleeps on the tenant's feed like a long-poll and re-reads the request when it moves,
for at most ``timeout`` seconds (and ``hook_wait_max_s``); an event that asks nothing
answers at once.
"""

from __future__ import annotations

import contextlib
import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from pydantic import ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from runbell.api.deps import CoreDep, Runtime
from runbell.api.openapi import problems, rule, rules
from runbell.api.schemas import Storable
from runbell.domain.errors import ValidationFailed
from runbell.domain.principal import Principal
from runbell.flows import hook_reports
from runbell.flows.context import Core
from runbell.hooks import gate
from runbell.hooks.mapping import HookPlan, PayloadError, plan_codex_hook

router = APIRouter(prefix="/v1/hooks", tags=["hooks"])


class HookIn(Storable):
    """A hook's JSON input, as the runtime sends it: the common fields checked here, the
    rest (each event's own) read by the mapping, which ignores what it does not know."""

    model_config = ConfigDict(extra="allow")
    hook_event_name: str = Field(min_length=1, max_length=100)
    session_id: str = Field(min_length=1, max_length=200)


#: How long a hook waits for an answer unless the URL says (``runbell hook``'s default).
DEFAULT_WAIT = 120.0
RESPONSES = {
    200: {
        "description": "The hook's answer, as the command hook prints it: a permission "
        "decision, or {} (go on as if no hook had decided)",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    **problems(401, 403, 404, 409, 413, 422, 503),
}
RULES = rules(
    rule("gate", "Tool or Tool(pattern), e.g. Bash or Write(/etc/**)"),
    rule("owner", "a member of the tenant, when the event creates a run"),
    rule("body", "a hook payload this runtime sends (hook_event_name, session_id, …)"),
)
Owner = Annotated[
    str | None,
    Query(
        max_length=320,
        description="who owns the runs this hook creates (member id or email), as "
        "RUNBELL_OWNER for the command hook",
    ),
]
Timeout = Annotated[
    float,
    Query(
        ge=1,
        le=3000,
        description="seconds to wait for a person's answer to a permission prompt; give "
        "the hook's own timeout some margin beyond it",
    ),
]


async def _answer(
    core: Core, who: Principal, plan: HookPlan, timeout: float, owner: str | None
) -> dict[str, Any]:
    await run_in_threadpool(hook_reports.carry_out, core, who, plan, owner)
    approval = plan.approval
    if approval is None:
        return {}
    wait = min(timeout, core.settings.hook_wait_max_s)
    await run_in_threadpool(hook_reports.ask, core, who, approval, wait)
    deadline = time.monotonic() + wait
    with core.hub.listen(who.tenant_id) as listener:
        while True:
            ended = await run_in_threadpool(hook_reports.ended, core, who, approval)
            remaining = deadline - time.monotonic()
            if ended is not None or remaining <= 0:
                break
            # Woken by the answer's commit; the timeout only covers a lost wake-up.
            await listener.wait(min(remaining, core.settings.feed_fallback_poll_s))
    if ended is None or ended.state == "expired":
        # Nobody answered in time: the agent's own flow decides now (best effort).
        with contextlib.suppress(Exception):
            await run_in_threadpool(hook_reports.asked_in_terminal, core, who, approval)
    if ended is None:
        output = gate.answer_output(approval, "timeout", None, None, False)
    else:
        output = gate.answer_output(
            approval, ended.state, ended.decision, ended.value, ended.edited
        )
    return output or {}


def _plan(build: Any) -> HookPlan:
    try:
        plan: HookPlan = build()
    except PayloadError as exc:
        raise ValidationFailed(str(exc), field="body") from None
    return plan


@router.post("/claude-code", responses=RESPONSES, openapi_extra=RULES)
async def claude_code(
    body: HookIn,
    who: Runtime,
    core: CoreDep,
    timeout: Timeout = DEFAULT_WAIT,
    owner: Owner = None,
    gate_rule: Annotated[
        list[str] | None,
        Query(
            alias="gate",
            max_length=500,
            description="a tool (and pattern) to ask about before it runs in a headless "
            "session, as `runbell hook claude-code --gate` (repeatable)",
        ),
    ] = None,
    entrypoint: Annotated[
        str | None,
        Header(
            alias=gate.ENTRYPOINT_HEADER,
            max_length=100,
            description="Claude Code's CLAUDE_CODE_ENTRYPOINT: `cli` (interactive) "
            "skips the PreToolUse gate",
        ),
    ] = None,
) -> dict[str, Any]:
    """One Claude Code hook event, carried out as `runbell hook claude-code` would: the
    turn's run reported, a permission prompt put to the person and answered."""
    try:
        chosen = gate.parse_gates(gate_rule or ())
    except ValueError as exc:
        raise ValidationFailed(str(exc), field="gate") from None
    payload = body.model_dump()
    turn = await run_in_threadpool(hook_reports.claude_turn, core, who, body.session_id)
    plan = _plan(lambda: gate.plan_gate(payload, turn, chosen, entrypoint))
    return await _answer(core, who, plan, timeout, owner)


@router.post("/codex", responses=RESPONSES, openapi_extra=RULES)
async def codex(
    body: HookIn,
    who: Runtime,
    core: CoreDep,
    timeout: Timeout = DEFAULT_WAIT,
    owner: Owner = None,
) -> dict[str, Any]:
    """One Codex hook event (the hooks.json payload, not the legacy notify argument),
    carried out as `runbell hook codex` would."""
    payload = body.model_dump()
    plan = _plan(lambda: plan_codex_hook(payload))
    return await _answer(core, who, plan, timeout, owner)
