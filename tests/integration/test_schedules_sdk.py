"""Schedules through the SDK (sync and async, against the live server on both databases):
a person makes one, a runtime starts runs under it, pausing refuses new runs, a new
instruction is a new version, and revoking flags the run that is still going."""

from __future__ import annotations

import pytest

from runbell.client import Conflict, Forbidden, RetryPolicy, ValidationFailed
from runbell.testing import TenantCreds
from tests.conftest import LiveServer
from tests.sdk import Connect
from tests.timeouts import WAIT

FAST = RetryPolicy(attempts=2, base_delay=0.05, max_delay=0.1)


def test_schedules_through_the_sdk(live: LiveServer, creds: TenantCreds, sdk: Connect) -> None:
    with (
        sdk(live.url, creds.owner_token, None, retry=FAST, timeout=WAIT) as person,
        sdk(live.url, creds.runtime_key, creds.owner_email, retry=FAST, timeout=WAIT) as runtime,
    ):
        with pytest.raises(ValidationFailed) as bad:
            person.create_schedule("Tidy the backlog", "every friday")
        assert bad.value.field == "cadence"
        with pytest.raises(Forbidden):
            runtime.create_schedule("Tidy the backlog", "0 16 * * 5", owner=creds.owner_email)

        made = person.create_schedule(
            "Tidy the backlog", "0 16 * * 5", authority={"users": [creds.owner_email]}
        )
        assert made.state == "active" and made.mode == "record_only"
        assert made.instruction_version == 1 and made.owner == creds.owner_id
        assert [s.id for s in runtime.schedules()] == [made.id]

        run = runtime.put_run("tidy-1", state="working", schedule=made.id)
        assert run.owner == creds.owner_id
        assert run.raw["schedule"]["instruction_version"] == 1

        assert person.pause_schedule(made.id, "holiday").state == "paused"
        with pytest.raises(Conflict):
            runtime.put_run("tidy-2", state="working", schedule=made.id)
        assert person.resume_schedule(made.id).state == "active"

        edited = person.edit_schedule(made.id, instruction="Tidy the backlog; close stale issues")
        assert edited.instruction_version == 2
        assert runtime.get_schedule(made.id).instruction.startswith("Tidy the backlog;")
        run2 = runtime.put_run("tidy-2", state="working", schedule=made.id)
        assert run2.raw["schedule"]["instruction_version"] == 2

        assert person.revoke_schedule(made.id).state == "revoked"
        flagged = runtime.get_run("tidy-1").raw["schedule"]
        assert flagged["authority_revoked"] is True
