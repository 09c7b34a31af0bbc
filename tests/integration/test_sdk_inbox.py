"""The SDK's group acknowledge (``acknowledge_group``, ``POST /v1/inbox/acknowledge``,
issue 19 item 7), on the sync and the async client against a live server on SQLite and
PostgreSQL: a subject's notifications at once, none newer than ``up_to``, a run's, a
filter's, named ids (what is not yours is left alone), a retry that acknowledges nothing
twice; exactly one group or a ValueError before any request; API keys refused."""

from __future__ import annotations

import pytest

from runbell.client import Client, Forbidden, GroupAcknowledged
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.conftest import LiveServer
from tests.sdk import Connect
from tests.timeouts import WAIT


def finished(rb: Client, run_id: str, subject: str | None, state: str = "completed") -> str:
    """A run of ``subject`` that ends in ``state``; the id of the owner's notification."""
    kind, _, ident = (subject or "").partition(":")
    rb.put_run(
        run_id,
        title=run_id,
        state="working",
        notify_on_complete=True,
        subject={"type": kind, "id": ident} if subject else None,
    )
    reason = "broke" if state == "failed" else None
    result = rb.signal(run_id, state, event_id=f"{run_id}-{state}", reason=reason)
    (note,) = result.notifications
    return str(note["id"])


def test_acknowledge_a_group_through_the_sdk(
    live: LiveServer, core: Core, creds: TenantCreds, sdk: Connect
) -> None:
    with (
        sdk(live.url, creds.runtime_key, creds.owner_email, timeout=WAIT) as rb,
        sdk(live.url, creds.owner_token, timeout=WAIT) as me,
    ):
        alpha = [finished(rb, f"alpha-{i}", "agent:alpha") for i in range(3)]
        beta = [finished(rb, f"beta-{i}", "agent:beta") for i in range(2)]

        # A subject's, as "type:id"; again acknowledges nothing more.
        done = me.acknowledge_group(subject="agent:alpha")
        assert isinstance(done, GroupAcknowledged)
        assert (done.acknowledged, done.folded, done.more) == (3, 0, False)
        assert sorted(done.ids) == sorted(alpha)
        assert me.acknowledge_group(subject={"type": "agent", "id": "alpha"}).acknowledged == 0

        # A run's; and up_to leaves what arrived after the newest the person saw.
        assert me.acknowledge_group(run_id="beta-0").ids == [beta[0]]
        late = finished(rb, "beta-late", "agent:beta")
        assert me.acknowledge_group(subject="agent:beta", up_to=beta[1]).ids == [beta[1]]

        # Within a filter; then named ids, with one closed and one not the person's.
        fail = finished(rb, "gamma-fail", "project:p", "failed")
        ok = finished(rb, "gamma-ok", "project:p")
        assert me.acknowledge_group(subject="project:p", filter="failures").ids == [fail]
        named = me.acknowledge_group(notification_ids=[ok, fail, "ntf_nope"])
        assert (named.acknowledged, named.already_closed, named.not_found) == (1, 1, 1)
        assert named.ids == [ok]
        assert named.raw["ids"] == [ok]

        left = me.acknowledge_group(notification_ids=[late])
        assert left.ids == [late]

        # Exactly one group, checked before anything is sent; API keys may not.
        with pytest.raises(ValueError, match="exactly one"):
            me.acknowledge_group()
        with pytest.raises(ValueError, match="exactly one"):
            me.acknowledge_group(run_id="beta-0", subject="agent:beta")
        with pytest.raises(ValueError, match="type:id"):
            me.acknowledge_group(subject="alpha")
        with pytest.raises(Forbidden):
            rb.acknowledge_group(run_id="beta-0")
