"""A person's own settings: consent per channel and urgency, quiet hours, destinations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Response

from runbell.api.deps import Admin, CoreDep, User
from runbell.api.idempotent import IdemKey
from runbell.api.openapi import SSRF_RULE, problems, rule, rules
from runbell.api.responses import answered
from runbell.api.schemas import ChatIn, PreferencesIn, PushSubscriptionIn
from runbell.domain.errors import NotFound
from runbell.domain.quiet_hours import quiet_windows
from runbell.flows import preferences

router = APIRouter(tags=["me"])
CHAT_RULES = rules(
    rule(
        "url",
        "a valid URL of that Apprise service, naming exactly one target "
        "(TLS verification stays on)",
    ),
    rule("url", SSRF_RULE, "unsafe-destination"),
)


@router.get("/v1/me", responses=problems(401, 403, 503))
def me(who: User, core: CoreDep) -> Mapping[str, Any]:
    return preferences.me(core, who)


@router.get("/v1/me/preferences", responses=problems(401, 403, 503))
def get_preferences(who: User, core: CoreDep) -> Mapping[str, Any]:
    """Consent per channel and urgency (with when and how it was given), quiet hours."""
    return preferences.preferences_of(core, who)


@router.put(
    "/v1/me/preferences",
    responses=problems(401, 403, 413, 422, 503),
    openapi_extra=rules(rule("quiet_hours.end", "differs from the window's start")),
)
def put_preferences(body: PreferencesIn, who: User, core: CoreDep) -> Mapping[str, Any]:
    """Change what may interrupt you. Validated whole; nothing is stored on error."""
    return preferences.save_preferences(
        core,
        who,
        consent=preferences.consent_of(body.consent),
        quiet_hours=quiet_windows(body.quiet_hours),
        timezone=body.timezone,
        locale=body.locale,
    )


# --- web push subscriptions ----------------------------------------------------------


@router.get("/v1/push/vapid-public-key", responses=problems(503))
def vapid_public_key(core: CoreDep) -> dict[str, str]:
    """The applicationServerKey for ``pushManager.subscribe`` (public by design)."""
    return {"public_key": preferences.vapid_public_key(core)}


@router.post(
    "/v1/me/push-subscriptions",
    status_code=201,
    response_model=None,
    responses={
        200: {"description": "This endpoint was registered already; its keys are refreshed"},
        **problems(401, 403, 409, 413, 422, 503),
    },
    openapi_extra=rules(rule("endpoint", SSRF_RULE, "unsafe-destination")),
)
def add_subscription(body: PushSubscriptionIn, who: User, core: CoreDep, key: IdemKey) -> Response:
    """Register this browser's push subscription (the subscription is the consent).
    201 when new; 200 when this endpoint was already registered (keys refreshed)."""
    return answered(
        preferences.subscribe(
            core, who, body.endpoint, body.keys.p256dh, body.keys.auth, body.user_agent, key
        )
    )


@router.get("/v1/me/push-subscriptions", responses=problems(401, 403, 503))
def list_subscriptions(who: User, core: CoreDep) -> Mapping[str, Any]:
    rows = preferences.subscriptions(core, who)
    return {"subscriptions": [preferences.subscription_view(r) for r in rows]}


@router.delete(
    "/v1/me/push-subscriptions/{subscription_id}",
    status_code=204,
    responses=problems(401, 403, 404, 413, 503),
)
def delete_subscription(subscription_id: str, who: User, core: CoreDep) -> Response:
    preferences.require_unsubscribe(core, who, subscription_id)
    return Response(status_code=204)


# --- chat destinations ---------------------------------------------------------------


@router.post(
    "/v1/me/chat-destinations",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 413, 422, 503),
    openapi_extra=CHAT_RULES,
)
def add_my_chat(body: ChatIn, who: User, core: CoreDep, key: IdemKey) -> Response:
    """An Apprise URL for your own alerts (Slack, Telegram, Discord, Matrix, ntfy, …)."""
    return answered(preferences.add_chat_destination(core, who, body.url, body.label, key=key))


@router.post(
    "/v1/chat-destinations",
    status_code=201,
    response_model=None,
    responses=problems(401, 403, 413, 422, 503),
    openapi_extra=CHAT_RULES,
)
def add_shared_chat(body: ChatIn, who: Admin, core: CoreDep, key: IdemKey) -> Response:
    """A tenant-wide room that receives every member's pushed alerts (neutral texts)."""
    return answered(
        preferences.add_chat_destination(core, who, body.url, body.label, shared=True, key=key)
    )


@router.get("/v1/me/chat-destinations", responses=problems(401, 403, 503))
def list_my_chat(who: User, core: CoreDep) -> Mapping[str, Any]:
    return {"destinations": preferences.chat_destinations(core, who)}


@router.delete(
    "/v1/me/chat-destinations/{destination_id}",
    status_code=204,
    responses=problems(401, 403, 404, 413, 503),
)
def delete_my_chat(destination_id: str, who: User, core: CoreDep) -> Response:
    if not preferences.remove_chat_destination(core, who, destination_id):
        raise NotFound(f"no chat destination {destination_id!r}")
    return Response(status_code=204)
