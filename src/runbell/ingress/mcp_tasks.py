"""The ``mcp_tasks`` state reader: ask a remote MCP server what a task's state is.

An agent that runs as an MCP task (a task-augmented ``tools/call``, MCP 2025-11-25 Tasks,
SEP-1686; or the ``io.modelcontextprotocol/tasks`` extension of the 2026-07-28 revision)
has its authoritative state on the MCP server that runs it. This reader is an MCP client
built on the official ``mcp`` SDK: it connects over **streamable HTTP**, negotiates the
protocol version (``server/discover`` on 2026-era servers, the ``initialize`` handshake on
older ones), sends ``tasks/get {taskId}`` and maps the task's ``status`` one to one:

``working`` → ``working``, ``input_required`` → ``input_required``, ``completed`` →
``completed``, ``failed`` → ``failed``, ``cancelled`` → ``cancelled``.

Anything else (an unknown status, a JSON-RPC error such as ``-32602`` for an unknown or
expired task, a transport failure, a timeout) is a :class:`ReaderError`: "cannot tell",
never a guess. The SDK 2.x no longer serves ``tasks/*`` itself (the methods are outside
its per-version tables), so the request is sent with ``ClientSession.send_request`` and
its result read as a plain object: both the 2025-11-25 ``GetTaskResult`` (``taskId``,
``status``, ``pollInterval``) and the extension's shape (``status``, ``pollIntervalMs``)
carry ``status``.

**Run ↔ task.** ``task_id_template`` (default ``"{run_id}"``) names the task of a run:
the runtime that created the task uses the task id as the Runbell ``run_id``, or a prefix
or suffix around it (``"{run_id}"`` is replaced by the run id, verbatim: a task id is a
JSON string, not a URL part).

**SSRF.** The URL is checked when the source is registered (``flows.sources``) and on
every HTTP request the MCP transport makes (the POSTs, the optional GET stream, the
closing DELETE, and any same-origin redirect the SDK follows): each goes through
:class:`SafeAsyncTransport`, which checks the URL with ``runbell.domain.ssrf.check_url``
(https only unless the operator allow-lists the host; every resolved address checked)
and dials the first checked address, with ``Host`` and TLS SNI kept on the name. What
it cannot pin: nothing on the HTTP path escapes it, but the reader does no OAuth (no
discovery documents are fetched; a static bearer only), and it cannot vouch for what the
MCP server itself contacts.

Each read opens a fresh MCP session and closes it (the reader is called rarely: once per
advisory signal and per re-check), bounded by ``timeout`` from connect to answer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import httpx2
from pydantic import BaseModel, ConfigDict

from runbell.domain.errors import ReaderError, RunbellError, ValidationFailed
from runbell.domain.ssrf import Resolver, Target, check_url, parse_host
from runbell.ingress.readers import Observed, parsed_url, redacted

__all__ = ["TASKS_EXTENSION", "TASK_STATES", "McpTasksReader", "SafeAsyncTransport"]

#: MCP task status → Runbell run state: one to one (DESIGN §3).
TASK_STATES: dict[str, str] = {
    "working": "working",
    "input_required": "input_required",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}

#: The MCP Tasks extension's identifier, declared in the client's capabilities.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

_RUN_ID = "{run_id}"
_MAX_TIMEOUT_S = 30.0
_T = TypeVar("_T")


class SafeAsyncTransport(httpx2.AsyncHTTPTransport):
    """The SSRF guard for the ``mcp`` SDK's HTTP stack (httpx2), as
    ``runbell.outbound.AsyncSafeTransport`` is for httpx: every request's URL is checked
    and the request is sent to the first checked address, the name kept for ``Host``
    and TLS, so nothing resolves the name again between the check and the connect."""

    def __init__(
        self, *, allow_hosts: frozenset[str], resolve: Resolver | None = None, **kwargs: Any
    ) -> None:
        super().__init__(trust_env=False, **kwargs)
        self._allow_hosts = frozenset(allow_hosts)
        if resolve is None:
            from runbell.outbound import make_resolver

            resolve = make_resolver()
        self._resolve = resolve

    def _check(self, url: str) -> Target:
        return check_url(url, allow_hosts=self._allow_hosts, resolve=self._resolve)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            target = await anyio.to_thread.run_sync(self._check, str(request.url))
        except OSError as exc:
            raise httpx2.ConnectError(
                f"cannot resolve {request.url.host!r}: {exc}", request=request
            ) from exc
        if target.scheme == "https" and parse_host(target.host) is None:
            request.extensions["sni_hostname"] = target.host
            # One verified TLS connection per name: never reuse it for another name.
            request.headers["Connection"] = "close"
        request.url = request.url.copy_with(host=target.addresses[0])
        return await super().handle_async_request(request)


class McpTasksReader:
    """A :class:`~runbell.ingress.readers.StateReader` that calls ``tasks/get`` on an MCP
    server over streamable HTTP (see the module docstring).

    ``bearer`` (optional) is sent as ``Authorization: Bearer …``; it never appears in a
    repr or an error detail. ``allow_hosts`` and ``resolve`` configure the SSRF guard
    (the operator's ``outbound_allow_hosts``; tests allow-list ``127.0.0.1``).
    """

    def __init__(
        self,
        url: str,
        *,
        bearer: str | None = None,
        task_id_template: str = _RUN_ID,
        timeout: float = 10.0,
        allow_hosts: frozenset[str] = frozenset(),
        resolve: Resolver | None = None,
    ) -> None:
        self.url = _check_url(url)
        if bearer is not None and (
            not isinstance(bearer, str)
            or not bearer.strip()
            or any(ch in bearer for ch in "\r\n\0")
            or not bearer.isascii()
        ):
            raise ValidationFailed("bearer must be a non-empty ASCII token", field="bearer")
        self._bearer = bearer
        if not isinstance(task_id_template, str) or _RUN_ID not in task_id_template:
            raise ValidationFailed(
                "task_id_template must contain {run_id}", field="task_id_template"
            )
        self.task_id_template = task_id_template
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise ValidationFailed("timeout must be a number of seconds", field="timeout")
        if not 0 < timeout <= _MAX_TIMEOUT_S:
            raise ValidationFailed(
                f"timeout must be more than 0 and at most {_MAX_TIMEOUT_S:g} seconds",
                field="timeout",
            )
        self._timeout = float(timeout)
        self._allow_hosts = frozenset(allow_hosts)
        self._resolve = resolve

    def __repr__(self) -> str:
        return (
            f"McpTasksReader(url={redacted(self.url)!r}, "
            f"task_id_template={self.task_id_template!r}, bearer={'***' if self._bearer else None})"
        )

    def task_id_for(self, run_id: str) -> str:
        """The MCP task id of ``run_id``."""
        if not run_id:
            raise ReaderError("an empty run id names no task")
        return self.task_id_template.replace(_RUN_ID, run_id)

    def read(self, run_id: str) -> Observed:
        task = self.get_task(self.task_id_for(run_id))
        status = task.get("status")
        where = redacted(self.url)
        if not isinstance(status, str):
            raise ReaderError(f"tasks/get from {where} answered no task status")
        state = TASK_STATES.get(status)
        if state is None:
            shown = status if len(status) <= 40 else status[:40] + "…"
            raise ReaderError(f"task status {shown!r} from {where} is not an MCP task state")
        return Observed(state=state, sequence=None)

    def get_task(self, task_id: str) -> dict[str, Any]:
        """``tasks/get {taskId}``: the task object as the server answered it."""
        return _run(self._get_task(task_id))

    async def _get_task(self, task_id: str) -> dict[str, Any]:
        where = redacted(self.url)
        try:
            with anyio.fail_after(self._timeout):
                return await self._exchange(task_id)
        except TimeoutError as exc:
            raise ReaderError(f"tasks/get to {where} took over {self._timeout:g} s") from exc
        except BaseExceptionGroup as group:  # the SDK's task groups wrap what failed
            raise _reader_error(_leaf(group), where) from group
        except ReaderError:
            raise
        except Exception as exc:
            raise _reader_error(exc, where) from exc

    async def _exchange(self, task_id: str) -> dict[str, Any]:
        import mcp.types as types
        from mcp import Client
        from mcp.client.extension import advertise
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {self._bearer}"} if self._bearer else {}
        transport = SafeAsyncTransport(allow_hosts=self._allow_hosts, resolve=self._resolve)
        async with httpx2.AsyncClient(
            transport=transport,
            headers=headers,
            timeout=httpx2.Timeout(self._timeout),
            follow_redirects=False,
            trust_env=False,
        ) as http:
            connection = streamable_http_client(self.url, http_client=http)
            # Declared so a server that offers tasks only to clients that say they know the
            # Tasks extension (SEP-2133's required client capability) answers us too.
            async with Client(
                connection,
                cache=None,
                read_timeout_seconds=self._timeout,
                extensions=[advertise(TASKS_EXTENSION)],
            ) as client:
                request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
                answer = await client.session.send_request(request, _TaskAnswer)
                return dict(answer.model_extra or {})


class _TaskAnswer(BaseModel):
    """The ``tasks/get`` result, every key kept as sent: both revisions' shapes carry
    ``status``, and the reader reads nothing it does not need."""

    model_config = ConfigDict(extra="allow")


def from_config(config: dict[str, Any], *, allow_hosts: frozenset[str]) -> McpTasksReader:
    """Build the reader from a stored (opened) ``mcp_tasks`` configuration."""
    return McpTasksReader(
        config.get("url") or "",
        bearer=config.get("bearer"),
        task_id_template=config.get("task_id_template") or _RUN_ID,
        timeout=config.get("timeout", 10.0),
        allow_hosts=allow_hosts,
    )


def _check_url(url: str) -> str:
    if not isinstance(url, str) or not url:
        raise ValidationFailed("url is required", field="url")
    parsed_url(url, "url")  # the shared parse step (domain.ssrf), naming the field
    try:
        parsed = httpx2.URL(url)
        _ = parsed.host  # decoded lazily: an invalid IDNA host raises here, not later
    except (httpx2.InvalidURL, ValueError, TypeError) as exc:
        raise ValidationFailed("url is not a valid URL", field="url") from exc
    if parsed.scheme not in {"http", "https"} or not parsed.host:
        raise ValidationFailed("url must be an absolute http(s) URL", field="url")
    if parsed.userinfo:
        raise ValidationFailed("url must not carry credentials; use bearer", field="url")
    if parsed.fragment:
        raise ValidationFailed("url must not carry a fragment", field="url")
    return url


def _leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _reader_error(exc: BaseException, where: str) -> ReaderError:
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, ReaderError):
        return exc
    if isinstance(exc, RunbellError):  # UnsafeDestination: its detail names the rule
        return ReaderError(f"tasks/get to {where} refused: {exc.detail}")
    if isinstance(exc, MCPError):
        code = getattr(getattr(exc, "error", None), "code", None)
        if code == -32602:
            return ReaderError(f"tasks/get to {where}: unknown or expired task (-32602)")
        return ReaderError(f"tasks/get to {where} answered an MCP error ({code})")
    if isinstance(exc, TimeoutError):
        return ReaderError(f"tasks/get to {where} timed out")
    # The class says what failed (ConnectError, ReadTimeout, …); messages may echo requests.
    return ReaderError(f"tasks/get to {where} failed: {type(exc).__name__}")


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion from synchronous code (the flows are synchronous and
    call readers from worker threads); from inside an event loop, on a fresh thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="runbell-mcp-tasks-reader", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: _T = box["value"]
    return value
