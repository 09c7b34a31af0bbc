"""What every channel shares: the message it is handed, the result, typed failures.

A channel is a small object with a ``name`` and ``async send(msg) -> Sent``. It gets a
fully rendered :class:`Outbound` (no database access, no decisions) and either returns
:class:`Sent` or raises one of the typed errors below, which the dispatcher turns into the
next state with the pure retry policy:

::

    DeliveryError
    ├── TransientDeliveryError   retry later (5xx, 429, connection refused, …)
    ├── PermanentDeliveryError   do not retry (``gone`` = remove the destination)
    └── DeliveryUnknown          the request may have arrived (timeout after write, reset):
                                 retried only under the same identity
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from runbell.domain.errors import RunbellError


class DeliveryError(RunbellError):
    def __init__(
        self,
        detail: str,
        *,
        status_code: int | None = None,
        response_excerpt: str | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail, **extra)
        self.status_code = status_code
        self.response_excerpt = response_excerpt


class TransientDeliveryError(DeliveryError):
    def __init__(self, detail: str, *, retry_after_s: float | None = None, **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.retry_after_s = retry_after_s


class PermanentDeliveryError(DeliveryError):
    def __init__(
        self, detail: str, *, gone: bool = False, operator_alert: bool = False, **kw: Any
    ) -> None:
        super().__init__(detail, **kw)
        self.gone = gone  # the destination no longer exists: delete or disable it
        self.operator_alert = operator_alert  # a configuration problem an operator must fix


class DeliveryUnknown(DeliveryError):
    pass


@dataclass(frozen=True)
class Outbound:
    """One try of one delivery, rendered for its channel. Nothing sensitive is in here:
    person-facing channels get the neutral summary and an opaque id; tenant webhooks get
    the thin event payload."""

    delivery_id: str
    tenant_id: str
    channel: str
    destination: str  # email address, subscription id, chat destination id, endpoint id
    identity: str  # stable across retries: webhook-id, push Topic source, Message-ID
    attempt_no: int
    now: datetime
    urgency: str
    title: str
    body: str
    deep_link: str  # absolute URL of /n/{notification_id}
    notification_id: str | None = None
    run_id: str | None = None
    collapse_key: str | None = None
    expires_at: datetime | None = None
    event_type: str | None = None
    payload: dict[str, Any] | None = None
    target: dict[str, Any] = field(default_factory=dict)  # channel-specific, e.g. keys


@dataclass(frozen=True)
class Sent:
    status_code: int | None = None
    provider_message_id: str | None = None
    response_excerpt: str | None = None


class Channel(Protocol):
    name: str

    async def send(self, msg: Outbound) -> Sent: ...
