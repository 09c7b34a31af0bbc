"""The Runbell Python SDK: an HTTP client for agent runtimes (it never imports the server).

Configuration: arguments, else ``RUNBELL_URL``, ``RUNBELL_KEY`` (a runtime key) and
``RUNBELL_OWNER`` (the email of the person runs are for), else the file ``runbell login``
writes (``~/.config/runbell/config.toml``, mode 0600; see :mod:`runbell.client.config`).

Public API (stable; :class:`AsyncClient` has the same methods, awaited, plus
``aclose``/``async with``, and ``watch`` is an async iterator)::

    Client(url=None, key=None, owner=None, *, timeout=10.0, retry=RetryPolicy(),
           transport=None, environ=None, config_path=None)
    Client.from_env(**options) -> Client           # same as Client(**options)
    client.close() / with Client(...) as client:

    put_run(run_id, *, title=None, owner=None, state=None, kind=None, subject=None,
            objective=None, metadata=None, details=None, notify_on_complete=None,
            authority=None, stall_after_seconds=<unchanged>, sequence=None) -> Run
    get_run(run_id) -> Run
    signal(run_id, state, *, event_id=None, reason=None, error=None, report=None,
           effects_verified=None, sequence=None, at=None) -> SignalResult
    progress(run_id, message=None, counts=None) -> ProgressResult
    cancel(run_id, reason=None) -> CancelResult
    await_run(run_id, timeout=None) -> Run         # terminal, or as it is at the timeout
    claim(run_id, worker_id) -> int                # the epoch
    declare_operations(run_id, operations, *, epoch=None) -> list[Operation]
    move_operation(run_id, operation_id, state, *, evidence=None, epoch=None) -> Operation
    operations(run_id) -> list[Operation]
    delegate(run_id, *, capabilities, expires_in, name) -> Delegation   # token shown once
    delegations(run_id) -> list[Delegation]
    revoke_delegation(delegation_id) -> Delegation
    open_input_request(run_id, *, summary, kind="approval", request_id=None, details=None,
                       options=None, expires_in=None, expires_at=None,
                       blocks_work=None, approvers=None) -> OpenedInputRequest
    get_input_request(request_id) -> InputRequest
    respond(request_id, decision, *, value=None) -> InputRequest   # a person's token
    acknowledge_group(*, run_id=None, subject=None, notification_ids=None, filter=None,
                      up_to=None) -> GroupAcknowledged              # a person's token
    grant_subject(user, subject, role) -> SubjectGrant             # admin
    subject_grants(user=None) -> list[SubjectGrant]                 # admin
    revoke_subject_grant(grant_id) -> SubjectGrant                  # admin
    ask(run_id, summary, *, kind="approval", request_id=None, details=None, options=None,
        expires_in=None, expires_at=None, timeout=None) -> Answer
    wait_for_answer(request_id, *, timeout=None) -> Answer
    head_cursor() -> str
    events(*, after="earliest", wait=None, limit=100) -> (list[Event], next_cursor)
    snapshot() -> Snapshot
    watch(after="latest", *, wait=30) -> Iterator[Event | FeedReset]

    run(run_id, *, title=None, **put_run_fields) -> RunContext   # a context manager:
        with client.run("job-1", title="Nightly sync") as run:   # reports working,
            run.progress("step 1", {"done": 1, "total": 3})     # then completed, or
            answer = run.ask("Push to main?")                    # failed (class and a
            run.report = {"summary": "…"}                        # short message; the
                                                                 # exception re-raises)
    requires_approval(summary=None, *, kind="approval", run_id=None, details=None,
                      expires_in=None, timeout=None)  # a decorator: asks, runs the
        # function only when approved (else raises NotApproved), and records the
        # approved call as an operation planned → sent → confirmed | failed, intent =
        # the function's name (it uses run_id, else the enclosing client.run block)

Models (frozen dataclasses, each with ``raw``, the whole JSON): :class:`Run`,
:class:`SignalResult`, :class:`ProgressResult`, :class:`CancelResult`,
:class:`InputRequest`, :class:`OpenedInputRequest`, :class:`Answer` (``outcome``
answered/expired/superseded/cancelled/timeout, ``decision``, ``value``, ``approved``),
:class:`GroupAcknowledged`, :class:`Operation`, :class:`Event`, :class:`Snapshot`,
:class:`FeedReset`.

Errors (:mod:`runbell.client.errors`): :class:`RunbellError` is the root; an HTTP error
answer is an :class:`APIError` (``status``, ``type``, ``title``, ``detail``, ``current``,
``field``, ``problem``); :class:`ConnectionFailed` after the retries ran out;
:class:`ConfigError`; :class:`NotApproved`.

Retries (:class:`RetryPolicy`: 5 attempts, exponential backoff with jitter, honouring
``Retry-After``): on connection errors, 429 and 503, for every call. Each call's
``event_id`` / ``Idempotency-Key`` is chosen once and reused on every retry, so a retry
never acts twice.

Example::

    from runbell.client import Client

    with Client.from_env() as rb:
        rb.put_run("deploy-7", title="Deploy v2", state="working", notify_on_complete=True)
        answer = rb.ask("deploy-7", "Deploy v2 to production?", expires_in=900)
        if answer.approved:
            ...
        rb.signal("deploy-7", "completed", reason="deployed")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runbell.client._core import RetryPolicy
from runbell.client._run import current_run_id
from runbell.client._sync import Client, RunContext
from runbell.client.config import ClientConfig, config_path, load_config, write_config
from runbell.client.errors import (
    APIError,
    ConfigError,
    Conflict,
    ConnectionFailed,
    CursorExpired,
    Forbidden,
    NotApproved,
    NotFound,
    RunbellError,
    Unauthorized,
    Unavailable,
    ValidationFailed,
)
from runbell.client.models import (
    Answer,
    CancelResult,
    Delegation,
    Event,
    FeedReset,
    GroupAcknowledged,
    InputRequest,
    OpenedInputRequest,
    Operation,
    ProgressResult,
    Run,
    Schedule,
    SignalResult,
    Snapshot,
    SubjectGrant,
)

if TYPE_CHECKING:
    from runbell.client._async import AsyncClient, AsyncRunContext


def __getattr__(name: str) -> Any:
    # The async half (and asyncio, ~20-40 ms of a start's CPU) loads on first use: a hook
    # or a script on the sync Client never pays for it (bench/cli_start.py).
    if name in ("AsyncClient", "AsyncRunContext"):
        from runbell.client import _async

        return getattr(_async, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "APIError",
    "Answer",
    "AsyncClient",
    "AsyncRunContext",
    "CancelResult",
    "Client",
    "ClientConfig",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "CursorExpired",
    "Delegation",
    "Event",
    "FeedReset",
    "Forbidden",
    "GroupAcknowledged",
    "InputRequest",
    "NotApproved",
    "NotFound",
    "OpenedInputRequest",
    "Operation",
    "ProgressResult",
    "RetryPolicy",
    "Run",
    "RunContext",
    "RunbellError",
    "Schedule",
    "SignalResult",
    "Snapshot",
    "SubjectGrant",
    "Unauthorized",
    "Unavailable",
    "ValidationFailed",
    "config_path",
    "current_run_id",
    "load_config",
    "write_config",
]
