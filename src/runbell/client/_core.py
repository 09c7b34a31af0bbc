"""What the sync and async clients share: the retry schedule, how each call is built,
and how answers and feed events are read. No I/O here."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from runbell.client import errors
from runbell.client.models import Answer, Event, InputRequest, _time

USER_AGENT = "runbell-python-client"
# A person's own app declares itself (``Client(as_app=True)``): see the server's
# ``api.deps.CLIENT_HEADER``.
CLIENT_HEADER = "X-Runbell-Client"
APP_CLIENT = "app"
FEED_WAIT_MAX = 30.0  # the server's longest long-poll (GET /v1/events?wait=)
RETRY_STATUSES = frozenset({429, 503})


def plain_http(url: str) -> bool:
    """Whether ``url`` is a plain ``http://`` server. Its client then gets a transport
    that does not load the CA bundle: httpx loads it for every client it makes (~30 ms of
    CPU, a fifth of a hook call's budget, bench/cli_start.py), and a client that only
    requests paths under an ``http://`` base URL and follows no redirects never speaks
    TLS. Proxies from the environment keep their own, verifying transports."""
    return url.lower().startswith("http://")


def new_id(prefix: str) -> str:
    """A fresh id for an event, a request or an Idempotency-Key."""
    # 128 random bits in hex, as uuid4().hex was (importing uuid cost a hook call ~8 ms).
    return f"{prefix}-{os.urandom(16).hex()}"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and full jitter, honouring
    ``Retry-After`` (capped at ``max_delay``). ``attempts`` counts the first try."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 10.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` starts at 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(ceiling / 2, ceiling)


def retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), or None."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass
class Call:
    """One HTTP call. ``idempotency_key`` is chosen once, so every retry reuses it."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    idempotency_key: str | None = None
    timeout: float | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.idempotency_key:
            headers["Idempotency-Key"] = self.idempotency_key
        return headers


def failure(response: httpx.Response) -> errors.APIError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {
            "status": response.status_code,
            "detail": response.text[:500] or response.reason_phrase,
        }
    return errors.api_error(response.status_code, body)


#: How many run ids a client remembers as existing (then it forgets them all, and asks
#: again on the next first PUT of each).
KNOWN_RUNS_MAX = 10_000


def remember(known: set[str], run_id: str) -> None:
    """Note that ``run_id`` exists, so the next PUT of it needs no question first."""
    if len(known) >= KNOWN_RUNS_MAX:
        known.clear()
    known.add(run_id)


def needs_owner(exc: errors.ValidationFailed) -> bool:
    """Whether a PUT was refused only because a new run needs an owner."""
    return exc.field == "owner" and "required" in (exc.detail or "")


def connection_failed(exc: Exception, url: str) -> errors.ConnectionFailed:
    reason = str(exc) or type(exc).__name__
    error = errors.ConnectionFailed(f"cannot reach Runbell at {url}: {reason}")
    error.__cause__ = exc
    return error


def compact(**fields: Any) -> dict[str, Any]:
    """The body members that were given (None means "not sent")."""
    return {k: v for k, v in fields.items() if v is not None}


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def expires_at(expires_in: float | None, expires_at: datetime | str | None) -> str | None:
    if expires_in is not None and expires_at is not None:
        raise ValueError("give expires_in or expires_at, not both")
    if expires_in is not None:
        return (datetime.now(UTC) + timedelta(seconds=expires_in)).isoformat()
    if isinstance(expires_at, datetime):
        if expires_at.tzinfo is None:
            raise ValueError("expires_at needs a timezone")
        return expires_at.isoformat()
    return expires_at


def normalize_options(options: Any) -> list[dict[str, str]] | None:
    """Options as ``[{id, label}]``; plain strings become ``{id: s, label: s}``."""
    if options is None:
        return None
    out = []
    for option in options:
        if isinstance(option, str):
            out.append({"id": option, "label": option})
        else:
            out.append({"id": str(option["id"]), "label": str(option.get("label", option["id"]))})
    return out


_ENDINGS = {
    "input_request.answered": "answered",
    "input_request.expired": "expired",
    "input_request.superseded": "superseded",
    "input_request.cancelled": "cancelled",
}


def answer_from_event(event: Event, request_id: str) -> Answer | None:
    """The answer this feed event gives to ``request_id``, if it is about it."""
    outcome = _ENDINGS.get(event.type)
    if outcome is None or event.data.get("input_request_id") != request_id:
        return None
    return Answer(
        outcome=outcome,  # type: ignore[arg-type]
        request_id=request_id,
        run_id=str(event.data.get("run_id") or event.run_id),
        decision=event.data.get("decision"),
        value=event.data.get("value"),
        answered_by=event.data.get("answered_by"),
        answered_at=_time(event.data.get("answered_at")),
        edited=bool(event.data.get("edited")),
    )


def answer_from_request(request: InputRequest) -> Answer | None:
    """The answer a request already holds, or None while it is pending."""
    if request.state == "pending":
        return None
    by = request.answered_by or {}
    return Answer(
        outcome=request.state,  # type: ignore[arg-type]
        request_id=request.id,
        run_id=request.run_id,
        decision=request.decision,
        value=request.value,
        answered_by=by.get("id") if isinstance(by, dict) else None,
        answered_at=_time(request.raw.get("answered_at")),
        edited=request.edited,
    )


def asked_before(exc: errors.Conflict, run_id: str) -> InputRequest | None:
    """The request a 409 on opening says already exists under that id for this run."""
    current = exc.current if isinstance(exc.current, dict) else {}
    found = current.get("input_request")
    if exc.field != "input_request_id" or not isinstance(found, dict):
        return None
    return InputRequest.from_json(found) if found.get("run_id") == run_id else None


def timeout_answer(request_id: str, run_id: str) -> Answer:
    return Answer(outcome="timeout", request_id=request_id, run_id=run_id)


def short_error(exc: BaseException) -> dict[str, str]:
    """A failed run's ``error``: the exception's class and the first line of its message,
    cut short. Never a traceback, never locals."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(message) > 300:
        message = message[:299] + "…"
    return {"code": type(exc).__name__, "message": message}


def put_run_body(
    owner: str | None,
    title: str | None,
    state: str | None,
    kind: str | None,
    subject: Mapping[str, Any] | None,
    objective: str | None,
    metadata: Mapping[str, Any] | None,
    details: Mapping[str, Any] | None,
    notify_on_complete: bool | None,
    authority: Mapping[str, Any] | None,
    stall_after_seconds: Any,
    sequence: int | None,
) -> dict[str, Any]:
    body = compact(
        owner=owner,
        title=title,
        state=state,
        kind=kind,
        subject=dict(subject) if subject is not None else None,
        objective=objective,
        metadata=dict(metadata) if metadata is not None else None,
        details=dict(details) if details is not None else None,
        notify_on_complete=notify_on_complete,
        authority=dict(authority) if authority is not None else None,
        sequence=sequence,
    )
    if stall_after_seconds is not UNSET:
        body["stall_after_seconds"] = stall_after_seconds
    return body


def job_body(done_when: Any, links: Any, depends_on: Any) -> dict[str, Any]:
    """A run's job fields for ``PUT``: those given (None clears one; UNSET leaves it)."""
    body: dict[str, Any] = {}
    if done_when is not UNSET:
        body["done_when"] = {"text": done_when} if isinstance(done_when, str) else _plain(done_when)
    if links is not UNSET:
        body["links"] = None if links is None else [_link(link) for link in links]
    if depends_on is not UNSET:
        body["depends_on"] = _plain(depends_on)
    return body


def _plain(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


def _link(link: Mapping[str, Any] | str) -> dict[str, Any]:
    """``"conversation:abc"`` → ``{"kind": "conversation", "id": "abc"}``."""
    if isinstance(link, str):
        kind, _, link_id = link.partition(":")
        return {"kind": kind, "id": link_id}
    return dict(link)


def list_runs_call(
    link: str | None, state: Sequence[str] | None, limit: int, after: str | None
) -> Call:
    params: dict[str, Any] = {"limit": limit}
    if link is not None:
        params["link"] = link
    if state:
        params["state"] = ",".join(state)
    if after:
        params["after"] = after
    return Call("GET", "/v1/runs", params=params)


def signal_body(
    event_id: str,
    state: str,
    reason: str | None,
    error: Mapping[str, Any] | None,
    report: Mapping[str, Any] | None,
    effects_verified: bool | None,
    sequence: int | None,
    at: datetime | None,
) -> dict[str, Any]:
    return compact(
        event_id=event_id,
        state=state,
        reason=reason,
        error=dict(error) if error is not None else None,
        report=dict(report) if report is not None else None,
        effects_verified=effects_verified,
        sequence=sequence,
        at=at.isoformat() if at is not None else None,
    )


def input_request_body(
    request_id: str,
    kind: str,
    summary: str,
    details: Mapping[str, Any] | None,
    options: Any,
    expires_in: float | None,
    expires_at_: datetime | str | None,
    blocks_work: bool | None,
    approvers: Any = None,
    action: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``approvers``: user ids or emails; only they may answer (None: the run's).
    ``action``: what approving lets happen (``{"kind": "shell", "command": …}``)."""
    return compact(
        input_request_id=request_id,
        kind=kind,
        summary=summary,
        details=dict(details) if details is not None else None,
        options=normalize_options(options),
        expires_at=expires_at(expires_in, expires_at_),
        blocks_work=blocks_work,
        approvers=[approvers] if isinstance(approvers, str) else _list_or_none(approvers),
        action=dict(action) if action is not None else None,
    )


def _list_or_none(values: Any) -> list[Any] | None:
    return list(values) if values is not None else None


def subject_ref(subject: Any) -> dict[str, Any]:
    """A subject given as ``{type, id}`` or ``"type:id"``, as the API takes it."""
    if isinstance(subject, str):
        kind, sep, ident = subject.partition(":")
        if not sep or not kind or not ident:
            raise ValueError(f"subject must be 'type:id' or {{type, id}}, not {subject!r}")
        subject = {"type": kind, "id": ident}
    return {"type": subject["type"], "id": subject["id"]}


def grant_body(user: str, subject: Any, role: str) -> dict[str, Any]:
    """``POST /v1/subject-grants``: ``subject`` as ``{type, id}`` or ``"type:id"``."""
    return {"user": user, "subject": subject_ref(subject), "role": role}


def group_ack_body(
    run_id: str | None,
    subject: Any,
    notification_ids: Sequence[str] | None,
    filter: str | None,
    up_to: str | None,
) -> dict[str, Any]:
    """``POST /v1/inbox/acknowledge``: exactly one group (a run, a subject, or ids),
    optionally narrowed by ``filter`` and ``up_to``."""
    named = sum(x is not None for x in (run_id, subject, notification_ids))
    if named != 1:
        raise ValueError("name exactly one group: run_id, subject or notification_ids")
    if isinstance(notification_ids, str):
        raise ValueError("notification_ids must be a list of ids, not one string")
    return compact(
        run_id=run_id,
        subject=subject_ref(subject) if subject is not None else None,
        notification_ids=list(notification_ids) if notification_ids is not None else None,
        filter=filter,
        up_to=up_to,
    )


def response_body(
    decision: str, value: Any, run_version: int, request_version: int
) -> dict[str, Any]:
    """``POST /v1/input-requests/{id}/responses``, bound to the versions read."""
    return compact(
        decision=decision,
        value=value,
        expected_run_version=run_version,
        expected_request_version=request_version,
    )


def delegation_body(capabilities: Any, expires_in: float, name: str) -> dict[str, Any]:
    """``POST /v1/runs/{id}/delegations``: a list of capability names, whole seconds."""
    if isinstance(capabilities, str):
        capabilities = [capabilities]
    return {"capabilities": list(capabilities), "expires_in": int(expires_in), "name": name}


def events_call(after: str, wait: float | None, limit: int) -> Call:
    params: dict[str, Any] = {"after": after, "limit": limit}
    timeout = None
    if wait:
        wait = round(min(max(wait, 0.0), FEED_WAIT_MAX), 3)
        params["wait"] = wait
        timeout = wait + 15.0  # the server holds the request up to `wait` seconds
    return Call("GET", "/v1/events", params=params, timeout=timeout)


def remaining(deadline: float | None) -> float | None:
    """Seconds left before a monotonic ``deadline``, capped at one long-poll; None means
    no deadline (one full long-poll)."""

    if deadline is None:
        return FEED_WAIT_MAX
    return min(FEED_WAIT_MAX, deadline - time.monotonic())


def earliest(*deadlines: float | None) -> float | None:
    given = [d for d in deadlines if d is not None]
    return min(given) if given else None


def expiry_deadline(request: InputRequest, grace: float) -> float | None:
    """A monotonic time just past the request's ``expires_at``, or None."""

    if request.expires_at is None:
        return None
    left = (request.expires_at - datetime.now(UTC)).total_seconds()
    return time.monotonic() + max(left, 0.0) + grace


def settle(request: InputRequest, now: datetime) -> Answer | None:
    """How a request ended, also when it is past its expiry but no sweep has marked it
    yet (the server refuses every answer after ``expires_at``)."""
    done = answer_from_request(request)
    if done is not None:
        return done
    if request.expires_at is not None and now >= request.expires_at:
        return Answer(outcome="expired", request_id=request.id, run_id=request.run_id)
    return None
