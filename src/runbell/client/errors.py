"""The SDK's exceptions, one root::

    RunbellError                  anything this SDK raises on purpose
    ├── ConfigError               no URL or key configured (arguments, environment, file)
    ├── ConnectionFailed          no answer from the server after every retry
    ├── APIError                  the server answered with a problem document (RFC 9457)
    │   ├── Unauthorized          401
    │   ├── Forbidden             403
    │   ├── NotFound              404
    │   ├── Conflict              409 (``current`` says what is true now)
    │   ├── CursorExpired         410 (``head_cursor``, ``snapshot_url``)
    │   ├── ValidationFailed      422 (``field``, ``errors``)
    │   └── Unavailable           429 / 503 after every retry
    └── NotApproved               ``requires_approval``: the person did not approve

Every :class:`APIError` carries the problem document as ``problem`` and its members as
attributes: ``status``, ``type``, ``title``, ``detail``, ``current``, ``field``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runbell.client.models import Answer

__all__ = [
    "APIError",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "CursorExpired",
    "Forbidden",
    "NotApproved",
    "NotFound",
    "RunbellError",
    "Unauthorized",
    "Unavailable",
    "ValidationFailed",
]


class RunbellError(Exception):
    """The root of every error this SDK raises. ``status`` is the HTTP status, or None
    when the server never answered."""

    status: int | None = None
    type: str | None = None
    title: str | None = None
    detail: str
    current: Any = None
    field: str | None = None

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ConfigError(RunbellError):
    """The client has no server URL or key: pass them, set ``RUNBELL_URL`` and
    ``RUNBELL_KEY``, or run ``runbell login``."""


class ConnectionFailed(RunbellError):
    """The server could not be reached (or dropped the connection) on every attempt."""


class APIError(RunbellError):
    """The server answered with an error: its problem document is ``problem``."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
        super().__init__(detail)
        self.status = status
        self.problem = problem
        self.type = problem.get("type")
        self.title = problem.get("title")
        self.current = problem.get("current")
        self.field = problem.get("field")
        #: A 403 of a scoped key or delegated token: the capability it lacks.
        self.missing_capability = problem.get("missing_capability")

    def __str__(self) -> str:
        return f"{self.status} {self.detail}"


class Unauthorized(APIError):
    """401: the key is unknown, revoked or missing."""


class Forbidden(APIError):
    """403: the key is valid but may not do this."""


class NotFound(APIError):
    """404: no such run or request in this tenant."""


class Conflict(APIError):
    """409: the current state forbids the change; ``current`` says what is true now."""


class CursorExpired(APIError):
    """410: the feed cursor is older than retention; load the snapshot."""

    @property
    def head_cursor(self) -> str | None:
        value = self.problem.get("head_cursor")
        return None if value is None else str(value)


class ValidationFailed(APIError):
    """422: the request was refused; ``field`` names the first bad input."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        return list(self.problem.get("errors") or [])


class Unavailable(APIError):
    """429 or 503 on every attempt: the server is overloaded or its database is down."""


class NotApproved(RunbellError):
    """Raised by :meth:`Client.requires_approval` when the answer was not an approval
    (rejected, expired, superseded, cancelled or timed out). ``answer`` says which."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(
            f"not approved: {answer.outcome}" + (f" ({answer.decision})" if answer.decision else "")
        )
        self.answer = answer


_BY_STATUS: dict[int, type[APIError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: CursorExpired,
    422: ValidationFailed,
    429: Unavailable,
    503: Unavailable,
}


def api_error(status: int, problem: dict[str, Any]) -> APIError:
    """The exception for an error answer."""
    return _BY_STATUS.get(status, APIError)(status, problem)
