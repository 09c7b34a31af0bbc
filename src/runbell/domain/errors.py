"""Every error Runbell raises on purpose, under one root.

::

    RunbellError
    ├── ValidationFailed          bad input the caller can fix (→ 422)
    ├── NotFound                  unknown id, or another tenant's (→ 404, never 403)
    ├── Unauthorized              missing/bad credentials or signature (→ 401)
    ├── Forbidden                 authenticated but not allowed (→ 403, own tenant only)
    ├── TooManyAttempts           failed authentication past its burst (→ 429, Retry-After)
    ├── Conflict                  the current state forbids the action (→ 409)
    ├── Gone                      a cursor or resource that no longer exists (→ 410)
    ├── UnsafeDestination         an outbound URL refused by the SSRF guard
    └── ReaderError               a state reader could not say what the run's state is

Driver and library errors are wrapped with ``raise ... from exc`` so the cause is kept.
The HTTP layer maps each class to an RFC 9457 problem document; see ``runbell.api.problems``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the CLI imports this module on every start
if TYPE_CHECKING:
    from typing import Any


class RunbellError(Exception):
    """Root of every error Runbell raises on purpose."""

    status: int = 500
    title: str = "Internal error"
    type_slug: str = "internal"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class ValidationFailed(RunbellError):
    status = 422
    title = "Invalid request"
    type_slug = "validation"


class NotFound(RunbellError):
    status = 404
    title = "Not found"
    type_slug = "not-found"


class Unauthorized(RunbellError):
    status = 401
    title = "Unauthorized"
    type_slug = "unauthorized"


class Forbidden(RunbellError):
    status = 403
    title = "Forbidden"
    type_slug = "forbidden"


class TooManyAttempts(RunbellError):
    """Raised with ``retry_after`` (whole seconds) in its extra: the Retry-After header."""

    status = 429
    title = "Too many failed attempts"
    type_slug = "too-many-attempts"


class Conflict(RunbellError):
    status = 409
    title = "Conflict"
    type_slug = "conflict"


class Gone(RunbellError):
    status = 410
    title = "Gone"
    type_slug = "gone"


class UnsafeDestination(RunbellError):
    """An outbound URL the SSRF guard refused; ``detail`` says which rule refused it."""

    status = 422
    title = "Unsafe destination"
    type_slug = "unsafe-destination"


class ReaderError(RunbellError):
    """A state reader failed (network, status, unparsable body): the state is unknown."""

    status = 502
    title = "State reader failed"
    type_slug = "reader-failed"
