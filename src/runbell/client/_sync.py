"""The synchronous client, generated from ``_async.py`` by ``scripts/unasync.py``: do not
edit; change ``_async.py`` and run ``make sdk``."""

# size: one client, whole: its methods mirror the other client's one for one, and its
# run block and approval decorator call it (apart, they would import each other).

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import Token
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote

import httpx

from runbell.client import _core, _run, errors
from runbell.client._core import UNSET, Call, RetryPolicy, compact, new_id
from runbell.client.config import load_config
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

__all__ = ["Client", "RunContext"]

P = ParamSpec("P")
R = TypeVar("R")

EXPIRY_GRACE_S = 1.0  # how long past expires_at to wait for the server's expiry event


def _p(value: str) -> str:
    return quote(value, safe="")


class Client:
    """A Runbell client for agent runtimes (an API key), configured by arguments, else
    ``RUNBELL_URL`` / ``RUNBELL_KEY`` / ``RUNBELL_OWNER``, else the ``runbell login``
    file. Use it as a context manager (``with``), or call :meth:`close`."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        owner: str | None = None,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
        config_path: Path | None = None,
        as_app: bool = False,
    ) -> None:
        """``as_app=True``: this client is a person's own app (with their user token), so
        its waits on the feed count as them watching and hold back their pushes. A
        declaration, not a security boundary: it can only quieten that person's own
        alerts; a script or an agent leaves it off (API keys are never counted)."""
        config = load_config(url, key, owner, environ=environ, path=config_path)
        self.url = config.url
        self.owner = config.owner
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self._known_runs: set[str] = set()  # runs this client has created or updated
        self._http = httpx.Client(
            base_url=config.url,
            headers={
                "Authorization": f"Bearer {config.key}",
                "User-Agent": _core.USER_AGENT,
                **({_core.CLIENT_HEADER: _core.APP_CLIENT} if as_app else {}),
            },
            timeout=timeout,
            transport=transport
            if transport is not None or not _core.plain_http(config.url)
            else httpx.HTTPTransport(verify=False),
        )

    @classmethod
    def from_env(cls, **options: Any) -> Client:
        """A client from the environment (then the config file); ``options`` as for
        the constructor."""
        return cls(**options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport -------------------------------------------------------------------

    def _send(self, call: Call) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    headers=call.request_headers(),
                    timeout=call.timeout if call.timeout is not None else self.timeout,
                )
            except httpx.TransportError as exc:
                if attempt >= self.retry.attempts:
                    raise _core.connection_failed(exc, self.url) from exc
                time.sleep(self.retry.delay(attempt))
                continue
            if response.status_code in _core.RETRY_STATUSES and attempt < self.retry.attempts:
                time.sleep(self.retry.delay(attempt, _core.retry_after(response.headers)))
                continue
            if response.status_code >= 400:
                raise _core.failure(response)
            return response.json()

    # --- runs and signals ------------------------------------------------------------

    def put_run(
        self,
        run_id: str,
        *,
        title: str | None = None,
        owner: str | None = None,
        state: str | None = None,
        kind: str | None = None,
        subject: Mapping[str, Any] | None = None,
        objective: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        details: Mapping[str, Any] | None = None,
        notify_on_complete: bool | None = None,
        authority: Mapping[str, Any] | None = None,
        stall_after_seconds: int | None = UNSET,
        sequence: int | None = None,
        done_when: str | Mapping[str, Any] | None = UNSET,
        links: Sequence[Mapping[str, Any] | str] | None = UNSET,
        depends_on: Mapping[str, Any] | None = UNSET,
        schedule: str | None = None,
    ) -> Run:
        """Create the run or update the fields given. ``owner`` defaults to
        ``RUNBELL_OWNER`` when the run is created (never changing an existing run's
        owner). ``stall_after_seconds=None`` means the tenant default; omit it to leave
        it unchanged.

        A job's own fields (omit to leave them as they are; None clears): ``done_when``
        (what counts as done: its text, or ``{"text", "operations": [ids that must be
        confirmed]}``), ``links`` (``[{"kind", "id", "url"?}]`` or ``"kind:id"``
        strings; replaces the run's links) and ``depends_on`` (``{"run", "request_id",
        "version"?}``: another run's proposal). ``schedule``: the id of the schedule a
        new run starts under (its owner and authority then stand in for those not
        given)."""
        body = _core.put_run_body(
            owner,
            title,
            state,
            kind,
            subject,
            objective,
            metadata,
            details,
            notify_on_complete,
            authority,
            stall_after_seconds,
            sequence,
        )
        body.update(_core.job_body(done_when, links, depends_on))
        if schedule is not None:
            body = {**body, "schedule": {"id": schedule}}
        path = f"/v1/runs/{_p(run_id)}"
        if (
            owner is None
            and schedule is None
            and self.owner is not None
            and run_id not in self._known_runs
        ):
            # The default owner applies to a new run only. Ask whether it exists rather
            # than send a PUT the server must refuse ("owner is required when a run is
            # created", a 422 in every log) and then send it again.
            try:
                self._send(Call("GET", path))
            except errors.NotFound:
                body = {**body, "owner": self.owner}
        try:
            run = Run.from_json(self._send(Call("PUT", path, body)))
        except errors.ValidationFailed as exc:
            # Created by nobody after all (a race with retention): the default owner applies.
            if owner is not None or self.owner is None or not _core.needs_owner(exc):
                raise
            run = Run.from_json(self._send(Call("PUT", path, {**body, "owner": self.owner})))
        _core.remember(self._known_runs, run_id)
        return run

    def get_run(self, run_id: str) -> Run:
        return Run.from_json(self._send(Call("GET", f"/v1/runs/{_p(run_id)}")))

    def list_runs(
        self, *, link: str | None = None, state: Sequence[str] | None = None, limit: int = 100
    ) -> list[Run]:
        """The runs this key may see, by run id, every page of them: ``link`` (e.g.
        ``"conversation:abc"``) keeps every job linked to it; ``state`` those in these
        states."""
        out: list[Run] = []
        after: str | None = None
        while True:
            call = _core.list_runs_call(link, state, limit, after)
            data = self._send(call)
            out += [Run.from_json(r) for r in data["runs"]]
            after = data.get("next_cursor")
            if not after:
                return out

    def signal(
        self,
        run_id: str,
        state: str,
        *,
        event_id: str | None = None,
        reason: str | None = None,
        error: Mapping[str, Any] | None = None,
        report: Mapping[str, Any] | None = None,
        effects_verified: bool | None = None,
        sequence: int | None = None,
        at: datetime | None = None,
    ) -> SignalResult:
        """Report a state. The ``event_id`` (generated when omitted) is sent on every
        retry, so a retried call is answered ``duplicate``, never applied twice."""
        event_id = event_id or new_id("evt")
        body = _core.signal_body(
            event_id, state, reason, error, report, effects_verified, sequence, at
        )
        data = self._send(Call("POST", f"/v1/runs/{_p(run_id)}/signals", body))
        return SignalResult.from_json(data, event_id)

    def progress(
        self, run_id: str, message: str | None = None, counts: Mapping[str, Any] | None = None
    ) -> ProgressResult:
        """A heartbeat: never notifies, keeps the stall clock from running out."""
        body = compact(message=message, counts=dict(counts) if counts is not None else None)
        return ProgressResult.from_json(
            self._send(Call("POST", f"/v1/runs/{_p(run_id)}/progress", body))
        )

    def cancel(self, run_id: str, reason: str | None = None) -> CancelResult:
        """Ask the run to stop (it moves to ``stopping``; the runtime then reports how it ended)."""
        call = Call(
            "POST",
            f"/v1/runs/{_p(run_id)}/cancel",
            compact(reason=reason),
            idempotency_key=new_id("cancel"),
        )
        return CancelResult.from_json(self._send(call))

    def await_run(self, run_id: str, timeout: float | None = None) -> Run:
        """Wait on the feed until the run is terminal; returns it then, or as it is
        when ``timeout`` seconds passed (check ``run.terminal``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cursor = self.head_cursor()
        run = self.get_run(run_id)
        while not run.terminal:
            wait = _core.remaining(deadline)
            if wait is not None and wait <= 0:
                return run
            try:
                events, cursor = self.events(after=cursor, wait=wait, limit=500)
            except errors.CursorExpired:
                cursor = self.head_cursor()
                run = self.get_run(run_id)
                continue
            if any(e.run_id == run_id and e.type.startswith("run.") for e in events):
                run = self.get_run(run_id)
        return run

    # --- a run as a block; functions that need approval -------------------------------

    def run(self, run_id: str, *, title: str | None = None, **fields: Any) -> RunContext:
        """A run as a ``with`` block: creates or updates it (``fields`` as for
        :meth:`put_run`), reports ``working``, then ``completed`` — or ``failed`` with the
        exception's class and a short message when the block raises (it re-raises)."""
        return RunContext(self, run_id, {"title": title, **fields})

    def requires_approval(
        self,
        summary: str | None = None,
        *,
        kind: str = "approval",
        run_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        expires_in: float | None = None,
        timeout: float | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: each call asks (on ``run_id``, else the run of the enclosing
        ``client.run`` block) and runs the function only when approved, else raises
        :class:`~runbell.client.errors.NotApproved`. The call is recorded as an
        operation (intent: the function's name) planned → sent → confirmed | failed
        once approved; a refused call records no operation (the answer is on record)."""
        return _requires_approval(self, summary, kind, run_id, details, expires_in, timeout)

    # --- operations ------------------------------------------------------------------

    def claim(self, run_id: str, worker_id: str, *, reason: str | None = None) -> int:
        """Claim the run for ``worker_id``; returns its epoch. Another worker (or another
        credential) takes the run over: its completion ownership moves, recorded in the
        run's history with ``reason``."""
        call = Call(
            "POST",
            f"/v1/runs/{_p(run_id)}/claim",
            compact(worker_id=worker_id, reason=reason),
            idempotency_key=new_id("claim"),
        )
        return int(self._send(call)["epoch"])

    def declare_operations(
        self, run_id: str, operations: Sequence[Mapping[str, Any]], *, epoch: int | None = None
    ) -> list[Operation]:
        """Declare operations (``planned``): each ``{operation_id, target, intent,
        details?, idempotency_key?}``. Declaring the same ones again is idempotent."""
        body = compact(operations=[dict(o) for o in operations], epoch=epoch)
        call = Call(
            "POST", f"/v1/runs/{_p(run_id)}/operations", body, idempotency_key=new_id("ops")
        )
        return [Operation.from_json(o) for o in self._send(call)["operations"]]

    def move_operation(
        self,
        run_id: str,
        operation_id: str,
        state: str,
        *,
        evidence: Mapping[str, Any] | None = None,
        epoch: int | None = None,
    ) -> Operation:
        """Move an operation (``sent``, ``confirmed``, ``failed``, ``uncertain``, …)."""
        body = compact(
            state=state, evidence=dict(evidence) if evidence is not None else None, epoch=epoch
        )
        path = f"/v1/runs/{_p(run_id)}/operations/{_p(operation_id)}"
        return Operation.from_json(self._send(Call("PATCH", path, body))["operation"])

    def operations(self, run_id: str) -> list[Operation]:
        data = self._send(Call("GET", f"/v1/runs/{_p(run_id)}/operations"))
        return [Operation.from_json(o) for o in data["operations"]]

    # --- delegated tokens ------------------------------------------------------------

    def delegate(
        self, run_id: str, *, capabilities: Sequence[str], expires_in: float, name: str
    ) -> Delegation:
        """Mint a token for a helper, bound to ``run_id``, with ``capabilities`` (never
        more than this key holds: :class:`~runbell.client.errors.Forbidden` naming the
        one it lacks), for ``expires_in`` seconds. ``token`` is shown only here."""
        body = _core.delegation_body(capabilities, expires_in, name)
        path = f"/v1/runs/{_p(run_id)}/delegations"
        return Delegation.from_json(self._send(Call("POST", path, body)))

    def delegations(self, run_id: str) -> list[Delegation]:
        """The run's delegated tokens (never their secrets)."""
        data = self._send(Call("GET", f"/v1/runs/{_p(run_id)}/delegations"))
        return [Delegation.from_json(d) for d in data["delegations"]]

    def revoke_delegation(self, delegation_id: str) -> Delegation:
        """Revoke a delegated token at once (its next request is refused)."""
        path = f"/v1/delegations/{_p(delegation_id)}"
        return Delegation.from_json(self._send(Call("DELETE", path)))

    def supersede_operation(
        self, run_id: str, operation_id: str, reason: str, *, worker_id: str | None = None
    ) -> Operation:
        """As the run's completion owner, let new work through on the target of an
        operation still sent, uncertain or unresolved, saying why (it keeps its state)."""
        body = compact(reason=reason, worker_id=worker_id)
        path = f"/v1/runs/{_p(run_id)}/operations/{_p(operation_id)}/supersede"
        return Operation.from_json(self._send(Call("POST", path, body))["operation"])

    def report_finding(
        self,
        run_id: str,
        operation_id: str,
        finding: str,
        *,
        evidence: Mapping[str, Any] | None = None,
        worker_id: str | None = None,
    ) -> Operation:
        """Report what you found about an operation (``conflict``, ``confirmed``, …,
        ``evidence``): a report on the ledger, never a change of its state."""
        body = compact(
            finding=finding,
            evidence=dict(evidence) if evidence is not None else None,
            worker_id=worker_id,
        )
        path = f"/v1/runs/{_p(run_id)}/operations/{_p(operation_id)}/findings"
        return Operation.from_json(self._send(Call("POST", path, body))["operation"])

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """The run's per-step trace, oldest first: each step with who caused it."""
        data = self._send(Call("GET", f"/v1/runs/{_p(run_id)}/history"))
        return [dict(step) for step in data["steps"]]

    # --- input requests --------------------------------------------------------------

    def open_input_request(
        self,
        run_id: str,
        *,
        summary: str,
        kind: str = "approval",
        request_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        options: Sequence[str | Mapping[str, str]] | None = None,
        expires_in: float | None = None,
        expires_at: datetime | str | None = None,
        blocks_work: bool | None = None,
        approvers: Sequence[str] | None = None,
        action: Mapping[str, Any] | None = None,
        editable: Mapping[str, Any] | None = None,
        callback: Sequence[str] | bool = False,
    ) -> OpenedInputRequest:
        """Open an input request (the run moves to ``input_required``). ``options``
        (for ``choice``) are ids or ``{id, label}``. ``approvers`` (user ids or
        emails of members who may see the run): only they may answer it, and only they
        are notified; omitted, the run's approvers answer. ``action``: what approving
        lets happen, shown first to the person (``{"kind": "shell", "command": …}``;
        see docs/api.md for the kinds); the server flags risky patterns in it.
        ``editable`` (an approval): ``{"schema": ..., "value": ...}``, a value the person
        may edit before approving.
        ``callback``: True (or the decisions it may give) mints a single-use callback
        URL, in the result's ``callback_url``."""
        body = _core.input_request_body(
            request_id or new_id("ask"),
            kind,
            summary,
            details,
            options,
            expires_in,
            expires_at,
            blocks_work,
            approvers,
            action,
        )
        if editable is not None:
            body["editable"] = dict(editable)
        if callback:
            body["callback"] = {} if callback is True else {"decisions": list(callback)}
        call = Call(
            "POST", f"/v1/runs/{_p(run_id)}/input-requests", body, idempotency_key=new_id("open")
        )
        return OpenedInputRequest.from_json(self._send(call))

    def get_input_request(self, request_id: str) -> InputRequest:
        data = self._send(Call("GET", f"/v1/input-requests/{_p(request_id)}"))
        return InputRequest.from_json(data["input_request"])

    def respond(self, request_id: str, decision: str, *, value: Any = None) -> InputRequest:
        """Answer an input request as the person whose token this client holds
        (``approve``/``reject``, or ``answer`` with ``value``), bound to the run and
        request versions read just before. Someone who may see the run but not answer
        it gets :class:`~runbell.client.errors.Forbidden` (the server's detail says why)."""
        request = self.get_input_request(request_id)
        run = self.get_run(request.run_id)
        body = _core.response_body(decision, value, run.version, request.version)
        call = Call(
            "POST",
            f"/v1/input-requests/{_p(request_id)}/responses",
            body,
            idempotency_key=new_id("answer"),
        )
        return InputRequest.from_json(self._send(call)["input_request"])

    # --- the inbox (a person's token) ---------------------------------------------

    def acknowledge_group(
        self,
        *,
        run_id: str | None = None,
        subject: str | Mapping[str, Any] | None = None,
        notification_ids: Sequence[str] | None = None,
        filter: str | None = None,
        up_to: str | None = None,
    ) -> GroupAcknowledged:
        """Acknowledge one group of your own open notifications at once, as the inbox's
        "Acknowledge all in this group" does: a run's (``run_id``), a subject's
        (``"type:id"`` or ``{type, id}``: the runs of an agent or a project you may
        see), or the ``notification_ids`` you name; exactly one of the three
        (ValueError otherwise). ``filter`` keeps one inbox filter's (``needs_me``,
        ``failures``, ``finished``); ``up_to`` (a notification id) leaves anything newer
        open, so what arrived after you looked stays. One transaction; a retry does not
        acknowledge twice. Needs a user token: API keys get
        :class:`~runbell.client.errors.Forbidden`."""
        body = _core.group_ack_body(run_id, subject, notification_ids, filter, up_to)
        call = Call("POST", "/v1/inbox/acknowledge", body, idempotency_key=new_id("ack"))
        return GroupAcknowledged.from_json(self._send(call))

    # --- people: subject grants (an admin's key or token) ---------------------------

    def grant_subject(self, user: str, subject: str | Mapping[str, Any], role: str) -> SubjectGrant:
        """Grant a member (user id or email) a subject (``"type:id"`` or ``{type,
        id}``, any version) as ``viewer``, ``approver`` or ``amender``: they then have
        that role on every run of the subject, existing and future. Granting it again
        answers the existing grant (``created`` False)."""
        body = _core.grant_body(user, subject, role)
        call = Call("POST", "/v1/subject-grants", body, idempotency_key=new_id("grant"))
        return SubjectGrant.from_json(self._send(call))

    def subject_grants(self, user: str | None = None) -> list[SubjectGrant]:
        """The tenant's subject grants, oldest first; ``user`` keeps one member's."""
        params = {"user": user} if user is not None else None
        data = self._send(Call("GET", "/v1/subject-grants", params=params))
        return [SubjectGrant.from_json(g) for g in data["grants"]]

    def revoke_subject_grant(self, grant_id: str) -> SubjectGrant:
        """Revoke a grant: the access it gave goes at once (the answer is the grant)."""
        path = f"/v1/subject-grants/{_p(grant_id)}"
        return SubjectGrant.from_json(self._send(Call("DELETE", path)))

    # --- schedules -------------------------------------------------------------------

    def create_schedule(
        self,
        instruction: str,
        cadence: str,
        *,
        owner: str | None = None,
        authority: Mapping[str, Any] | None = None,
        mode: str = "record_only",
        url: str | None = None,
        name: str | None = None,
    ) -> Schedule:
        """A standing instruction on a cron cadence (five fields, UTC). ``record_only``:
        your runtime starts runs itself with ``put_run(..., schedule=id)``; ``webhook``:
        Runbell POSTs a signed ``schedule.due`` request to ``url`` when one is due (the
        answer's ``secret`` verifies it, shown only now)."""
        body = compact(
            instruction=instruction,
            cadence=cadence,
            owner=owner,
            authority=dict(authority) if authority is not None else None,
            mode=mode,
            url=url,
            name=name,
        )
        call = Call("POST", "/v1/schedules", body, idempotency_key=new_id("sched"))
        return Schedule.from_json(self._send(call))

    def get_schedule(self, schedule_id: str) -> Schedule:
        return Schedule.from_json(self._send(Call("GET", f"/v1/schedules/{_p(schedule_id)}")))

    def schedules(self) -> list[Schedule]:
        """Every schedule the credential may see (all pages)."""
        found: list[Schedule] = []
        after: str | None = None
        while True:
            params = {"limit": 200, **({"after": after} if after else {})}
            data = self._send(Call("GET", "/v1/schedules", params=params))
            found.extend(Schedule.from_json(s) for s in data["schedules"])
            after = data.get("next_cursor")
            if not after:
                return found

    def edit_schedule(
        self,
        schedule_id: str,
        *,
        instruction: str | None = None,
        authority: Mapping[str, Any] | None = UNSET,
        cadence: str | None = None,
        name: str | None = None,
    ) -> Schedule:
        """A new instruction (a new version; the old ones are kept), authority (runs
        started under the old one are flagged), cadence or name."""
        body = compact(instruction=instruction, cadence=cadence, name=name)
        if authority is not UNSET:
            body["authority"] = dict(authority) if authority is not None else None
        path = f"/v1/schedules/{_p(schedule_id)}"
        return Schedule.from_json(self._send(Call("PATCH", path, body)))

    def pause_schedule(self, schedule_id: str, reason: str | None = None) -> Schedule:
        return self._schedule_state(schedule_id, "pause", reason)

    def resume_schedule(self, schedule_id: str) -> Schedule:
        return self._schedule_state(schedule_id, "resume", None)

    def revoke_schedule(self, schedule_id: str, reason: str | None = None) -> Schedule:
        return self._schedule_state(schedule_id, "revoke", reason)

    def _schedule_state(self, schedule_id: str, action: str, reason: str | None) -> Schedule:
        path = f"/v1/schedules/{_p(schedule_id)}/{action}"
        return Schedule.from_json(self._send(Call("POST", path, compact(reason=reason))))

    def ask(
        self,
        run_id: str,
        summary: str,
        *,
        kind: str = "approval",
        request_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        options: Sequence[str | Mapping[str, str]] | None = None,
        expires_in: float | None = None,
        expires_at: datetime | str | None = None,
        timeout: float | None = None,
        action: Mapping[str, Any] | None = None,
        editable: Mapping[str, Any] | None = None,
    ) -> Answer:
        """Open an input request and wait for how it ends, on the long-poll feed.
        Returns an :class:`Answer`: ``answered`` (see ``approved``, ``decision``,
        ``value``), ``expired``, ``superseded``, ``cancelled``, or ``timeout`` after
        ``timeout`` seconds (None: until the request ends). Asking again under a
        ``request_id`` already used for this run waits on that request instead.
        ``action`` (``{"kind": "shell", "command": "make deploy"}``…) is what approving
        lets happen: the person sees it first, above the buttons. With ``editable``
        (``{"schema": ..., "value": ...}``) the person may edit the value before
        approving: the answer's ``value`` is then what they approved and ``edited`` says
        whether they changed it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cursor = self.head_cursor()
        try:
            opened = self.open_input_request(
                run_id,
                summary=summary,
                kind=kind,
                request_id=request_id,
                details=details,
                options=options,
                expires_in=expires_in,
                expires_at=expires_at,
                action=action,
                editable=editable,
            )
        except errors.Conflict as exc:
            # Asked before under this request_id (a re-run script): wait on that request.
            earlier = _core.asked_before(exc, run_id)
            if earlier is None:
                raise
            return self._wait_answer(earlier, cursor, deadline)
        return self._wait_answer(opened.input_request, cursor, deadline)

    def wait_for_answer(self, request_id: str, *, timeout: float | None = None) -> Answer:
        """Wait for an input request opened earlier (for example by another process)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cursor = self.head_cursor()
        return self._wait_answer(self.get_input_request(request_id), cursor, deadline)

    def _wait_answer(self, request: InputRequest, cursor: str, deadline: float | None) -> Answer:
        done = _core.answer_from_request(request)
        if done is not None:
            return done
        expiry = _core.expiry_deadline(request, EXPIRY_GRACE_S)
        while True:
            wait = _core.remaining(_core.earliest(deadline, expiry))
            if wait is not None and wait <= 0:
                # Past the expiry (or our own timeout): ask the request itself.
                final = _core.settle(self.get_input_request(request.id), datetime.now(UTC))
                if final is not None:
                    return final
                if deadline is not None and time.monotonic() >= deadline:
                    return _core.timeout_answer(request.id, request.run_id)
                expiry = None
                continue
            try:
                events, cursor = self.events(after=cursor, wait=wait, limit=500)
            except errors.CursorExpired:
                cursor = self.head_cursor()
                done = _core.answer_from_request(self.get_input_request(request.id))
                if done is not None:
                    return done
                continue
            for event in events:
                done = _core.answer_from_event(event, request.id)
                if done is not None:
                    return done

    # --- the feed --------------------------------------------------------------------

    def head_cursor(self) -> str:
        """The feed's head now: events after it are the ones still to come."""
        return self.events(after="latest", limit=1)[1]

    def events(
        self, *, after: str = "earliest", wait: float | None = None, limit: int = 100
    ) -> tuple[list[Event], str]:
        """One page of the feed: ``(events, next_cursor)``. With ``wait`` (≤ 30 s) it
        long-polls until something arrives."""
        call = _core.events_call(after, wait, limit)
        data = self._send(call)
        return [Event.from_json(e) for e in data["events"]], str(data["next_cursor"])

    def snapshot(self) -> Snapshot:
        return Snapshot.from_json(self._send(Call("GET", "/v1/events/snapshot")))

    def watch(
        self, after: str = "latest", *, wait: float = _core.FEED_WAIT_MAX
    ) -> Iterator[Event | FeedReset]:
        """Iterate the feed for ever, long-polling. Each item's ``id`` is the cursor to
        resume from (pass it back as ``after``). On an expired cursor (410) it loads
        the snapshot, yields a :class:`FeedReset` carrying it, and continues from its
        head."""
        cursor = after
        while True:
            try:
                events, next_cursor = self.events(after=cursor, wait=wait, limit=500)
            except errors.CursorExpired:
                snap = self.snapshot()
                cursor = snap.head_cursor
                yield FeedReset(snap)
                continue
            yield from events
            cursor = next_cursor


class RunContext:
    """A run reported by a ``with`` block: ``working`` on entry; on exit
    ``completed`` (with :attr:`reason` and :attr:`report` if set), or ``failed`` when the
    block raised (the exception's class, a short message) — the exception then
    propagates."""

    def __init__(self, client: Client, run_id: str, fields: Mapping[str, Any]) -> None:
        self.client = client
        self.run_id = run_id
        self.reason: str | None = None
        self.report: dict[str, Any] | None = None
        self.result: SignalResult | None = None
        self._fields = dict(fields)
        self._token: Token[str | None] | None = None

    def __enter__(self) -> RunContext:
        self.client.put_run(self.run_id, **self._fields)
        self.client.signal(self.run_id, "working")
        self._token = _run.current_run.set(self.run_id)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._token is not None:
            _run.current_run.reset(self._token)
            self._token = None
        if exc is None:
            self.result = self.client.signal(
                self.run_id, "completed", reason=self.reason, report=self.report
            )
            return
        try:
            self.result = self.client.signal(
                self.run_id, "failed", report=self.report, **_run.failure_fields(exc)
            )
        except errors.RunbellError as report_error:  # never hide the block's own error
            exc.add_note(f"runbell: could not report the failure: {report_error}")

    def progress(
        self, message: str | None = None, counts: Mapping[str, Any] | None = None
    ) -> ProgressResult:
        return self.client.progress(self.run_id, message, counts)

    def ask(self, summary: str, **options: Any) -> Answer:
        """``client.ask`` for this run."""
        return self.client.ask(self.run_id, summary, **options)

    def signal(self, state: str, **fields: Any) -> SignalResult:
        return self.client.signal(self.run_id, state, **fields)


def _requires_approval(
    client: Client,
    summary: str | None,
    kind: str,
    run_id: str | None,
    details: Mapping[str, Any] | None,
    expires_in: float | None,
    timeout: float | None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        approval = _run.Approval(fn, summary, run_id, details)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            run = approval.run()
            answer = client.ask(
                run,
                approval.summary,
                kind=kind,
                details=approval.ask_details(args, kwargs),
                expires_in=expires_in,
                timeout=timeout,
            )
            if not answer.approved:
                raise errors.NotApproved(answer)
            # Declared once approved: a refused call never becomes an effect to review.
            op = approval.operation()
            client.declare_operations(run, [op])
            client.move_operation(
                run, op["operation_id"], "sent", evidence={"approved_by": answer.answered_by}
            )
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                client.move_operation(
                    run, op["operation_id"], "failed", evidence={"raised": type(exc).__name__}
                )
                raise
            client.move_operation(
                run, op["operation_id"], "confirmed", evidence={"returned": type(result).__name__}
            )
            return result

        return wrapper

    return decorate
