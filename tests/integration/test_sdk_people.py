"""The SDK's people features (issue 18 item 4), on the sync and the async client against
a live server on SQLite and PostgreSQL: an admin grants a subject, lists and revokes the
grants; a runtime names a request's ``approvers``; the approver named answers it through
the SDK; a viewer's answer is the SDK's ``Forbidden`` carrying the server's detail."""

from __future__ import annotations

import pytest

from runbell.client import Forbidden, NotFound, ValidationFailed
from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.conftest import LiveServer
from tests.sdk import Connect
from tests.timeouts import WAIT


def test_grants_and_named_approvers_through_the_sdk(
    live: LiveServer, core: Core, creds: TenantCreds, sdk: Connect
) -> None:
    luis_id, luis_token = add_user(core, creds.tenant_id, "luis@acme.test")
    ana_id, ana_token = add_user(core, creds.tenant_id, "ana@acme.test")
    with (
        sdk(live.url, creds.admin_key, timeout=WAIT) as admin,
        sdk(live.url, creds.runtime_key, creds.owner_email, timeout=WAIT) as rb,
        sdk(live.url, luis_token, timeout=WAIT) as luis,
        sdk(live.url, ana_token, timeout=WAIT) as ana,
    ):
        rb.put_run("dates", state="working", subject={"type": "project", "id": "launch"})

        viewer = admin.grant_subject("luis@acme.test", "project:launch", "viewer")
        assert (viewer.role, viewer.subject, viewer.runs, viewer.created) == (
            "viewer",
            {"type": "project", "id": "launch"},
            1,
            True,
        )
        assert viewer.id.startswith("sgr_") and viewer.user["id"] == luis_id
        again = admin.grant_subject(luis_id, {"type": "project", "id": "launch"}, "viewer")
        assert (again.id, again.created) == (viewer.id, False)
        approver = admin.grant_subject("ana@acme.test", "project:launch", "approver")
        assert [g.id for g in admin.subject_grants()] == [viewer.id, approver.id]
        assert [g.id for g in admin.subject_grants(user="ana@acme.test")] == [approver.id]

        # Only an admin grants: a member's token gets the SDK's Forbidden.
        with pytest.raises(Forbidden):
            luis.grant_subject("ana@acme.test", "project:launch", "amender")
        with pytest.raises(ValidationFailed) as bad:
            admin.grant_subject("nobody@acme.test", "project:launch", "viewer")
        assert bad.value.field == "user"

        # The runtime names Ana; the request says so; Luis sees it but may not answer.
        opened = rb.open_input_request(
            "dates",
            summary="Move the launch tasks to Friday?",
            request_id="move",
            approvers=["ana@acme.test"],
        )
        assert opened.input_request.approvers == [ana_id]
        assert luis.get_run("dates").state == "input_required"
        with pytest.raises(Forbidden) as refused:
            luis.respond("move", "approve")
        assert refused.value.status == 403
        assert "not answer" in (refused.value.detail or "")
        answered = ana.respond("move", "approve")
        assert (answered.state, answered.decision) == ("answered", "approve")
        assert rb.get_input_request("move").answered_by is not None

        # Revoked: Luis no longer sees the run at all (404, not 403).
        gone = admin.revoke_subject_grant(viewer.id)
        assert gone.id == viewer.id
        assert [g.id for g in admin.subject_grants()] == [approver.id]
        with pytest.raises(NotFound):
            luis.get_run("dates")
        with pytest.raises(NotFound):
            admin.revoke_subject_grant(viewer.id)
