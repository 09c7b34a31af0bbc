"""Create a schedule: a standing instruction (version 1), its owner, the authority that
justifies the runs it starts, a cron cadence, and how runs start (issue 18 item 6).

Runbell starts nothing itself: a ``record_only`` schedule only records what the runtime
starts under it; a ``webhook`` schedule has the scheduler sweep fire a signed request at
the runtime's URL when an occurrence is due (``flows.schedule_firing``).

Invariants kept here (DESIGN §2):

- 14: a webhook schedule's URL passes the SSRF guard when it is created (and again before
  every send); its signing secret is sealed at rest and shown once, in the creating answer
  (and in a replay of that answer under the same Idempotency-Key).
- 9: the create runs at most once per Idempotency-Key (``flows.idempotency``).
- Bad input (a cadence that is not cron, a URL in record-only mode, an authority naming a
  non-member) is a 422 naming the field; nothing is written.
"""

from __future__ import annotations

from runbell.domain import schedules as rules
from runbell.domain.errors import ValidationFailed
from runbell.domain.principal import Principal
from runbell.flows import schedule_views as views
from runbell.flows.context import Core
from runbell.flows.idempotency import Act, Answer, IdempotencyKey, act_once
from runbell.flows.inputs import ScheduleBody
from runbell.flows.schedule_views import ScheduleView
from runbell.flows.sources import check_destination
from runbell.signatures import new_secret
from runbell.store import schedules as store
from runbell.store.db import Tx


def create_schedule(
    core: Core, who: Principal, body: ScheduleBody, key: IdempotencyKey | None = None
) -> Answer:
    """Create a schedule (201); a webhook schedule's answer carries its signing secret,
    once."""
    cadence = rules.check_cadence(body.get("cadence"))
    text = views.check_instruction(body.get("instruction"))
    mode = body.get("mode") or "record_only"
    if mode not in rules.MODES:
        raise ValidationFailed(f"mode must be one of {', '.join(rules.MODES)}", field="mode")
    url = body.get("url")
    if mode == "record_only" and url:
        raise ValidationFailed(
            "a record_only schedule fires nothing: url is for mode webhook", field="url"
        )
    if mode == "webhook" and not url:
        raise ValidationFailed("a webhook schedule needs the runtime's url", field="url")
    owner_ref = body.get("owner") or (who.user_id if who.is_user else None)
    if owner_ref is None:
        raise ValidationFailed("owner is required (a member's user id or email)", field="owner")

    def prepare() -> Act:
        if url:
            check_destination(core, url, "url")
        secret = new_secret() if mode == "webhook" else None

        def act(tx: Tx) -> tuple[int, ScheduleView]:
            owner_id = views.member(tx, who.tenant_id, owner_ref, "owner")
            views.check_manager(who, owner_id)
            authority = body.get("authority")
            views.check_authority(tx, who.tenant_id, rules.authority_users(authority))
            schedule_id = store.create(
                tx.conn,
                who.tenant_id,
                tx.now,
                name=body.get("name"),
                owner_user_id=owner_id,
                authority=authority,
                cadence=cadence,
                mode=mode,
                url=url,
                sealed_secret=core.box.seal(secret) if secret else None,
                next_fire_at=rules.next_after(cadence, tx.now) if mode == "webhook" else None,
            )
            store.add_instruction(tx.conn, who.tenant_id, schedule_id, 1, text, who.actor(), tx.now)
            view = views.schedule_view(tx.conn, store.require(tx.conn, who.tenant_id, schedule_id))
            if secret:
                view["secret"] = secret
            return 201, view

        return act

    return act_once(core.db, core.box, key, prepare)
