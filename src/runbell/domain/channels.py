"""What Runbell knows about each channel, declared once as values.

A channel's facts are everything the rest of Runbell decides by — who it is for, which
consent governs it, what its payload may weigh, which rate limits it counts against,
which of its fields are secret, how long its retries go on — so no dispatch, policy,
consent or destination code names a channel in an if-chain: each reads :data:`FACTS`.
How a channel is *built and sent* lives next to its code (``runbell.channels.<name>``,
whose ``SPEC`` carries these facts; ``runbell.channels.registry`` lists them). Pure: no
I/O, nothing of Runbell but the domain.

Example::

    assert FACTS["webpush"].consent_key == "webpush"
    assert "webhook" not in PERSON_CHANNELS
    assert offered(settings) == {"webpush", "chat", "webhook"}  # no SMTP host set
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from runbell.domain.retry import (
    CHAT_SCHEDULE,
    EMAIL_SCHEDULE,
    PUSH_SCHEDULE,
    WEBHOOK_SCHEDULE,
)

ALL_URGENCIES = ("low", "normal", "time_sensitive", "urgent")
INTERRUPTING = ("normal", "time_sensitive", "urgent")
#: The row every notification gets in its recipient's inbox: a channel in the outbox's
#: eyes (``deliveries.channel``), never sent anywhere, so it has no facts of its own.
INBOX = "inbox"
#: The event type of the one email that is not a notification: a person's sign-in links
#: (``flows.sessions.request_sign_in``), sealed at rest, rendered by the email channel.
SIGN_IN = "sign_in.link"

Audience = Literal["person", "tenant"]
#: Where a channel's destinations are kept (``store.destinations`` reads them by kind):
#: the person's own address, their browsers' push subscriptions, their and their
#: tenant's chat destinations, or the tenant's webhook endpoints.
DestinationKind = Literal["address", "push_subscription", "chat_destination", "endpoint"]
#: The shared outbound rate limits a send counts against (``domain.rate``).
RateScope = Literal["tenant", "endpoint"]
#: What a ``gone`` answer does to the destination: forget it (a browser unsubscribed),
#: disable it (a tenant's endpoint answered 410), or nothing beyond the failed delivery.
GoneMeans = Literal["forget", "disable", "record"]


@dataclass(frozen=True)
class ChannelFacts:
    """One channel, as every decision about it sees it.

    ``payload_limit_bytes`` bounds what the channel measures as its payload
    (``ChannelSpec.payload_size``); a bigger payload is refused before anything is sent,
    as a permanent failure (a retry would be just as big). ``secret_fields`` name the
    settings and ``Outbound.target`` keys whose values are secrets: they never appear in
    a log line, an error or a repr. ``requires`` is the setting without which the
    channel is off on this server (no rows are queued for it).
    """

    name: str
    audience: Audience
    destination: DestinationKind
    #: The key of a person's consent record that governs it (None: a tenant channel).
    consent_key: str | None
    #: The urgencies consented until the person says otherwise.
    default_consent: tuple[str, ...]
    #: The urgencies a person can choose for it.
    urgencies: tuple[str, ...]
    payload_limit_bytes: int
    rate_limit_scope: tuple[RateScope, ...]
    secret_fields: tuple[str, ...]
    #: A person's device may report displays and opens of what it delivered.
    receipts: bool
    #: A newer message with the same collapse key replaces an older one on the device,
    #: so a handled notification can be retracted in place.
    collapse: bool
    gone_means: GoneMeans
    retry_schedule: tuple[float, ...]
    requires: str | None = None


FACTS: Mapping[str, ChannelFacts] = MappingProxyType(
    {
        "email": ChannelFacts(
            name="email",
            audience="person",
            destination="address",
            consent_key="email",
            # The address the admin registered is the first act of consent for normal
            # urgency and up; low-urgency mail is opt-in.
            default_consent=INTERRUPTING,
            urgencies=ALL_URGENCIES,
            # The text part as rendered: far above any neutral text or sign-in mail.
            payload_limit_bytes=65_536,
            rate_limit_scope=(),
            secret_fields=("smtp_password",),
            receipts=True,
            collapse=False,
            gone_means="record",
            retry_schedule=EMAIL_SCHEDULE,
            requires="smtp_host",
        ),
        "webpush": ChannelFacts(
            name="webpush",
            audience="person",
            destination="push_subscription",
            consent_key="webpush",
            default_consent=INTERRUPTING,  # the subscription is the consent
            urgencies=ALL_URGENCIES,
            # Push services must accept 4096 bytes of ciphertext; aes128gcm adds an
            # 86-byte header and a 17-byte tag and delimiter, and nothing pads.
            payload_limit_bytes=3072,
            rate_limit_scope=(),
            # The endpoint is a capability URL; auth is the subscription's shared secret.
            secret_fields=("vapid_private_key", "endpoint", "auth"),
            receipts=True,
            collapse=True,
            gone_means="forget",
            retry_schedule=PUSH_SCHEDULE,
        ),
        "chat": ChannelFacts(
            name="chat",
            audience="person",
            destination="chat_destination",
            consent_key="chat",
            default_consent=INTERRUPTING,  # adding the destination is the consent
            urgencies=ALL_URGENCIES,
            # Title and text: the strictest common service (Discord) takes 2000
            # characters a message, and a message is never split.
            payload_limit_bytes=2000,
            rate_limit_scope=(),
            secret_fields=("url",),  # an Apprise URL holds the service's token
            receipts=True,
            collapse=False,
            gone_means="record",
            retry_schedule=CHAT_SCHEDULE,
        ),
        "webhook": ChannelFacts(
            name="webhook",
            audience="tenant",
            destination="endpoint",
            consent_key=None,
            default_consent=(),
            urgencies=(),
            # The signed JSON body; thin events are a few hundred bytes.
            payload_limit_bytes=1_048_576,
            rate_limit_scope=("tenant", "endpoint"),
            secret_fields=("url", "secrets"),  # a URL may hold a token; secrets sign
            receipts=False,
            collapse=False,
            gone_means="disable",
            retry_schedule=WEBHOOK_SCHEDULE,
        ),
    }
)

#: The channels that reach a person, in the order their rows are queued.
PERSON_CHANNELS: tuple[str, ...] = tuple(n for n, f in FACTS.items() if f.audience == "person")
TENANT_CHANNELS: tuple[str, ...] = tuple(n for n, f in FACTS.items() if f.audience == "tenant")
#: Consent a channel has until the person says otherwise, by consent key.
DEFAULT_CONSENT: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {f.consent_key: f.default_consent for f in FACTS.values() if f.consent_key is not None}
)
#: Where a person's device may say it showed or opened a notification.
RECEIPT_CHANNELS: tuple[str, ...] = (INBOX, *(n for n, f in FACTS.items() if f.receipts))
#: The channels whose shown messages a retraction can replace in place.
COLLAPSING: tuple[str, ...] = tuple(n for n, f in FACTS.items() if f.collapse)


def facts_of(channel: str) -> ChannelFacts:
    """The facts of ``channel``; ``KeyError`` for a name no channel has (the inbox)."""
    return FACTS[channel]


def offered(settings: object) -> frozenset[str]:
    """The channels this server sends on: each whose required setting is set (email needs
    an SMTP host). Read each time from ``settings``: the demo sets its mail sink after the
    server was built."""
    return frozenset(
        f.name for f in FACTS.values() if f.requires is None or getattr(settings, f.requires, None)
    )


def consented_urgencies(consent: Mapping[str, object] | None, channel: str) -> tuple[str, ...]:
    """The urgencies a person accepts on ``channel``: what their consent record says
    (``{"urgencies": [...], "given_at": ..., "how": ...}`` under the channel's consent
    key), else the channel's default."""
    facts = FACTS.get(channel)
    if facts is None or facts.consent_key is None:
        return ()
    given = (consent or {}).get(facts.consent_key)
    if isinstance(given, dict) and isinstance(given.get("urgencies"), list):
        return tuple(given["urgencies"])
    return facts.default_consent
