"""The in-process backend for ``/mcp``: each tool call runs the same flow, with the same
authorization, as the matching HTTP route (``api/routers/*``) would."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import anyio.to_thread

from runbell.api.deps import require_runtime
from runbell.api.responses import answer_json
from runbell.api.routers.events import wait_for_events
from runbell.api.schemas import InputRequestIn, RunPut, SignalIn
from runbell.domain import capabilities
from runbell.domain.errors import Gone, RunbellError
from runbell.domain.principal import Principal
from runbell.domain.records import ReportedError
from runbell.flows import cancel_request, feed, overview, runs, signals
from runbell.flows import input_requests as requests
from runbell.flows.context import Core
from runbell.flows.signals import Signal
from runbell.mcp.backend import Problem

T = TypeVar("T")
ATTENTION_GROUPS = ["needs_you", "stalled", "needs_review", "working"]


class LocalBackend:
    """One authenticated caller (``who``) of the Runbell this process serves."""

    def __init__(self, core: Core, who: Principal, default_owner: str | None = None) -> None:
        self.core = core
        self.who = who
        self.default_owner = default_owner

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except RunbellError as exc:
            raise Problem(exc.status, exc.title, exc.detail) from exc

    def _runtime(self) -> None:
        try:
            require_runtime(self.who)
        except RunbellError as exc:
            raise Problem(exc.status, exc.title, exc.detail) from exc

    async def put_run(self, run_id: str, fields: dict[str, Any]) -> Mapping[str, Any]:
        self._runtime()
        body = _validated(RunPut, fields).model_dump(exclude_unset=True, mode="json")
        await self._call(runs.put_run, self.core, self.who, run_id, body)
        return await self._call(
            runs.get_run, self.core, self.who, run_id, capability=capabilities.REPORT
        )

    async def signal(self, run_id: str, body: dict[str, Any]) -> Mapping[str, Any]:
        self._runtime()
        parsed = _validated(SignalIn, body)
        source = signals.remembered_source(self.core, self.who)
        if source is None:
            source = await self._call(signals.api_source, self.core, self.who)
        sig = Signal(
            event_id=parsed.event_id,
            state=parsed.state,
            reason=parsed.reason,
            error=cast(ReportedError, parsed.error.model_dump()) if parsed.error else None,
        )
        try:
            result = await signals.accept_signal_async(
                self.core, self.who.tenant_id, source, run_id, sig, who=self.who
            )
        except RunbellError as exc:
            raise Problem(exc.status, exc.title, exc.detail) from exc
        return result.as_dict()

    async def open_input_request(self, run_id: str, body: dict[str, Any]) -> Mapping[str, Any]:
        self._runtime()
        fields = _validated(InputRequestIn, body).model_dump(exclude_unset=False)
        answer = await self._call(requests.open_request, self.core, self.who, run_id, fields)
        return answer_json(answer)

    async def get_input_request(self, request_id: str) -> Mapping[str, Any]:
        found = await self._call(requests.get_request, self.core, self.who, request_id)
        return found["input_request"]

    async def get_run(self, run_id: str) -> Mapping[str, Any]:
        return await self._call(runs.get_run, self.core, self.who, run_id)

    async def cancel(self, run_id: str, reason: str | None) -> Mapping[str, Any]:
        answer = await self._call(
            cancel_request.request_cancel, self.core, self.who, run_id, reason or None
        )
        return answer_json(answer)

    async def attention(self, limit: int) -> Mapping[str, Any]:
        return await self._call(
            overview.list_runs,
            self.core,
            self.who,
            groups=ATTENTION_GROUPS,
            states=None,
            after=None,
            limit=limit,
        )

    async def feed_head(self) -> str:
        return str(await self._call(feed.resolve_cursor, self.core, self.who, "latest"))

    async def wait_events(self, after: str, wait: float) -> str:
        try:
            position = await self._call(feed.resolve_cursor, self.core, self.who, after)
        except Problem as exc:
            if exc.status != Gone.status:
                raise
            return await self.feed_head()  # the caller re-reads the state: nothing is lost
        wait = min(wait, self.core.settings.longpoll_max_s)
        try:
            _, cursor = await wait_for_events(self.core, self.who, position, 100, wait)
        except RunbellError as exc:
            raise Problem(exc.status, exc.title, exc.detail) from exc
        return str(cursor)


def _validated(model: type[T], body: dict[str, Any]) -> T:
    """``body`` checked by the API's own schema, so a tool refuses what the route would."""
    from pydantic import ValidationError

    try:
        return model.model_validate(body)  # type: ignore[attr-defined, no-any-return]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise Problem(422, "Invalid request", f"{where}: {first.get('msg')}") from exc
