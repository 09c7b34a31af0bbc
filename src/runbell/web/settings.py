"""The settings page: consent per channel and urgency, quiet hours and timezone, chat
destinations, and the browsers that get notifications.

=========================================================  =================================
``GET  /settings``, ``POST /settings``                      consent, quiet hours, timezone
``POST /settings/chat``, ``…/chat/{id}/delete``             chat destinations
``POST /settings/push/{id}/delete``                         forget a browser
``POST /settings/policy/preview``, ``POST /settings/policy``  admins: preview a policy against
                                                            the last 7 days, then save it
``POST /settings/machines``                                  admins: machine answers on or off
=========================================================  =================================

It also lists, read-only, the subjects an administrator granted this person (granted and
revoked on the people page, :mod:`runbell.web.people_page`).

The form is validated as the API validates ``PUT /v1/me/preferences``; a refused form is
shown again as it was sent, with why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from runbell import i18n
from runbell.api.deps import CoreDep
from runbell.api.schemas import ChatIn, PreferencesIn
from runbell.domain.channels import ALL_URGENCIES, PERSON_CHANNELS
from runbell.domain.errors import Forbidden, RunbellError, ValidationFailed
from runbell.domain.policy import TenantPolicy
from runbell.domain.quiet_hours import quiet_windows
from runbell.flows import dry_run, grants, machine_answers, policy, preferences
from runbell.flows.context import Core
from runbell.i18n import N_, _
from runbell.web import flow_words, wording
from runbell.web.forms import Checked, Session
from runbell.web.templating import render
from runbell.web.viewer import Viewer, viewer

URGENCIES = ALL_URGENCIES
# The settings page's labels, in the order the channels are declared.
CHANNELS = (
    ("email", N_("Email")),
    ("webpush", N_("Browser notifications")),
    ("chat", N_("Chat")),
)
assert tuple(c for c, _label in CHANNELS) == PERSON_CHANNELS
COMMON_ZONES = (
    "UTC",
    "Europe/London",
    "Europe/Paris",
    "Europe/Berlin",
    "Europe/Madrid",
    "Europe/Warsaw",
    "Europe/Kyiv",
    "Africa/Lagos",
    "Africa/Johannesburg",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Pacific/Auckland",
    "America/Sao_Paulo",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Anchorage",
    "Pacific/Honolulu",
)

POLICY_KEYS = frozenset({"rules", "replace_defaults", "quiet_hours_bypass"})

router = APIRouter(include_in_schema=False)


def settings_page(
    core: Core,
    v: Viewer,
    *,
    error: str | None = None,
    saved: str | None = None,
    draft: dict[str, Any] | None = None,
    status: int = 200,
    policy_draft: str | None = None,
    preview: Mapping[str, Any] | None = None,
    policy_error: str | None = None,
    machines_error: str | None = None,
) -> Response:
    prefs = preferences.preferences_of(core, v.who)
    chats = [{**c, "mine": not c["shared"]} for c in preferences.chat_destinations(core, v.who)]
    devices = preferences.subscriptions(core, v.who)
    windows = [*prefs["quiet_hours"], {"start": "", "end": ""}]
    assert v.who.user_id is not None  # a signed-in person
    mine = grants.list_grants(core, v.who, v.who.user_id)["grants"]
    ctx = v.base("settings", _("Settings"))
    ctx.update(
        prefs=draft or {**prefs, "quiet_hours": windows},
        channels=CHANNELS,
        urgencies=URGENCIES,
        zones=COMMON_ZONES,
        languages=[(code, i18n.NATIVE_NAME[code]) for code in i18n.SUPPORTED],
        chosen_locale=i18n.normalize((draft or prefs).get("locale")),
        chats=chats,
        devices=[
            {
                "id": d["id"],
                "user_agent": d["user_agent"],
                "created": v.time(d["created_at"]),
                "last": v.time(d["last_success_at"]),
            }
            for d in devices
        ],
        error=error,
        saved=saved,
        is_admin=v.who.is_admin,
        my_grants=[
            {**g, "role_text": _(wording.GRANT_ROLE_TEXT.get(g["role"], g["role"]))} for g in mine
        ],
        # Whether callback URLs and answering keys may answer (admins only; the CLI's
        # `runbell tenant machines` reads and sets the same switch).
        machines=machine_answers.allowed(core, v.who.tenant_id) if v.who.is_admin else None,
        machines_error=machines_error,
        policy_text=policy_draft if policy_draft is not None else _own_policy(core, v),
        preview=preview,
        policy_error=policy_error,
    )
    return render("settings.html.j2", ctx, status=status)


@router.get("/settings")
def settings_view(session: Session, core: CoreDep, saved: str | None = None) -> Response:
    words = {
        "prefs": N_("Your notification settings were saved."),
        "chat": N_("Chat destination added."),
        "chat-removed": N_("Chat destination removed."),
        "device-removed": N_("That browser will no longer get notifications."),
        "policy": N_("The attention policy was saved."),
        "machines-on": N_("Machines may answer this workspace's requests."),
        "machines-off": N_(
            "Machine answers are off: callback URLs and keys with input_requests.answer "
            "are refused."
        ),
    }
    v = viewer(core, session)
    said = words.get(saved or "")
    return settings_page(core, v, saved=_(said) if said else None)


@router.post("/settings")
def settings_save(signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    form = signed.form
    consent = {c: [u for u in form.all(f"consent_{c}") if u in URGENCIES] for c, _label in CHANNELS}
    windows = []
    i = 0
    while f"quiet_start_{i}" in form and i < 14:
        start, end = form.first(f"quiet_start_{i}").strip(), form.first(f"quiet_end_{i}").strip()
        if start or end:
            window: dict[str, Any] = {"start": start, "end": end}
            days = form.first(f"quiet_days_{i}").strip()
            if days:
                try:
                    window["days"] = [int(d) for d in days.split(",")]
                except ValueError:
                    window["days"] = days  # refused by validation below, with its message
            windows.append(window)
        i += 1
    tz_name = form.first("timezone").strip()
    # A form without the field (an older page) leaves the language as it is.
    locale = form.first("locale").strip() if "locale" in form else None
    current = preferences.preferences_of(core, v.who)["consent"]
    # Only channels whose urgencies changed get a new consent record (when and how).
    changed = {c: u for c, u in consent.items() if set(u) != set(current.get(c, []))}
    try:
        body = PreferencesIn.model_validate(
            {"consent": changed, "quiet_hours": windows, "timezone": tz_name}
        )
        if locale is not None and locale not in i18n.SUPPORTED:
            raise ValidationFailed(i18n._("choose one of the languages offered"), field="locale")
        preferences.save_preferences(
            core,
            v.who,
            consent=preferences.consent_of(body.consent),
            quiet_hours=quiet_windows(body.quiet_hours),
            timezone=body.timezone,
            locale=locale,
        )
    except (ValidationFailed, ValidationError) as exc:
        text = exc.detail if isinstance(exc, ValidationFailed) else _first_error(exc)
        draft = {
            "email": v.email,
            "consent": consent,
            "quiet_hours": [*windows, {"start": "", "end": ""}],
            "timezone": tz_name,
            "locale": locale or v.locale,
        }
        return settings_page(core, v, error=flow_words.conflict_text(text), draft=draft, status=422)
    return RedirectResponse("/settings?saved=prefs", status_code=303)


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid settings"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg"))


@router.post("/settings/chat")
def settings_add_chat(signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    try:
        body = ChatIn(
            url=signed.form.first("url").strip(),
            label=signed.form.first("label").strip() or None,
        )
        preferences.add_chat_destination(core, v.who, body.url, body.label)
    except (RunbellError, ValidationError) as exc:
        text = exc.detail if isinstance(exc, RunbellError) else _first_error(exc)
        return settings_page(
            core, v, error=_("That chat destination was not added:") + " " + text, status=422
        )
    return RedirectResponse("/settings?saved=chat", status_code=303)


@router.post("/settings/chat/{destination_id}/delete")
def settings_delete_chat(destination_id: str, signed: Checked, core: CoreDep) -> Response:
    # Only your own here: shared rooms are managed through the admin API.
    preferences.remove_chat_destination(core, signed.who, destination_id, own_only=True)
    return RedirectResponse("/settings?saved=chat-removed", status_code=303)


@router.post("/settings/push/{subscription_id}/delete")
def settings_delete_push(subscription_id: str, signed: Checked, core: CoreDep) -> Response:
    preferences.unsubscribe(core, signed.who, subscription_id)
    return RedirectResponse("/settings?saved=device-removed", status_code=303)


def _own_policy(core: Core, v: Viewer) -> str:
    """The tenant's own policy document, as the editor shows it (admins only)."""
    if not v.who.is_admin:
        return ""
    own = policy.get_policy(core, v.who.tenant_id)["tenant_rules"]
    return json.dumps(own, indent=2, sort_keys=True)


def _policy_doc(text: str) -> TenantPolicy:
    """The editor's text as a ``PUT /v1/policy`` document (JSON), validated like the API."""
    try:
        raw = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ValidationFailed(f"the policy is not valid JSON: {exc.msg}", field="policy") from exc
    if not isinstance(raw, dict) or not set(raw) <= POLICY_KEYS:
        raise ValidationFailed(
            "the policy must be a JSON object with rules, replace_defaults and quiet_hours_bypass",
            field="policy",
        )
    # Its keys checked above; the rules themselves by the flow, as PUT /v1/policy does.
    return cast(TenantPolicy, raw)


@router.post("/settings/policy/preview")
def settings_policy_preview(signed: Checked, core: CoreDep) -> Response:
    """What the edited policy would have decided over the last 7 days (nothing is saved)."""
    v = viewer(core, signed.session)
    if not v.who.is_admin:
        raise Forbidden("only administrators edit the attention policy")
    text = signed.form.first("policy")
    try:
        result = dry_run.dry_run(core, v.who.tenant_id, _policy_doc(text))
    except ValidationFailed as exc:
        return settings_page(core, v, policy_draft=text, policy_error=exc.detail, status=422)
    return settings_page(core, v, policy_draft=text, preview=result)


@router.post("/settings/policy")
def settings_policy_save(signed: Checked, core: CoreDep) -> Response:
    v = viewer(core, signed.session)
    if not v.who.is_admin:
        raise Forbidden("only administrators edit the attention policy")
    text = signed.form.first("policy")
    try:
        policy.set_policy(core, v.who.tenant_id, _policy_doc(text))
    except ValidationFailed as exc:
        return settings_page(core, v, policy_draft=text, policy_error=exc.detail, status=422)
    return RedirectResponse("/settings?saved=policy#policy", status_code=303)


@router.post("/settings/machines")
def settings_machines(signed: Checked, core: CoreDep) -> Response:
    """Turn machine answers (callback URLs, keys with ``input_requests.answer``) on or off
    for the workspace, as ``runbell tenant machines on|off`` does."""
    v = viewer(core, signed.session)
    if not v.who.is_admin:
        raise Forbidden("only administrators turn machine answers on or off")
    choice = signed.form.first("allowed")
    if choice not in ("on", "off"):
        text = _("Choose on or off. Nothing was changed.")
        return settings_page(core, v, machines_error=text, status=422)
    machine_answers.set_allowed(core, v.who.tenant_id, choice == "on")
    return RedirectResponse(f"/settings?saved=machines-{choice}#machines", status_code=303)
