"""An open run page follows a takeover and a supersede without a reload: the feed's
``run.owner_changed`` and ``operation.superseded`` (issue 18 items 2 and 3)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import BrowserServer, NewContext, Runtime, sign_in
from tests.conftest import bearer
from tests.timeouts import WAIT

pytestmark = pytest.mark.browser


def test_the_run_page_follows_a_takeover_and_a_supersede_live(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "owner-live-1"
    runtime.create_run(run_id, title="Move twelve tasks")
    claimed = runtime.http.post(f"/v1/runs/{run_id}/claim", json={"worker_id": "worker-a"})
    assert claimed.status_code == 200, claimed.text
    op = {"operation_id": "task-4", "target": {"type": "task", "id": "T-4"}, "intent": "move"}
    r = runtime.http.post(f"/v1/runs/{run_id}/operations", json={"operations": [op], "epoch": 1})
    assert r.status_code == 201, r.text
    r = runtime.http.patch(
        f"/v1/runs/{run_id}/operations/task-4", json={"state": "sent", "epoch": 1}
    )
    assert r.status_code == 200, r.text

    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    owner = page.locator("#completion-owner")
    expect(owner).to_contain_text("worker-a")
    expect(page.locator("#previous-owner")).to_have_count(0)
    page.evaluate("window.__sameDocument = true")

    _, helper = accounts.create_key(core, creds.tenant_id, "runtime", name="helper")
    with httpx.Client(base_url=web.url, headers=bearer(helper), timeout=WAIT) as other:
        taken = other.post(f"/v1/runs/{run_id}/claim", json={"worker_id": "worker-b"})
        assert taken.status_code == 200 and taken.json()["takeover"], taken.text
        expect(owner).to_contain_text("worker-b")
        expect(owner).to_contain_text("runtime key “helper”")  # named, not its id
        expect(page.locator("#previous-owner")).to_be_visible()

        why = "looked it up in the tracker: the old request never arrived"
        url = f"/v1/runs/{run_id}/operations/task-4/supersede"
        sup = other.post(url, json={"reason": why, "worker_id": "worker-b"})
        assert sup.status_code == 200 and sup.json()["changed"], sup.text
        expect(page.locator("#superseded-task-4")).to_contain_text(why)
    assert page.evaluate("window.__sameDocument === true")
