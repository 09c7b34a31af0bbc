"""A person's own settings: consent per channel and urgency, quiet hours, timezone, and
where they can be reached (browser push subscriptions, chat destinations).

Invariants kept here (DESIGN §2):

- 7: quiet hours are the person's own windows in their IANA timezone, validated whole
  before anything is stored; nothing here lets a runtime ask for a bypass.
- 8 and 11: a chat URL is sealed at rest and shown only redacted; a push subscription
  cannot be moved to another member by someone who knows only its endpoint.
- Consent is recorded per channel with when and how it was given; withdrawing an urgency
  counts as an opt-out. Every user-supplied URL passes the SSRF guard when registered
  (and again before every send).

The API (``/v1/me/…``) and the web app's settings page both call these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from runbell import metrics
from runbell.channels.chat_urls import check_destination as check_chat
from runbell.channels.chat_urls import redact
from runbell.domain.channels import PERSON_CHANNELS, consented_urgencies, facts_of
from runbell.domain.errors import Conflict, NotFound
from runbell.domain.principal import Principal
from runbell.domain.quiet_hours import QuietWindow, zone
from runbell.domain.records import ChatDestination, PushSubscription, QuietHours
from runbell.domain.ssrf import check_url
from runbell.flows.channel_config import vapid_keys
from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey, act_once
from runbell.flows.views import iso
from runbell.ids import new_id
from runbell.outbound import make_resolver
from runbell.store import destinations, engagement
from runbell.store.db import Tx

CHANNELS = PERSON_CHANNELS  # every channel that reaches a person has a consent


class PreferencesView(TypedDict):
    """``GET /v1/me/preferences``: the urgencies each channel may interrupt with, the
    consent record behind them, quiet hours, timezone and locale."""

    user_id: str
    email: str | None
    consent: dict[str, list[str]]
    consent_record: dict[str, Any]
    quiet_hours: list[QuietHours]
    timezone: str
    locale: str


class Me(TypedDict):
    user_id: str | None
    tenant_id: str
    role: str
    email: str | None


class SubscriptionView(TypedDict):
    id: str
    endpoint_host: str
    user_agent: str | None
    created_at: str | None
    last_success_at: str | None


class ChatView(TypedDict):
    id: str
    url: str  # the URL with its secrets cut out
    label: str | None
    shared: bool
    created_at: str | None


def preferences_of(core: Core, who: Principal) -> PreferencesView:
    """A person's preferences as ``GET /v1/me/preferences`` shows them."""
    assert who.user_id is not None
    with core.db.read() as conn:
        row = destinations.preferences(conn, who.tenant_id, who.user_id)
        email = destinations.email_of(conn, who.user_id)
    consent = (row["consent"] if row else None) or {}
    return {
        "user_id": who.user_id,
        "email": email,
        "consent": {c: list(consented_urgencies(consent, c)) for c in CHANNELS},
        "consent_record": consent,
        "quiet_hours": (row["quiet_hours"] if row else None) or [],
        "timezone": (row["timezone"] if row else None) or "UTC",
        "locale": (row["locale"] if row else None) or "en",
    }


def me(core: Core, who: Principal) -> Me:
    """Who the caller is: user id, tenant, role and email."""
    return {
        "user_id": who.user_id,
        "tenant_id": who.tenant_id,
        "role": who.role,
        "email": preferences_of(core, who)["email"],
    }


def consent_of(given: Mapping[Any, Sequence[str]] | None) -> dict[str, list[str]] | None:
    """Consent as the faces parsed it (channel → urgencies), as :func:`save_preferences`
    takes it."""
    return None if given is None else {str(c): list(u) for c, u in given.items()}


def save_preferences(
    core: Core,
    who: Principal,
    *,
    consent: dict[str, list[str]] | None = None,
    quiet_hours: Sequence[QuietWindow] | None = None,
    timezone: str | None = None,
    locale: str | None = None,
) -> PreferencesView:
    """Change what may interrupt the person; a None field stays as it is.

    Raises ``ValidationFailed`` before anything is written. Each channel named in
    ``consent`` gets a new consent record (its urgencies, when, how)."""
    assert who.user_id is not None
    if timezone is not None:
        zone(timezone)
    windows = [w.as_dict() for w in quiet_hours or []]
    current = preferences_of(core, who)
    record = dict(current["consent_record"])
    with core.db.transaction() as tx:
        for channel, urgencies in (consent or {}).items():
            facts = facts_of(channel)
            assert facts.consent_key is not None  # the faces accept person channels only
            before = set(current["consent"][channel])
            after = {u for u in urgencies if u in facts.urgencies}
            record[facts.consent_key] = {
                "urgencies": sorted(after, key=facts.urgencies.index),
                "given_at": tx.now.isoformat(),
                "how": "user",
            }
            withdrawn = before - after
            for u in withdrawn:
                tx.after_commit.append(metrics.OPT_OUTS.labels(channel, u).inc)
            if withdrawn:
                _opt_out_after_delivery(tx, who, channel, withdrawn)
        values: dict[str, Any] = {"consent": record, "updated_at": tx.now}
        if quiet_hours is not None:
            values["quiet_hours"] = windows
        if timezone is not None:
            values["timezone"] = timezone
        if locale is not None:
            values["locale"] = locale
        destinations.save_preferences(tx.conn, who.tenant_id, who.user_id, values)
    return preferences_of(core, who)


def _opt_out_after_delivery(tx: Tx, who: Principal, channel: str, withdrawn: set[str]) -> None:
    """Count an opt-out that followed a delivery on the same channel, with the attention
    type of the last notification it delivered (what may have driven the person away)."""
    assert who.user_id is not None
    attention = engagement.last_delivered_attention(tx.conn, who.tenant_id, who.user_id, channel)
    if attention is None:
        return
    for u in withdrawn:
        tx.after_commit.append(metrics.OPT_OUTS_AFTER_DELIVERY.labels(attention, channel, u).inc)


# --- web push subscriptions ----------------------------------------------------------


def vapid_public_key(core: Core) -> str:
    """The applicationServerKey for ``pushManager.subscribe`` (public by design)."""
    return vapid_keys(core).public_key


def subscription_view(row: PushSubscription) -> SubscriptionView:
    endpoint = row["endpoint"]
    host = endpoint.split("/")[2] if endpoint.count("/") >= 2 else "?"
    return {
        "id": row["id"],
        "endpoint_host": host,
        "user_agent": row["user_agent"],
        "created_at": iso(row["created_at"]),
        "last_success_at": iso(row["last_success_at"]),
    }


def subscribe(
    core: Core,
    who: Principal,
    endpoint: str,
    p256dh: str,
    auth: str,
    user_agent: str | None,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Register a browser's push subscription (the subscription is the consent): 201 when
    new; 200 when this endpoint was already registered (keys refreshed)."""

    def prepare() -> Act:
        # A name that does not resolve right now passes; every send checks it again.
        with contextlib.suppress(OSError):
            check_url(
                endpoint,
                allow_hosts=core.settings.outbound_allow_hosts,
                resolve=make_resolver(),
                field="endpoint",
            )
        return lambda tx: _subscribe_in(tx, who, endpoint, p256dh, auth, user_agent)

    return act_once(core.db, core.box, key, prepare)


def _subscribe_in(
    tx: Tx, who: Principal, endpoint: str, p256dh: str, auth: str, user_agent: str | None
) -> tuple[int, SubscriptionView]:
    user_id = who.user_id
    assert user_id is not None  # a person's own browser
    found = destinations.push_subscription_by_endpoint(tx.conn, who.tenant_id, endpoint)
    if (
        found
        and found["user_id"] != who.user_id
        and (found["p256dh"], found["auth"]) != (p256dh, auth)
    ):
        # Moving a subscription to another person needs the browser's own keys too
        # (a shared browser re-subscribing); knowing the endpoint alone is not enough.
        raise Conflict("this push subscription belongs to another member of the tenant")
    if found:
        sub_id, status = found["id"], 200
        destinations.update_push_subscription(
            tx.conn, sub_id, user_id=who.user_id, p256dh=p256dh, auth=auth, user_agent=user_agent
        )
    else:
        sub_id, status = new_id("sub"), 201
        destinations.insert_push_subscription(
            tx.conn,
            {
                "id": sub_id,
                "tenant_id": who.tenant_id,
                "user_id": user_id,
                "endpoint": endpoint,
                "p256dh": p256dh,
                "auth": auth,
                "user_agent": user_agent,
                "created_at": tx.now,
                "last_success_at": None,
            },
        )
    row = destinations.push_subscription(tx.conn, who.tenant_id, sub_id)
    assert row is not None
    return status, subscription_view(row)


def subscriptions(core: Core, who: Principal) -> list[PushSubscription]:
    """The person's registered browsers, as stored (the settings page shows them)."""
    assert who.user_id is not None
    with core.db.read() as conn:
        return destinations.push_subscriptions_of(conn, who.tenant_id, who.user_id)


def unsubscribe(core: Core, who: Principal, subscription_id: str) -> bool:
    """Forget one of the person's browsers; False when there was no such subscription."""
    assert who.user_id is not None
    with core.db.transaction() as tx:
        return destinations.delete_push_subscription(
            tx.conn, who.tenant_id, who.user_id, subscription_id
        )


def require_unsubscribe(core: Core, who: Principal, subscription_id: str) -> None:
    """:func:`unsubscribe`, 404 when there was nothing to forget."""
    if not unsubscribe(core, who, subscription_id):
        raise NotFound(f"no push subscription {subscription_id!r}")


# --- chat destinations ---------------------------------------------------------------


def chat_view(row: ChatDestination) -> ChatView:
    return {
        "id": row["id"],
        "url": row["url_hint"],
        "label": row["label"],
        "shared": row["user_id"] is None,
        "created_at": iso(row["created_at"]),
    }


def add_chat_destination(
    core: Core,
    who: Principal,
    url: str,
    label: str | None,
    *,
    shared: bool = False,
    key: IdempotencyKey | None = None,
) -> Answer:
    """Check and store an Apprise URL (sealed) for the person's own alerts, or, with
    ``shared``, a tenant-wide room (201)."""
    owner = None if shared else who.user_id

    def prepare() -> Act:
        # A name that does not resolve right now passes; every send checks it again.
        with contextlib.suppress(OSError):
            check_chat(url, allow_hosts=core.settings.outbound_allow_hosts)

        def act(tx: Tx) -> tuple[int, ChatView]:
            dest_id = new_id("chat")
            destinations.insert_chat_destination(
                tx.conn,
                {
                    "id": dest_id,
                    "tenant_id": who.tenant_id,
                    "user_id": owner,
                    "url_sealed": core.box.seal(url),
                    "url_hint": redact(url)[:200],
                    "label": label,
                    "created_at": tx.now,
                },
            )
            row = destinations.chat_destination(tx.conn, who.tenant_id, dest_id)
            assert row is not None
            return 201, chat_view(row)

        return act

    return act_once(core.db, core.box, key, prepare)


def chat_destinations(core: Core, who: Principal) -> list[ChatView]:
    """The person's own chat destinations and the tenant's shared rooms, as views."""
    assert who.user_id is not None
    with core.db.read() as conn:
        rows = destinations.chat_destinations_of(conn, who.tenant_id, who.user_id)
    return [chat_view(r) for r in rows]


def remove_chat_destination(
    core: Core, who: Principal, destination_id: str, *, own_only: bool = False
) -> bool:
    """Delete a chat destination: the person's own; an administrator may also delete a
    shared room unless ``own_only``. False when there was nothing to delete."""
    owner = None if who.is_admin and not own_only else who.user_id
    with core.db.transaction() as tx:
        return destinations.delete_chat_destination(
            tx.conn, who.tenant_id, destination_id, owner=owner
        )
