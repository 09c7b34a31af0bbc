"""Scheduled digests (issue 19 item 5): a digest sent at 09:00 in the recipient's timezone,
right on both sides of the Europe/Berlin DST change, and still deferred by quiet hours.
The test clock (runbell.testing.Clock) drives the attention flow, the digest sweep and the
delivery worker. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from runbell.flows import digests as digest_flow
from runbell.store import tables as t
from tests.conftest import Env
from tests.peers import SmtpPeer

ALL = ["low", "normal", "time_sensitive", "urgent"]
RULE = {
    "id": "acme.morning_digest",
    "when": {"attention": "completed"},
    "decision": "digest",
    "urgency": "normal",
    "digest_key": "morning",
    "digest_at": "09:00",
}
# Europe/Berlin: CET (UTC+1) until Sunday 29 March 2026, 02:00; CEST (UTC+2) after.
SATURDAY_9 = datetime(2026, 3, 28, 8, 0, tzinfo=UTC)  # 09:00 CET
SUNDAY_9 = datetime(2026, 3, 29, 7, 0, tzinfo=UTC)  # 09:00 CEST
MONDAY_9 = datetime(2026, 3, 30, 7, 0, tzinfo=UTC)


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def set_up(env: Env, rule: dict[str, Any] | None = None, **prefs: Any) -> None:
    ok(env.client.put("/v1/policy", json={"rules": [rule or RULE]}, headers=env.admin))
    body = {"timezone": "Europe/Berlin", **prefs}
    ok(env.client.put("/v1/me/preferences", json=body, headers=env.owner))


def finish(env: Env, run_id: str) -> dict[str, Any]:
    body = {"owner": env.creds.owner_email, "state": "working"}
    ok(env.client.put(f"/v1/runs/{run_id}", json=body, headers=env.runtime), 201)
    answer = ok(
        env.client.post(
            f"/v1/runs/{run_id}/signals",
            json={"event_id": f"{run_id}-end", "state": "completed"},
            headers=env.runtime,
        )
    )
    (note,) = answer["notifications"]
    assert note["decision"] == "digest"
    return dict(note)


def closes_at(env: Env, run_id: str) -> datetime:
    with env.core.db.read() as conn:
        found = conn.execute(
            sa.select(t.digest_items.c.closes_at).where(t.digest_items.c.run_id == run_id)
        ).scalar_one()
    assert isinstance(found, datetime)
    return found


def test_a_digest_at_local_nine_across_the_dst_change(make_env: Callable[..., Env]) -> None:
    env = make_env()
    set_up(env)
    # Friday evening: the next 09:00 Berlin is Saturday 08:00 UTC (winter time).
    env.clock.freeze(datetime(2026, 3, 27, 19, 0, tzinfo=UTC))
    finish(env, "friday")
    assert closes_at(env, "friday") == SATURDAY_9
    assert digest_flow.flush_due(env.core, SATURDAY_9 - timedelta(seconds=1)) == 0
    assert digest_flow.flush_due(env.core, SATURDAY_9) == 1

    # Saturday evening, the night of the change: 09:00 Sunday is 07:00 UTC (summer time).
    env.clock.freeze(datetime(2026, 3, 28, 19, 0, tzinfo=UTC))
    finish(env, "saturday")
    assert closes_at(env, "saturday") == SUNDAY_9
    assert digest_flow.flush_due(env.core, SUNDAY_9 - timedelta(seconds=1)) == 0
    assert digest_flow.flush_due(env.core, SUNDAY_9) == 1

    # The day after: 09:00 Monday is 07:00 UTC, like Sunday (both summer time).
    env.clock.freeze(datetime(2026, 3, 29, 12, 0, tzinfo=UTC))
    finish(env, "sunday")
    assert closes_at(env, "sunday") == MONDAY_9
    assert digest_flow.flush_due(env.core, MONDAY_9) == 1

    with env.core.db.read() as conn:
        sent = conn.execute(
            sa.select(t.digests.c.window_start, t.digests.c.window_end).order_by(
                t.digests.c.window_end
            )
        ).all()
    # Each digest covers the local day from one 09:00 to the next: 23 hours over the change.
    assert [(end - start) for start, end in sent] == [
        timedelta(hours=24),
        timedelta(hours=23),
        timedelta(hours=24),
    ]
    assert [end for _, end in sent] == [SATURDAY_9, SUNDAY_9, MONDAY_9]


def test_quiet_hours_keep_deferring_a_scheduled_digest(make_env: Callable[..., Env]) -> None:
    with SmtpPeer() as smtp:
        env = make_env(smtp_host="127.0.0.1", smtp_port=smtp.port)
        set_up(
            env,
            consent={"email": ALL},
            quiet_hours=[{"start": "22:00", "end": "09:30"}],
        )
        env.clock.freeze(datetime(2026, 3, 28, 19, 0, tzinfo=UTC))
        finish(env, "saturday")
        with env.dispatcher() as d:
            env.clock.freeze(SUNDAY_9)
            assert digest_flow.flush_due(env.core, SUNDAY_9) == 1
            assert d.tick() == 1
            inbox = ok(env.client.get("/v1/notifications", headers=env.owner))["notifications"]
            (digest,) = [n for n in inbox if n["attention_type"] == "digest"]
            trail = ok(env.client.get(f"/v1/notifications/{digest['id']}/trail", headers=env.admin))
            (mail,) = [x for x in trail["deliveries"] if x["channel"] == "email"]
            # Sent at 09:00 local, the quiet hours end at 09:30 local (07:30 UTC): it waits.
            assert mail["status"] == "deferred"
            assert datetime.fromisoformat(mail["next_attempt_at"]) == SUNDAY_9 + timedelta(
                minutes=30
            )
            assert smtp.attempts == 0
            env.clock.freeze(SUNDAY_9 + timedelta(minutes=30))
            assert d.tick() == 1
        assert len(smtp.raw) == 1


def test_a_schedule_is_validated(make_env: Callable[..., Env]) -> None:
    env = make_env()
    for bad, field in (
        ({"digest_at": "9am"}, "digest_at"),
        ({"digest_at": "24:00"}, "digest_at"),
        ({"digest_at": "09:00", "digest_days": [7]}, "digest_days"),
        ({"digest_at": "09:00", "digest_window_s": 600}, "digest_at"),
        ({"digest_at": None, "digest_days": [1]}, "digest_days"),
    ):
        r = env.client.put("/v1/policy", json={"rules": [{**RULE, **bad}]}, headers=env.admin)
        assert r.status_code == 422, (bad, r.text)
        assert field in r.text
    ok(
        env.client.put(
            "/v1/policy", json={"rules": [{**RULE, "digest_days": [0, 4]}]}, headers=env.admin
        )
    )
    effective = ok(env.client.get("/v1/policy", headers=env.admin))["effective"][0]
    assert effective["digest_schedule"] == {"at": "09:00", "days": [0, 4]}
