"""A person's own settings: consent per channel and urgency, quiet hours, destinations."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from runbell import metrics
from runbell.api.deps import Admin, Core, User
from runbell.api.idempotent import Act, IdemKey, act_once
from runbell.api.openapi import problems
from runbell.channels.chat import check_destination as check_chat
from runbell.channels.chat import redact
from runbell.domain.dispatch import ALL_URGENCIES
from runbell.domain.errors import Conflict, NotFound
from runbell.domain.principal import Principal
from runbell.domain.quiet_hours import QuietWindow, zone
from runbell.domain.ssrf import check_url
from runbell.flows.attention import consented_urgencies
from runbell.flows.context import Runbell
from runbell.flows.idempotency import once
from runbell.flows.views import iso
from runbell.ids import new_id
from runbell.outbound import make_resolver
from runbell.store import tables as t
from runbell.store.db import Tx

router = APIRouter(tags=["me"])
Urgency = Literal["low", "normal", "time_sensitive", "urgent"]
CHANNELS = ("email", "webpush", "chat")


class PreferencesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    consent: dict[Literal["email", "webpush", "chat"], list[Urgency]] | None = Field(
        default=None, description="urgencies each channel may interrupt you for"
    )
    quiet_hours: list[dict[str, Any]] | None = Field(default=None, max_length=14)
    timezone: str | None = Field(default=None, max_length=64)
    locale: str | None = Field(default=None, max_length=32)


class PushKeys(BaseModel):
    model_config = ConfigDict(extra="forbid")
    p256dh: str = Field(min_length=40, max_length=200)
    auth: str = Field(min_length=16, max_length=100)


class PushSubscriptionIn(BaseModel):
    model_config = ConfigDict(extra="ignore")  # browsers add expirationTime
    endpoint: str = Field(min_length=10, max_length=2000)
    keys: PushKeys
    user_agent: str | None = Field(default=None, max_length=300)


class ChatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=6, max_length=2000, description="an Apprise URL")
    label: str | None = Field(default=None, max_length=200)


def preferences_of(core: Runbell, who: Principal) -> dict[str, Any]:
    """A person's preferences as ``GET /v1/me/preferences`` shows them (also the web app)."""
    with core.db.read() as conn:
        row = conn.execute(
            sa.select(t.preferences).where(
                t.preferences.c.tenant_id == who.tenant_id, t.preferences.c.user_id == who.user_id
            )
        ).first()
        email = conn.execute(sa.select(t.users.c.email).where(t.users.c.id == who.user_id)).scalar()
    consent = (row.consent if row else None) or {}
    return {
        "user_id": who.user_id,
        "email": email,
        "consent": {c: list(consented_urgencies(consent, c)) for c in CHANNELS},
        "consent_record": consent,
        "quiet_hours": (row.quiet_hours if row else None) or [],
        "timezone": (row.timezone if row else None) or "UTC",
        "locale": (row.locale if row else None) or "en",
    }


@router.get("/v1/me", responses=problems(401, 403, 503))
def me(who: User, core: Core) -> dict[str, Any]:
    out = preferences_of(core, who)
    return {
        "user_id": who.user_id,
        "tenant_id": who.tenant_id,
        "role": who.role,
        "email": out["email"],
    }


@router.get("/v1/me/preferences", responses=problems(401, 403, 503))
def get_preferences(who: User, core: Core) -> dict[str, Any]:
    """Consent per channel and urgency (with when and how it was given), quiet hours."""
    return preferences_of(core, who)


@router.put("/v1/me/preferences", responses=problems(401, 403, 413, 422, 503))
def put_preferences(body: PreferencesIn, who: User, core: Core) -> dict[str, Any]:
    """Change what may interrupt you. Validated whole; nothing is stored on error."""
    return save_preferences(core, who, body)


def save_preferences(core: Runbell, who: Principal, body: PreferencesIn) -> dict[str, Any]:
    """Validate and store a preferences change (the API and the settings page share it).

    Raises ``ValidationFailed`` before anything is written."""
    if body.timezone is not None:
        zone(body.timezone)
    windows = [QuietWindow.parse(w).as_dict() for w in body.quiet_hours or []]
    current = preferences_of(core, who)
    record = dict(current["consent_record"])
    with core.db.transaction() as tx:
        now = tx.now
        for channel, urgencies in (body.consent or {}).items():
            before = set(current["consent"][channel])
            after = {u for u in urgencies if u in ALL_URGENCIES}
            record[channel] = {
                "urgencies": sorted(after, key=ALL_URGENCIES.index),
                "given_at": now.isoformat(),
                "how": "user",
            }
            for u in before - after:
                tx.after_commit.append(metrics.OPT_OUTS.labels(channel, u).inc)
        values: dict[str, Any] = {"consent": record, "updated_at": now}
        if body.quiet_hours is not None:
            values["quiet_hours"] = windows
        if body.timezone is not None:
            values["timezone"] = body.timezone
        if body.locale is not None:
            values["locale"] = body.locale
        p = t.preferences
        done = tx.conn.execute(
            sa.update(p)
            .where(p.c.tenant_id == who.tenant_id, p.c.user_id == who.user_id)
            .values(**values)
        ).rowcount
        if not done:
            tx.conn.execute(
                p.insert().values(
                    tenant_id=who.tenant_id, user_id=who.user_id, **{"consent": {}, **values}
                )
            )
    return preferences_of(core, who)


# --- web push subscriptions ----------------------------------------------------------


@router.get("/v1/push/vapid-public-key", responses=problems(503))
def vapid_public_key(core: Core) -> dict[str, str]:
    """The applicationServerKey for ``pushManager.subscribe`` (public by design)."""
    from runbell.dispatch.wiring import vapid_keys

    return {"public_key": vapid_keys(core).public_key}


def _subscription_view(row: Any) -> dict[str, Any]:
    host = row.endpoint.split("/")[2] if row.endpoint.count("/") >= 2 else "?"
    return {
        "id": row.id,
        "endpoint_host": host,
        "user_agent": row.user_agent,
        "created_at": iso(row.created_at),
        "last_success_at": iso(row.last_success_at),
    }


@router.post(
    "/v1/me/push-subscriptions",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 409, 413, 422, 503),
)
def add_subscription(body: PushSubscriptionIn, who: User, core: Core, key: IdemKey) -> Response:
    """Register this browser's push subscription (the subscription is the consent).
    201 when new; 200 when this endpoint was already registered (keys refreshed)."""

    def prepare() -> Act:
        # A name that does not resolve right now passes; every send checks it again.
        with contextlib.suppress(OSError):
            check_url(
                body.endpoint,
                allow_hosts=core.settings.outbound_allow_hosts,
                resolve=make_resolver(),
            )
        return lambda tx: _subscribe_in(tx, who, body)

    return act_once(core, key, prepare)


def _subscribe_in(tx: Tx, who: Principal, body: PushSubscriptionIn) -> tuple[int, dict[str, Any]]:
    p = t.push_subscriptions
    found = tx.conn.execute(
        sa.select(p.c.id, p.c.user_id, p.c.p256dh, p.c.auth).where(
            p.c.tenant_id == who.tenant_id, p.c.endpoint == body.endpoint
        )
    ).first()
    if (
        found
        and found.user_id != who.user_id
        and (found.p256dh, found.auth) != (body.keys.p256dh, body.keys.auth)
    ):
        # Moving a subscription to another person needs the browser's own keys too
        # (a shared browser re-subscribing); knowing the endpoint alone is not enough.
        raise Conflict("this push subscription belongs to another member of the tenant")
    if found:
        tx.conn.execute(
            sa.update(p)
            .where(p.c.id == found.id)
            .values(
                user_id=who.user_id,
                p256dh=body.keys.p256dh,
                auth=body.keys.auth,
                user_agent=body.user_agent,
            )
        )
        sub_id, status = found.id, 200
    else:
        sub_id, status = new_id("sub"), 201
        tx.conn.execute(
            p.insert().values(
                id=sub_id,
                tenant_id=who.tenant_id,
                user_id=who.user_id,
                endpoint=body.endpoint,
                p256dh=body.keys.p256dh,
                auth=body.keys.auth,
                user_agent=body.user_agent,
                created_at=tx.now,
            )
        )
    row = tx.conn.execute(sa.select(p).where(p.c.id == sub_id)).one()
    return status, _subscription_view(row)


@router.get("/v1/me/push-subscriptions", responses=problems(401, 403, 503))
def list_subscriptions(who: User, core: Core) -> dict[str, Any]:
    p = t.push_subscriptions
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(p)
            .where(p.c.tenant_id == who.tenant_id, p.c.user_id == who.user_id)
            .order_by(p.c.id)
        ).all()
    return {"subscriptions": [_subscription_view(r) for r in rows]}


@router.delete(
    "/v1/me/push-subscriptions/{subscription_id}",
    status_code=204,
    responses=problems(401, 403, 404, 413, 503),
)
def delete_subscription(subscription_id: str, who: User, core: Core) -> Response:
    p = t.push_subscriptions
    with core.db.transaction() as tx:
        gone = tx.conn.execute(
            sa.delete(p).where(
                p.c.tenant_id == who.tenant_id,
                p.c.user_id == who.user_id,
                p.c.id == subscription_id,
            )
        ).rowcount
        if not gone:
            raise NotFound(f"no push subscription {subscription_id!r}")
    return Response(status_code=204)


# --- chat destinations ---------------------------------------------------------------


def add_chat_destination(
    core: Runbell, who: Principal, body: ChatIn, user_id: str | None
) -> dict[str, Any]:
    """Check and store an Apprise URL (sealed); ``user_id`` None makes it tenant-wide."""
    act = chat_destination(core, who, body, user_id)
    return once(core.db, core.box, None, act).content()


def chat_destination(core: Runbell, who: Principal, body: ChatIn, user_id: str | None) -> Act:
    """Check the URL now (outside the transaction); the action stores it (201)."""
    # A name that does not resolve right now passes; every send checks it again.
    with contextlib.suppress(OSError):
        check_chat(body.url, allow_hosts=core.settings.outbound_allow_hosts)
    c = t.chat_destinations

    def act(tx: Tx) -> tuple[int, dict[str, Any]]:
        dest_id = new_id("chat")
        tx.conn.execute(
            c.insert().values(
                id=dest_id,
                tenant_id=who.tenant_id,
                user_id=user_id,
                url_sealed=core.box.seal(body.url),
                url_hint=redact(body.url)[:200],
                label=body.label,
                created_at=tx.now,
            )
        )
        row = tx.conn.execute(sa.select(c).where(c.c.id == dest_id)).one()
        return 201, _chat_view(row)

    return act


def _chat_view(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "url": row.url_hint,
        "label": row.label,
        "shared": row.user_id is None,
        "created_at": iso(row.created_at),
    }


@router.post(
    "/v1/me/chat-destinations",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 413, 422, 503),
)
def add_my_chat(body: ChatIn, who: User, core: Core, key: IdemKey) -> Response:
    """An Apprise URL for your own alerts (Slack, Telegram, Discord, Matrix, ntfy, …)."""
    return act_once(core, key, lambda: chat_destination(core, who, body, who.user_id))


@router.post(
    "/v1/chat-destinations",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 413, 422, 503),
)
def add_shared_chat(body: ChatIn, who: Admin, core: Core, key: IdemKey) -> Response:
    """A tenant-wide room that receives every member's pushed alerts (neutral texts)."""
    return act_once(core, key, lambda: chat_destination(core, who, body, None))


@router.get("/v1/me/chat-destinations", responses=problems(401, 403, 503))
def list_my_chat(who: User, core: Core) -> dict[str, Any]:
    c = t.chat_destinations
    with core.db.read() as conn:
        rows = conn.execute(
            sa.select(c)
            .where(
                c.c.tenant_id == who.tenant_id,
                sa.or_(c.c.user_id == who.user_id, c.c.user_id.is_(None)),
            )
            .order_by(c.c.id)
        ).all()
    return {"destinations": [_chat_view(r) for r in rows]}


@router.delete(
    "/v1/me/chat-destinations/{destination_id}",
    status_code=204,
    responses=problems(401, 403, 404, 413, 503),
)
def delete_my_chat(destination_id: str, who: User, core: Core) -> Response:
    c = t.chat_destinations
    cond = [c.c.tenant_id == who.tenant_id, c.c.id == destination_id]
    if not who.is_admin:
        cond.append(c.c.user_id == who.user_id)
    with core.db.transaction() as tx:
        if not tx.conn.execute(sa.delete(c).where(*cond)).rowcount:
            raise NotFound(f"no chat destination {destination_id!r}")
    return Response(status_code=204)
