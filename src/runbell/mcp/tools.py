"""The six tools a model uses to keep a person informed, written once over a
:class:`~runbell.mcp.backend.Backend` (in-process for ``/mcp``, HTTP for ``runbell mcp``).

Waiting is bounded: ``await_run`` and ``request_input`` wait on the event feed's
long-poll (no busy polling) for at most ``wait_seconds`` (default 25, at most 50), then
return ``status: "waiting"`` with a handle and a sentence telling the model to call again
with it. Runbell keeps the state durably, so a handle survives the MCP session, the
client and the server process. A client that declares the MCP Tasks extension gets a task
for these two tools instead (:mod:`runbell.mcp.tasks`).

Arguments are as strict as the HTTP API: every parameter is typed strictly (``"yes"`` is
not a boolean, ``"7"`` not an integer; the SDK refuses them naming the parameter), and
before a tool does anything, the request bodies it will send are validated by the API's
own models (:mod:`runbell.api.schemas`) in strict mode, so every rule of the route (and
any rule added there later) holds here too, and nothing is half done: ``report_run``
never creates a run whose first signal it then refuses. A refusal names the parameter:
``Invalid request (422): reason: String should have at most 500 characters``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, Strict, StrictBool, StrictInt, StrictStr, ValidationError

from runbell import __version__
from runbell.api.schemas import RUN_ID_PATTERN, CancelIn, InputRequestIn, RunPut, SignalIn
from runbell.mcp.backend import Backend, Problem
from runbell.mcp.tasks import RunbellTasks

WAIT_DEFAULT = 25.0
WAIT_MAX = 50.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})

INSTRUCTIONS = """\
Runbell tells the person you work for what your background work is doing, on their phone
or in their inbox, and brings their answers back to you.
- When you start a long task, call report_run(run_id, state="working", title=...) with a
  run id you keep for the whole task; when you finish, report_run(state="completed"); if
  you give up, report_run(state="failed", reason=...). The person is told once per change.
- When you need a decision, an approval or a piece of information from the person, call
  request_input: it notifies them and waits for the answer. If it returns
  status "waiting", nobody has answered yet: call request_input again with the handle it
  gave you (never open a second request for the same question).
- To wait for another run to finish, call await_run; "waiting" means call it again.
- list_attention shows runs that need someone (blocked, stalled, or to review);
  get_run shows one run; cancel_run asks a run to stop.
Summaries and reasons are shown on lock screens: keep them short and free of secrets; put
sensitive detail in `details`, which is shown only after sign-in."""

Wait = Annotated[
    float,
    Strict(),
    Field(ge=0, le=WAIT_MAX, description="seconds to wait before returning 'waiting'"),
]
RunId = Annotated[
    StrictStr,
    Field(
        min_length=1,
        pattern=RUN_ID_PATTERN,
        description="your id for the run (letters, digits, . _ : @ ~ -), the same for the "
        "whole task",
    ),
]


def checked(model: type[BaseModel], body: dict[str, Any], names: dict[str, str]) -> None:
    """``body`` validated by the HTTP API's ``model`` in strict mode, as the route would
    validate it; a refusal names the tool's parameter (``names`` maps the body's fields
    to parameters where they differ)."""
    try:
        model.model_validate_json(json.dumps(body), strict=True)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = [str(p) for p in first.get("loc", ())]
        field = names.get(loc[0], loc[0]) if loc else "arguments"
        raise ToolError(f"Invalid request (422): {field}: {first.get('msg')}") from None


def _fail(exc: Problem) -> ToolError:
    if exc.status == 404:
        return ToolError(f"not found: {exc.detail}")
    return ToolError(f"{exc.title} ({exc.status}): {exc.detail}")


async def wait_until(
    backend: Backend, check: Callable[[], Awaitable[dict[str, Any] | None]], wait: float
) -> dict[str, Any] | None:
    """``check()``'s first non-None answer, re-checked on every feed event of the tenant,
    or None once ``wait`` seconds have passed."""
    deadline = time.monotonic() + wait
    cursor = await backend.feed_head()  # before the first check: no event falls between
    while True:
        done = await check()
        if done is not None:
            return done
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        cursor = await backend.wait_events(cursor, min(remaining, 25.0))


class Tools:
    """The tools over one backend factory (``backend()`` is the current caller's)."""

    def __init__(self, backend: Callable[[], Backend]) -> None:
        self.backend = backend

    async def _ensure_run(
        self, b: Backend, run_id: str, owner: str | None, **fields: Any
    ) -> tuple[dict[str, Any], bool]:
        """The run and whether it is new (created ``working``, for ``owner`` or the
        backend's default owner)."""
        try:
            return dict(await b.get_run(run_id)), False
        except Problem as exc:
            if exc.status != 404:
                raise
        who = owner or b.default_owner
        if not who:
            raise Problem(422, "Invalid request", "a new run needs an owner: pass owner (an email)")
        return dict(await b.put_run(run_id, {**fields, "owner": who, "state": "working"})), True

    async def report_run(
        self,
        run_id: RunId,
        state: Literal["working", "input_required", "completed", "failed", "cancelled"]
        | None = None,
        title: Annotated[StrictStr | None, Field(max_length=500)] = None,
        objective: Annotated[StrictStr | None, Field(max_length=10_000)] = None,
        reason: Annotated[
            StrictStr | None,
            Field(max_length=500, description="PUBLIC one line: why, shown to the person"),
        ] = None,
        error: Annotated[
            StrictStr | None,
            Field(max_length=2000, description="private diagnostics on failure"),
        ] = None,
        owner: Annotated[
            StrictStr | None, Field(description="email of the person the run is for (new runs)")
        ] = None,
        notify_on_complete: Annotated[
            StrictBool | None, Field(description="push (not only the inbox) when it completes")
        ] = None,
        event_id: Annotated[
            StrictStr | None,
            Field(max_length=200, description="reuse to retry the same report safely"),
        ] = None,
    ) -> dict[str, Any]:
        """Create or update a run and report its state (working, completed, failed, …).

        Call it with state="working" when a long task starts, and with "completed" or
        "failed" when it ends: the person is notified once per change, never twice."""
        b = self.backend()
        fields: dict[str, Any] = {
            k: v for k, v in (("title", title), ("objective", objective)) if v
        }
        if notify_on_complete is not None:
            fields["notify_on_complete"] = notify_on_complete
        checked(RunPut, {**fields, **({"owner": owner} if owner else {})}, {})
        body: dict[str, Any] = {
            "event_id": event_id if event_id is not None else f"mcp-{uuid.uuid4().hex}"
        }
        if state is not None:
            body["state"] = state
            if reason:
                body["reason"] = reason
            if error:
                body["error"] = {"message": error}
            checked(SignalIn, body, {})
        try:
            run, created = await self._ensure_run(b, run_id, owner, **fields)
            if fields and not created:
                run = dict(await b.put_run(run_id, fields))
            if state is None or (created and state == "working"):
                return {
                    "run_id": run_id,
                    "outcome": "created" if created else "unchanged",
                    "state": run["state"],
                    "version": run["version"],
                }
            result = await b.signal(run_id, body)
        except Problem as exc:
            raise _fail(exc) from exc
        now = result["run"]
        return {
            "run_id": run_id,
            "outcome": result["outcome"],
            "state": now["state"],
            "version": now["version"],
            "notified": len(result.get("notifications") or []),
        }

    async def request_input(
        self,
        run_id: RunId,
        summary: Annotated[
            StrictStr | None,
            Field(max_length=300, description="the question, short and safe for a lock screen"),
        ] = None,
        kind: Literal["approval", "choice", "text"] = "approval",
        options: Annotated[
            list[StrictStr] | None,
            Field(max_length=50, description="kind=choice: the choices"),
        ] = None,
        details: Annotated[
            dict[str, Any] | None,
            Field(description="sensitive context (arguments, risk), shown after sign-in only"),
        ] = None,
        action: Annotated[
            dict[str, Any] | None,
            Field(
                description="what approving lets happen, shown first to the person: "
                '{"kind": "shell", "command": …, "cwd"?}, {"kind": "file_write", "path", '
                '"content"?}, {"kind": "file_edit", "path", "diff"}, {"kind": "web_fetch", '
                '"url"}, {"kind": "mcp_tool", "server"?, "tool", "arguments"} or '
                '{"kind": "generic", "tool", "arguments"}; sensitive like details'
            ),
        ] = None,
        expires_in_seconds: Annotated[StrictInt | None, Field(ge=30, le=30 * 86_400)] = None,
        handle: Annotated[
            StrictStr | None,
            Field(
                min_length=1,
                pattern=RUN_ID_PATTERN,
                description="the handle a previous call returned: keep waiting for it",
            ),
        ] = None,
        wait_seconds: Wait = WAIT_DEFAULT,
        owner: Annotated[StrictStr | None, Field(description="email, for a new run")] = None,
        editable: Annotated[
            dict[str, Any] | None,
            Field(
                description='kind=approval: {"schema": <JSON Schema subset>, "value": ...}, '
                "a value (a command, a task list) the person may edit before approving"
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Ask the person for an approval, a choice or a text answer, and wait for it.

        They are notified (phone, inbox) and answer from any device. Returns the answer
        (status "answered", with decision and value), or "expired"/"superseded"/
        "cancelled", or status "waiting" with a handle: then call request_input again with
        that handle (and no summary) to keep waiting. Never ask twice for one question.
        With ``editable``, an approval may come back ``edited: true`` with the edited
        value: use that value, not the one you proposed."""
        b = self.backend()
        body: dict[str, Any] | None = None
        if handle is None:
            if not summary:
                raise ToolError("Invalid request (422): summary: give the question to ask")
            body = {
                "input_request_id": f"mcp-{uuid.uuid4().hex[:20]}",
                "kind": kind,
                "summary": summary,
                "details": details,
            }
            if action is not None:
                body["action"] = action
            if options:
                body["options"] = [{"id": o, "label": o} for o in options]
            if editable is not None:
                body["editable"] = editable
            if expires_in_seconds:
                at = datetime.now(UTC) + timedelta(seconds=expires_in_seconds)
                body["expires_at"] = at.isoformat().replace("+00:00", "Z")
            checked(InputRequestIn, body, {"expires_at": "expires_in_seconds"})
            if owner:
                checked(RunPut, {"owner": owner}, {})
        try:
            if body is not None:
                await self._ensure_run(b, run_id, owner)
                await b.open_input_request(run_id, body)
            request_id = str(body["input_request_id"] if body is not None else handle)

            seen: dict[str, Any] = {}

            async def closed() -> dict[str, Any] | None:
                req = await b.get_input_request(request_id)
                seen.update(req)
                return None if req["state"] == "pending" else dict(req)

            req = await wait_until(b, closed, wait_seconds)
        except Problem as exc:
            raise _fail(exc) from exc
        if req is None:
            return {
                "status": "waiting",
                "handle": request_id,
                "since": seen.get("created_at"),
                "message": "Not finished yet: nobody has answered. Call request_input again "
                f"with run_id={run_id!r} and handle={request_id!r} to keep waiting "
                "(do not open a new request).",
            }
        state = req["state"]
        out = {
            "status": state,
            "handle": request_id,
            "run_id": req["run_id"],
            "since": req.get("created_at"),
        }
        if state == "answered":
            who = req.get("answered_by") or {}
            edited = bool(req.get("edited"))
            value = req.get("value")
            shown = value if isinstance(value, str) else json.dumps(value)
            out |= {
                "decision": req.get("decision"),
                "value": value,
                "edited": edited,
                "answered_by": who.get("email") or who.get("id"),
                "message": f"The person answered: {req.get('decision')}"
                + (
                    f" with an edited value: {shown}. Use exactly this value"
                    if edited
                    else (f" ({shown})" if value is not None else "")
                )
                + ".",
            }
        else:
            out["message"] = f"The request is {state}; nobody approved it. Do not proceed."
        return out

    async def await_run(self, run_id: RunId, wait_seconds: Wait = WAIT_DEFAULT) -> dict[str, Any]:
        """Wait until a run finishes (completed, failed or cancelled) and return its state.

        Returns status "finished" with the final state, or status "waiting" with the
        current state after wait_seconds: then call await_run again with the same run_id."""
        b = self.backend()

        async def finished() -> dict[str, Any] | None:
            run = await b.get_run(run_id)
            return dict(run) if run["state"] in TERMINAL else None

        try:
            run = await wait_until(b, finished, wait_seconds)
            if run is None:
                now = await b.get_run(run_id)
                return {
                    "status": "waiting",
                    "handle": run_id,
                    "state": now["state"],
                    "since": now.get("created_at"),
                    "message": f"Not finished yet (state {now['state']}). Call await_run "
                    f"again with run_id={run_id!r} to keep waiting.",
                }
        except Problem as exc:
            raise _fail(exc) from exc
        return {
            "status": "finished",
            "run_id": run_id,
            "state": run["state"],
            "since": run.get("created_at"),
            "version": run["version"],
            "stop_reason": run.get("stop_reason"),
            "error": run.get("error"),
        }

    async def list_attention(
        self, limit: Annotated[StrictInt, Field(ge=1, le=100)] = 20
    ) -> dict[str, Any]:
        """Runs that need someone now: waiting for input, stalled, or finished but to
        review. Use it to see what is blocked before starting or resuming work."""
        try:
            page = await self.backend().attention(limit)
        except Problem as exc:
            raise _fail(exc) from exc
        runs = []
        for row in page["runs"]:
            if row["group"] == "working" and row["state"] != "input_required":
                continue  # busy, not waiting for anyone
            group = "waiting_for_input" if row["group"] == "working" else row["group"]
            runs.append(
                {
                    "run_id": row["run_id"],
                    "title": row.get("title"),
                    "state": row["state"],
                    "group": group,
                    "pending_input_request": row.get("pending_input_request"),
                    "summary": row.get("counts_text"),
                }
            )
        return {"runs": runs, "count": len(runs)}

    async def get_run(self, run_id: RunId) -> dict[str, Any]:
        """One run's current snapshot: state, version, pending input request, progress."""
        try:
            return dict(await self.backend().get_run(run_id))
        except Problem as exc:
            raise _fail(exc) from exc

    async def cancel_run(
        self,
        run_id: RunId,
        reason: Annotated[
            StrictStr | None, Field(max_length=500, description="PUBLIC: why")
        ] = None,
    ) -> dict[str, Any]:
        """Ask a run to stop (it moves to "stopping"; its runtime reports "cancelled").
        Only when the person asked for it, or the run is clearly not wanted any more."""
        checked(CancelIn, {"reason": reason} if reason else {}, {})
        try:
            result = await self.backend().cancel(run_id, reason)
        except Problem as exc:
            raise _fail(exc) from exc
        run = result["run"]
        return {"outcome": result["outcome"], "run_id": run_id, "state": run["state"]}


TOOL_NAMES = (
    "report_run",
    "request_input",
    "await_run",
    "list_attention",
    "get_run",
    "cancel_run",
)


def build_server(backend: Callable[[], Backend]) -> MCPServer[Any]:
    """The MCP server with Runbell's tools and instructions over ``backend``."""
    tasks = RunbellTasks()
    server: MCPServer[Any] = MCPServer(
        name="runbell", instructions=INSTRUCTIONS, version=__version__, extensions=[tasks]
    )
    tasks.server = server
    tools = Tools(backend)
    for name in TOOL_NAMES:
        server.add_tool(getattr(tools, name), name=name, structured_output=False)
    return server
