"""Issue 16 row 1: every value the API accepts fits where it is stored (PostgreSQL enforces
``varchar(n)``, SQLite does not), composites such as ``notifications.subject_version``
included. The widths come from one place, :mod:`runbell.domain.limits`."""

from __future__ import annotations

from fastapi.testclient import TestClient

from runbell.testing import TenantCreds
from tests.conftest import bearer


def test_widest_subject_still_notifies(client: TestClient, creds: TenantCreds) -> None:
    """Row 1: subject type 100 + id 200 characters is accepted, and every later signal and
    input request still answers (it was a 500 forever on PostgreSQL: varchar(200))."""
    key = bearer(creds.runtime_key)
    subject = {"type": "t" * 100, "id": "i" * 200, "version": "v1"}
    r = client.put(
        "/v1/runs/wide-subject",
        json={"owner": creds.owner_email, "state": "working", "subject": subject},
        headers=key,
    )
    assert r.status_code == 201, r.text
    r = client.post(
        "/v1/runs/wide-subject/input-requests",
        json={"input_request_id": "ask-1", "kind": "approval", "summary": "Deploy?"},
        headers=key,
    )
    assert r.status_code in (200, 201), r.text
    r = client.post(
        "/v1/runs/wide-subject/signals",
        json={"event_id": "e-fail", "state": "failed"},
        headers=key,
    )
    assert r.status_code == 200, r.text
    assert r.json()["notifications"], r.json()
