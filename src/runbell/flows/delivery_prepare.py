"""Prepare: the dispatch-time checks for one claimed delivery, and the message they allow.

Everything the gate (:func:`runbell.domain.dispatch.gate`) decides on is read *now*, in one
read, not taken from when the notification was created (DESIGN §2):

- 8: the recipient's membership and access to the run, and whether the destination still
  exists (an address may have changed, a subscription may be gone);
- 6: the notification's state (acknowledged anywhere → nothing more is sent);
- 7: consent and quiet hours in the person's timezone, and the tenant's bypass list;
- 11: the :class:`~runbell.channels.base.Outbound` carries neutral texts and an opaque id
  only — never the run's title, reason or details.

For a tenant webhook: the endpoint as it is now (enabled, its event-type filter, its live
signing secrets). For a sign-in email: only whether its links are still alive (the person
asked for it a moment ago; consent and quiet hours are for alerts).

Which channel a row is on decides nothing here by name: its facts (``domain.channels``)
say who it is for and where its destinations are kept, and its spec
(``channels.registry``) turns the destination found now into the target it sends to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Connection

from runbell import i18n
from runbell.channels import registry
from runbell.channels.base import Outbound
from runbell.domain.channels import FACTS, SIGN_IN, consented_urgencies, facts_of
from runbell.domain.dispatch import DispatchContext, Gate, gate
from runbell.domain.escalation import RETRACTED
from runbell.domain.principal import Principal
from runbell.domain.push_actions import REPUSHED
from runbell.domain.quiet_hours import QuietWindow
from runbell.domain.records import Delivery, Destination, Endpoint
from runbell.flows import neutral_words, push_actions
from runbell.flows.context import Core
from runbell.flows.policy import policy_for
from runbell.flows.sessions import LINK_TTL, open_links
from runbell.i18n import _
from runbell.store import accounts, destinations, endpoints, runs
from runbell.store import notifications as notes


@dataclass
class Prepared:
    """What the gate decided, the message to send when it said ``send``, and what
    recording the outcome needs (the metrics labels, the retry bound, the latency base)."""

    gate: Gate
    message: Outbound | None = None
    attention_type: str = "webhook"
    expires_at: datetime | None = None
    created_at: datetime | None = None


def prepare(core: Core, row: Delivery, now: datetime) -> Prepared:
    """Check a claimed delivery row against the state of things at ``now``."""
    if row["channel"] not in FACTS:  # written by a newer version, or by hand
        return Prepared(Gate("skip", f"channel {row['channel']} not known"))
    with core.db.read() as conn:
        if facts_of(row["channel"]).audience == "tenant":
            eps = endpoints.get_many(conn, {(row["tenant_id"], row["destination"])})
            return prepare_webhook(core, eps.get((row["tenant_id"], row["destination"])), row, now)
        if row["event_type"] == RETRACTED:
            return _prepare_retraction(core, conn, row, now)
        if row["event_type"] == SIGN_IN:
            return _prepare_sign_in(core, row, now)
        return _prepare_person(core, conn, row, now)


def prepare_webhook(
    core: Core,
    ep: Endpoint | None,
    row: Delivery,
    now: datetime,
    opened: dict[str, str] | None = None,
) -> Prepared:
    """The gate and message for a webhook row, given its endpoint as read at claim time
    (``None``: deleted). ``opened`` caches unsealed secrets across calls (the worker's)."""
    if ep is None:
        return Prepared(Gate("cancel", "endpoint deleted"))
    channel = row["channel"]
    ctx = DispatchContext(
        channel=channel,
        urgency="normal",
        endpoint_enabled=ep["status"] == "enabled",
        endpoint_wants_event=not ep["event_types"] or row["event_type"] in ep["event_types"],
    )
    decided = gate(ctx, now)
    if decided.action != "send":
        return Prepared(decided, created_at=row["created_at"])
    live = {**ep, "secrets": [s for s in ep["secrets"] if endpoints.live(s, now)]}
    target = registry.spec(channel).target(live, lambda sealed: _open(core, sealed, opened))
    base = core.public_url
    msg = Outbound(
        delivery_id=row["id"],
        tenant_id=row["tenant_id"],
        channel=channel,
        destination=ep["id"],
        identity=row["id"],
        attempt_no=row["attempt_count"],
        now=now,
        urgency="normal",
        title=row["event_type"] or "",
        body="",
        deep_link=f"{base}/runs/{row['run_id']}" if row["run_id"] else base,
        run_id=row["run_id"],
        event_type=row["event_type"],
        payload=row["payload"],
        target=target,
    )
    return Prepared(decided, msg, created_at=row["created_at"])


def _open(core: Core, sealed: str, opened: dict[str, str] | None) -> str:
    if opened is None:
        return core.box.open(sealed)
    plain = opened.get(sealed)
    if plain is None:
        if len(opened) > 1000:  # rotated secrets pile up; start again rather than grow
            opened.clear()
        plain = opened[sealed] = core.box.open(sealed)
    return plain


def _prepare_person(core: Core, conn: Connection, row: Delivery, now: datetime) -> Prepared:
    tenant_id, notification_id = row["tenant_id"], row["notification_id"]
    again = row["event_type"] == REPUSHED  # a snooze's re-push, or a refused action's
    if again:
        notification_id = (row["payload"] or {}).get("notification_id")
    assert notification_id is not None  # a person channel's delivery carries its notification
    n = notes.find(conn, tenant_id, notification_id)
    if n is None:
        return Prepared(Gate("cancel", "notification is gone"))
    user_id = n["recipient_user_id"]
    role = accounts.membership_role(conn, tenant_id, user_id)
    digest = n["attention_type"] == "digest"  # no run of its own (flows.digests)
    run = None if digest else runs.get_run(conn, tenant_id, n["run_id"])
    can_see = role is not None and (
        digest
        or runs.can_see_run(
            conn,
            Principal(tenant_id=tenant_id, kind="user", role=role, user_id=user_id),
            n["run_id"],
        )
    )
    prefs = destinations.preferences(conn, tenant_id, user_id)
    consent = (prefs["consent"] if prefs else None) or {}
    found = _destination(conn, row, user_id)
    exists = found is not None
    ctx = DispatchContext(
        channel=row["channel"],
        urgency=n["urgency"],
        notification_state=n["state"],
        expires_at=n["expires_at"],
        attention_type=n["attention_type"],
        transition_version=n["transition_version"],
        run_state=None if run is None else run.state,
        run_version=None if run is None else run.version,
        is_member=role is not None,
        can_see_run=can_see,
        destination_exists=exists,
        consented_urgencies=consented_urgencies(consent, row["channel"]),
        quiet_windows=tuple(
            QuietWindow.parse(w) for w in ((prefs["quiet_hours"] if prefs else None) or [])
        ),
        timezone=(prefs["timezone"] if prefs else None) or "UTC",
        quiet_bypass=policy_for(core, conn, tenant_id).quiet_bypass,
    )
    decided = gate(ctx, now)
    prepared = Prepared(
        decided,
        attention_type=n["attention_type"],
        expires_at=n["expires_at"],
        created_at=n["created_at"],
    )
    if decided.action != "send":
        return prepared
    actions: tuple[tuple[str, str], ...] = ()
    token = None
    if row["channel"] == push_actions.WEBPUSH and not digest:
        actions, token = push_actions.offer(core, conn, n, run, row)
    # Worded in the recipient's language (the row's texts are English): title, body,
    # the push's buttons, and the channel's own words (an email's) from ``locale``.
    locale = i18n.normalize(prefs["locale"] if prefs else None)
    with i18n.using(locale):
        title, body = neutral_words.push_title(n), neutral_words.push_body(n)
        actions = neutral_words.button_titles(actions)
    prepared.message = Outbound(
        delivery_id=row["id"],
        tenant_id=tenant_id,
        channel=row["channel"],
        destination=row["destination"],
        identity=row["id"],
        attempt_no=row["attempt_count"],
        now=now,
        urgency=n["urgency"],
        # A digest's summary is neutral too: how many, never which (flows.digests).
        title=title,
        body=body,
        deep_link=f"{core.public_url}/n/{n['id']}",
        notification_id=n["id"],
        run_id=n["run_id"],
        collapse_key=f"{tenant_id}:{n['run_id']}",
        expires_at=n["expires_at"],
        target={} if found is None else registry.spec(row["channel"]).target(found, core.box.open),
        actions=actions,
        action_token=token,
        replace_only=again and bool((row["payload"] or {}).get("replace_only")),
        locale=locale,
    )
    return prepared


def _prepare_retraction(core: Core, conn: Connection, row: Delivery, now: datetime) -> Prepared:
    """The neutral message that replaces a handled notification on a device that showed it
    (same collapse key: for web push the same Topic and ``tag``). Consent and quiet hours
    do not apply: it replaces what is on screen, silently, and says nothing but
    "handled"."""
    channel = row["channel"]
    found = destinations.find(conn, channel, row["tenant_id"], None, row["destination"])
    if found is None:
        return Prepared(Gate("cancel", "destination removed"))
    owner = dict(found).get("user_id")  # a shared room is nobody's; an address has none
    if (
        not isinstance(owner, str)
        or accounts.membership_role(conn, row["tenant_id"], owner) is None
    ):
        return Prepared(Gate("cancel", "recipient lost access"))
    note_id = (row["payload"] or {}).get("notification_id")
    prefs = destinations.preferences(conn, row["tenant_id"], owner)
    locale = i18n.normalize(prefs["locale"] if prefs else None)
    with i18n.using(locale):
        title, body = neutral_words.retracted()
    message = Outbound(
        delivery_id=row["id"],
        tenant_id=row["tenant_id"],
        channel=channel,
        destination=row["destination"],
        identity=row["id"],
        attempt_no=row["attempt_count"],
        now=now,
        urgency="normal",
        title=title,
        body=body,
        deep_link=f"{core.public_url}/n/{note_id}",
        notification_id=note_id,
        run_id=row["run_id"],
        collapse_key=f"{row['tenant_id']}:{row['run_id']}",
        event_type=RETRACTED,
        target=registry.spec(channel).target(found, core.box.open),
        locale=locale,
    )
    return Prepared(
        Gate("send", "replaces a handled notification"),
        message,
        attention_type="retraction",
        created_at=row["created_at"],
    )


def _prepare_sign_in(core: Core, row: Delivery, now: datetime) -> Prepared:
    """A person's sign-in links, to the member's address the request found (the row's
    destination): sent at once, whatever their consent or quiet hours; cancelled once the
    links have expired, and never retried past that."""
    expires_at = row["created_at"] + LINK_TTL
    if expires_at <= now:
        return Prepared(
            Gate("cancel", "the sign-in links have expired"),
            attention_type="sign_in",
            created_at=row["created_at"],
        )
    channel = row["channel"]
    locale = i18n.normalize((row["payload"] or {}).get("locale"))
    with i18n.using(locale):
        title = _("Sign in to Runbell")
    message = Outbound(
        delivery_id=row["id"],
        tenant_id=row["tenant_id"],
        channel=channel,
        destination=row["destination"],
        identity=row["id"],
        attempt_no=row["attempt_count"],
        now=now,
        urgency="normal",
        title=title,
        body="",
        deep_link=f"{core.public_url}/login",
        expires_at=expires_at,
        event_type=SIGN_IN,
        payload={"links": open_links(core, row)},
        target=registry.spec(channel).target({"address": row["destination"]}, core.box.open),
        locale=locale,
    )
    return Prepared(
        Gate("send", "a sign-in the person asked for"),
        message,
        attention_type="sign_in",
        expires_at=expires_at,
        created_at=row["created_at"],
    )


def _destination(conn: Connection, row: Delivery, user_id: str) -> Destination | None:
    """Where the person is reachable *now* (an address may have changed); None when the
    destination is gone."""
    return destinations.find(conn, row["channel"], row["tenant_id"], user_id, row["destination"])
