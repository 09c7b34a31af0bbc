"""The run page in headless Chromium: it follows the run live, puts the pending decision on
the first screen, and says what a finished run's progress was (or nothing).

Live: the page follows /v1/events/stream and, when its run moves on, fetches itself again
and swaps in the state, decision, outcome, facts, timeline and notifications, with a
neutral "Updated" notice. The red box is for a refused answer only
(test_web_flows.py::test_stale_page_gets_the_explanation_not_an_execution). A form the
person may have used is never cleared.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import PHONE, BrowserServer, NewContext, Runtime, sign_in, user_client

pytestmark = pytest.mark.browser

DESKTOP_800 = {"width": 1280, "height": 800}
NO_ERROR_BOX = ".notice.problem, [role=alert]"


def note_for(opened: dict[str, Any]) -> str:
    (note,) = [n for n in opened["notifications"] if n["attention_type"] == "input_required"]
    return str(note["id"])


def same_document(page: Page) -> None:
    """Mark the document, so a test can tell that the page updated without a reload."""
    page.evaluate("window.__sameDocument = true")


def still_same_document(page: Page) -> None:
    assert page.evaluate("window.__sameDocument === true"), "the page reloaded on its own"


# --- item: the happy path looks like the happy path -------------------------------------


def test_a_page_left_open_follows_the_run_to_completed(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id, request_id = "live-1", "approve-live-1"
    runtime.create_run(run_id)
    runtime.progress(run_id, "running tests", done=2, total=5, unit="test files")
    version = runtime.open_request(run_id, request_id)["run"]["version"]

    # Two pages on the run: the one that approves, and a second one (a phone) left open.
    desk = new_context().new_page()
    sign_in(desk, core, creds.tenant_id, creds.owner_id)
    phone = new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
    sign_in(phone, core, creds.tenant_id, creds.owner_id)
    phone.goto(f"/runs/{run_id}")
    expect(phone.locator("#approve")).to_be_enabled()
    same_document(phone)

    desk.goto(f"/runs/{run_id}")
    desk.locator("#approve").click()
    expect(desk.locator("#answer-recorded")).to_contain_text("approved")
    expect(desk.locator("#run-state")).to_have_text("Working")
    same_document(desk)

    # The phone hears the answer: the request is gone from its decision (nothing was typed
    # in it), its pill says Working, and it says so without alarm.
    changed = phone.locator("#run-changed")
    expect(changed).to_contain_text("This request was answered, here or on another device.")
    expect(changed).to_contain_text(f"Updated: the run is now working (version {version + 1}).")
    expect(phone.locator("#run-state")).to_have_text("Working")
    expect(phone.locator("#respond-form")).to_have_count(0)
    expect(phone.locator("#no-decision")).to_have_text("Nothing to decide: the run is working.")

    # The runtime finishes the run: both pages follow, pill, timeline, outcome and all.
    runtime.signal(
        run_id,
        "live-1-done",
        "completed",
        reason="deployed to staging",
        report={"summary": "v2 is live on staging"},
    )
    for page in (desk, phone):
        expect(page.locator("#run-state")).to_have_text("Completed")
        expect(page.locator("#run-state")).to_have_class(re.compile(r"\bstate-completed\b"))
        expect(page.locator("#run-version")).to_have_text(str(version + 2))
        newest = page.locator("#timeline li").first
        expect(newest).to_contain_text(f"version {version + 2}: Working → Completed")
        expect(newest).to_contain_text("deployed to staging")
        expect(page.locator("#timeline li")).to_have_count(version + 2)
        expect(page.locator("#outcome")).to_contain_text("v2 is live on staging")
        expect(page.locator("#no-decision")).to_have_text(
            "Nothing to decide: the run is completed."
        )
        expect(page.locator("#run-progress")).to_have_count(0)  # finished: no progress note
        notice = page.locator("#run-changed")
        expect(notice).to_have_text(f"Updated: the run is now completed (version {version + 2}).")
        expect(notice).to_have_attribute("role", "status")
        expect(notice).not_to_have_class(re.compile(r"\bproblem\b"))
        # Nothing on the page is styled as an error or announced as one.
        expect(page.locator(NO_ERROR_BOX)).to_have_count(0)
        # The notification about the finish showed up in the list too (owner present:
        # "live" + inbox), and the answered request's notification is resolved.
        expect(page.locator("#notes")).to_contain_text("Resolved")
        still_same_document(page)
    expect(desk.locator("#answer-recorded")).to_contain_text("approved")  # kept


def test_a_form_in_use_is_closed_not_cleared(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "live-2"
    runtime.create_run(run_id)
    opened = runtime.open_request(
        run_id, "text-live-2", kind="text", summary="Which branch should I deploy?"
    )
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    page.locator("#answer-text").fill("release/2.4, after the tests pass")
    same_document(page)

    # Answered on another device while this one was typing.
    with user_client(web.url, creds.owner_token) as owner:
        r = owner.post(
            "/v1/input-requests/text-live-2/responses",
            json={
                "decision": "answer",
                "value": "main",
                "expected_run_version": opened["run"]["version"],
                "expected_request_version": opened["input_request"]["version"],
            },
            headers={"Idempotency-Key": "other-device-1"},
        )
        assert r.status_code == 200, r.text

    notice = page.locator("#run-changed")
    expect(notice).to_contain_text("This request was answered, here or on another device.")
    expect(notice).to_contain_text("what you entered is still in it, and nothing was sent")
    expect(page.locator("#run-state")).to_have_text("Working")
    expect(page.locator("#answer-text")).to_have_value("release/2.4, after the tests pass")
    expect(page.locator("#answer-text")).not_to_be_editable()
    expect(page.locator("#submit-answer")).to_be_disabled()
    expect(page.locator(NO_ERROR_BOX)).to_have_count(0)
    still_same_document(page)


def test_a_run_that_changes_under_an_open_form_closes_it_until_reload(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    """The request is still open, but what it asks about changed: the page shows the new
    objective, and the form (bound to the old version) waits for a deliberate reload."""
    run_id = "live-3"
    runtime.create_run(run_id)
    version = runtime.open_request(run_id, "approve-live-3")["run"]["version"]
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    same_document(page)

    runtime.update_run(run_id, objective="Ship the fix and also upgrade the payment SDK")
    expect(page.locator("#run-facts")).to_contain_text("also upgrade the payment SDK")
    expect(page.locator("#run-version")).to_have_text(str(version + 1))
    notice = page.locator("#run-changed")
    # What changed is its details, not its state: the notice says so (issue 16 row 18).
    expect(notice).to_contain_text(
        "Updated: its details were updated; the run is still waiting for input "
        f"(version {version + 1})."
    )
    expect(notice).to_contain_text("reload the page to answer")
    expect(page.locator("#approve")).to_be_disabled()
    expect(page.locator("#respond-form")).to_have_attribute("aria-disabled", "true")
    expect(page.locator('input[name="expected_run_version"]')).to_have_value(str(version))
    expect(page.locator(NO_ERROR_BOX)).to_have_count(0)
    still_same_document(page)

    page.reload()
    expect(page.locator("#approve")).to_be_enabled()
    expect(page.locator('input[name="expected_run_version"]')).to_have_value(str(version + 1))


def test_a_new_request_appears_on_an_open_page(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "live-4"
    runtime.create_run(run_id)
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#no-decision")).to_be_visible()
    same_document(page)

    runtime.open_request(run_id, "approve-live-4", summary="Merge the dependency bump?")
    expect(page.locator("#run-state")).to_have_text("Waiting for input")
    expect(page.locator("#decision")).to_contain_text("Merge the dependency bump?")
    expect(page.locator("#approve")).to_be_enabled()
    expect(page.locator("#run-changed")).to_contain_text(
        "Updated: the run is now waiting for input"
    )
    still_same_document(page)
    # The form that appeared is bound to the run as it is now: approving it works.
    page.locator("#approve").click()
    expect(page.locator("#answer-recorded")).to_contain_text("approved")


# --- item: the decision comes first ---------------------------------------------------------


LONG_DETAILS = {
    "command": "kubectl rollout restart deploy/checkout",
    "diff": "\n".join(f"line {i}: change the retry budget of worker {i}" for i in range(80)),
}


@pytest.mark.parametrize(
    "viewport",
    [
        pytest.param(DESKTOP_800, id="1280x800"),
        pytest.param(PHONE, id="390x844"),
    ],
)
def test_the_pending_decision_is_on_the_first_screen(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    viewport: dict[str, int],
) -> None:
    run_id = "first-screen"
    runtime.create_run(
        run_id,
        title="Roll out the checkout retry fix to every region, one region at a time",
        objective="Restart the checkout deployment with the new retry budget. " * 6,
        details={"plan": LONG_DETAILS["diff"]},
    )
    runtime.progress(run_id, "waiting for the canary", done=1, total=6, unit="regions")
    opened = runtime.open_request(
        run_id,
        "approve-first-screen",
        summary="Restart the checkout deployment in eu-west-1?",
        details=LONG_DETAILS,
        expires_at="2099-01-01T00:00:00Z",
    )
    options = {"viewport": viewport}
    if viewport == PHONE:
        options.update(is_mobile=True, has_touch=True, device_scale_factor=2)
    page = new_context(**options).new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)

    # From the notification (the usual way in: with the "opened from" box) and directly.
    for path in (f"/n/{note_for(opened)}", f"/runs/{run_id}"):
        page.goto(path)
        assert page.evaluate("window.scrollY") == 0
        height = viewport["height"]
        for what in ("#decision .request-summary", "#expiry-countdown", "#approve", "#reject"):
            box = page.locator(what).bounding_box()
            assert box is not None, what
            assert box["y"] >= 0 and box["y"] + box["height"] <= height, (path, what, box)
        # Details and history follow the decision.
        decision = page.locator("#decision").bounding_box()
        for later in ("#run-facts", "#run-details", "#timeline", "#notes"):
            box = page.locator(later).bounding_box()
            assert decision and box and box["y"] > decision["y"], (path, later)
        # The long details are all there, scrollable inside their box.
        expect(page.locator("#request-details")).to_contain_text("line 79:")
        scrolls = page.locator("#request-details").evaluate(
            "el => el.scrollHeight > el.clientHeight && getComputedStyle(el).overflowY"
        )
        assert scrolls == "auto"


def test_a_choice_fits_on_a_phone_screen(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "first-screen-choice"
    runtime.create_run(run_id)
    runtime.open_request(
        run_id,
        "choose-window",
        kind="choice",
        summary="When should the database migration run?",
        options=[
            {"id": "now", "label": "Now"},
            {"id": "night", "label": "Tonight at 02:00"},
            {"id": "weekend", "label": "Saturday morning"},
        ],
        details={"tables": ["orders", "payments"], "estimated_minutes": 12},
    )
    page = new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")
    for what in ("#option-3", "#submit-answer"):
        box = page.locator(what).bounding_box()
        assert box is not None and box["y"] + box["height"] <= PHONE["height"], (what, box)


# --- item: a finished run's progress -------------------------------------------------------


def test_progress_note_has_its_time_and_goes_when_the_run_finishes(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    run_id = "progress-1"
    runtime.create_run(run_id)
    runtime.progress(run_id, "building")
    runtime.progress(run_id, "running tests", done=2, total=5, unit="test files")
    page = new_context().new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto(f"/runs/{run_id}")

    facts = page.locator("#run-facts")
    expect(facts).to_contain_text("Last progress note")
    note = page.locator("#run-progress")
    expect(note).to_contain_text("running tests (2 of 5 test files)")
    with user_client(web.url, creds.owner_token) as owner:
        at = owner.get(f"/v1/runs/{run_id}").json()["progress"]["at"]
    expect(note.locator("time")).to_have_attribute("datetime", at)
    expect(note.locator("time")).to_have_text(re.compile(r"^\d{1,2} \w{3} \d{4}, \d{2}:\d{2} UTC$"))

    # A newer note replaces it live; once the run has finished there is none.
    runtime.progress(run_id, "deploying", done=5, total=5, unit="test files")
    expect(note).to_contain_text("deploying (5 of 5 test files)")
    runtime.signal(run_id, "progress-1-failed", "failed", reason="deploy step crashed")
    expect(page.locator("#run-state")).to_have_text("Failed")
    expect(page.locator("#run-progress")).to_have_count(0)
    expect(facts).not_to_contain_text("progress")
    page.reload()
    expect(page.locator("#run-state")).to_have_text("Failed")
    expect(page.locator("#run-facts")).not_to_contain_text("progress")
