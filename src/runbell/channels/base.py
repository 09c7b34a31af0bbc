"""What every channel shares: the message it is handed, the result, typed failures, and
the declaration (:class:`ChannelSpec`) each channel module exports as ``SPEC``.

A channel is a small object with a ``name`` and ``async send(msg) -> Sent``. It gets a
fully rendered :class:`Outbound` (no database access, no decisions) and either returns
:class:`Sent` or raises one of the typed errors below, which the dispatcher turns into the
next state with the pure retry policy. Each channel also measures its own payload
(``payload_size(msg)``, what counts against its facts' ``payload_limit_bytes``) and
refuses a bigger one before sending (:func:`refuse_oversized`):

::

    DeliveryError
    ├── TransientDeliveryError   retry later (5xx, 429, connection refused, …)
    ├── PermanentDeliveryError   do not retry (``gone`` = remove the destination)
    └── DeliveryUnknown          the request may have arrived (timeout after write, reset):
                                 retried only under the same identity
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from runbell.domain.channels import FACTS, ChannelFacts
from runbell.domain.errors import RunbellError

if TYPE_CHECKING:
    from runbell.config import Settings


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


@dataclass(frozen=True, repr=False)
class Outbound:
    """One try of one delivery, rendered for its channel. Nothing about a run is in here:
    person-facing channels get the neutral summary and an opaque id; tenant webhooks get
    the thin event payload; a sign-in email gets its links (unsealed only for the send).
    What *is* secret (a chat URL, signing secrets, a push endpoint: the channel's
    ``secret_fields``) stays out of the repr, and so out of any log or traceback."""

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
    # Web push only (flows.push_actions): the (action, neutral title) buttons, the
    # single-use token they carry (a credential: never in the repr), and whether the
    # message only replaces one already shown (a re-push after a refused action).
    actions: tuple[tuple[str, str], ...] = ()
    action_token: str | None = None
    replace_only: bool = False
    # The recipient's language (runbell.i18n): title and body come worded in it; a
    # channel's own words (an email's greeting and footer) are worded in it at send time.
    locale: str = "en"

    def __repr__(self) -> str:
        facts = FACTS.get(self.channel)
        secret = facts.secret_fields if facts is not None else tuple(self.target)
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "target":
                value = {k: "[secret]" if k in secret else v for k, v in value.items()}
            elif f.name == "action_token" and value is not None:
                value = "[secret]"
            elif f.name == "payload" and value is not None:
                value = f"<{len(value)} keys>"  # a sign-in mail's links are in here
            shown.append(f"{f.name}={value!r}")
        return f"Outbound({', '.join(shown)})"


@dataclass(frozen=True)
class Sent:
    status_code: int | None = None
    provider_message_id: str | None = None
    response_excerpt: str | None = None


class Channel(Protocol):
    name: str

    async def send(self, msg: Outbound) -> Sent: ...


def refuse_oversized(facts: ChannelFacts, size: int) -> None:
    """Raise before sending when a payload of ``size`` bytes is over the channel's limit:
    permanent (a retry would be just as big), not ``gone`` (the destination is fine)."""
    if size > facts.payload_limit_bytes:
        raise PermanentDeliveryError(
            f"{facts.name} payload is {size} bytes, more than {facts.payload_limit_bytes}"
        )


@dataclass(frozen=True)
class Setup:
    """What building a channel may use: the settings, the base of the links it sends, and
    the server's VAPID key pair (made once and kept sealed by
    ``runbell.flows.channel_config``; read only when the channel that needs it is built)."""

    settings: Settings
    public_url: str
    # () -> runbell.channels.webpush.VapidKeys (named loosely: base imports no channel)
    vapid_keys: Callable[[], Any]


#: A stored destination (as ``store.destinations.find`` reads it) → ``Outbound.target``;
#: the second argument opens what is sealed at rest.
TargetOf = Callable[[Mapping[str, Any], Callable[[str], str]], dict[str, Any]]


@dataclass(frozen=True)
class ChannelSpec:
    """One channel, declared: its facts (``runbell.domain.channels``, what dispatch,
    policy, consent and destinations decide by), how it is built from the server's
    configuration (``None``: not configured here, e.g. email without an SMTP host), and
    how a stored destination becomes the target it sends to. Every channel module
    exports one as ``SPEC``; ``runbell.channels.registry`` lists them."""

    facts: ChannelFacts
    build: Callable[[Setup], Channel | None]
    target: TargetOf

    @property
    def name(self) -> str:
        return self.facts.name
