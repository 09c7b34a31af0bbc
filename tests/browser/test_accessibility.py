"""axe-core on every page of the web app, in both themes (issue 16 item 11): 0 violations
of any impact. Each theme at one size, so that every page is also seen at both sizes: light
at desktop size, dark at phone size (the four combinations cost the suite twice the time
and found nothing the two did not; colour contrast follows the theme, reflow the size).

The pages: sign-in (plain, from a deep link), an expired sign-in link, a wrong address,
the inbox (needs you, for your information, earlier; grouped by agent with a filter), the
runs overview, settings (with the attention policy), the people page (with a grant), the
schedules list and a paused schedule, a run page in each state (working with progress and
delegated tokens, waiting for an approval, waiting for an approval of a risky shell
command, waiting for a choice, finished under review, finished after a settled lookup,
failed, cancelled, a pending proposed change), a stale deep link, a digest, the "no
access" page, the demo mailbox, and the API reference (/docs, /redoc) whole: the Swagger
UI and ReDoc bundles inside it are checked like our own markup (their colours are put
right by apidocs.css and ReDoc's theme, their markup by the fix-up in apidocs.js).

The theme is the browser's (app.css follows ``prefers-color-scheme``); Playwright emulates
it per context. axe-core is the ``axe.min.js`` of the ``axe-playwright-python`` dev
dependency, injected from disk: nothing leaves the machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from playwright.sync_api import Browser

from runbell import demo
from runbell.flows import digests
from runbell.flows.context import Core
from runbell.testing import TenantCreds, add_user
from tests.browser.conftest import (
    DESKTOP,
    PHONE,
    ROOT,
    BrowserServer,
    Runtime,
    axe_violations,
    login_link,
    user_client,
)
from tests.conftest import bearer
from tests.timeouts import WAIT_MS

pytestmark = pytest.mark.browser

SIZES = {"phone": PHONE, "desktop": {"width": 1280, "height": 800}}
THEMES = ("light", "dark")
#: Each theme at one size; together they cover both themes and both sizes.
COMBINATIONS = (("light", "desktop"), ("dark", "phone"))
assert DESKTOP["width"] == 1280


@pytest.fixture
def demo_state(core: Core) -> Iterator[demo.DemoState]:
    state = demo.DemoState()
    core.settings.smtp_host, core.settings.smtp_port = demo.start_mail_sink(state)
    yield state
    state.smtp.stop()


@pytest.fixture
def web(core: Core, port: int, demo_state: demo.DemoState) -> Iterator[BrowserServer]:
    with BrowserServer(core, port, routers=[demo.sink_router(core, demo_state)]) as server:
        yield server


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200, 201, 202)), response.text
    return response.json()


def answer(me: Any, request_id: str, decision: str = "approve") -> None:
    req = ok(me.get(f"/v1/input-requests/{request_id}"))["input_request"]
    ok(
        me.post(
            f"/v1/input-requests/{request_id}/responses",
            headers={"Idempotency-Key": f"a11y-{request_id}"},
            json={
                "decision": decision,
                "expected_run_version": req["run_version"],
                "expected_request_version": req["version"],
            },
        )
    )


def ledger(runtime: Runtime, run_id: str, settle: bool) -> None:
    ops = [
        {"operation_id": f"{run_id}-{i}", "target": {"type": "invoice", "id": f"{run_id}-INV-{i}"}}
        for i in range(1, 4)
    ]
    ok(
        runtime.http.post(
            f"/v1/runs/{run_id}/operations",
            json={"operations": [{**o, "intent": "mark paid"} for o in ops]},
        )
    )

    def move(i: int, state: str, **evidence: str) -> None:
        ok(
            runtime.http.patch(
                f"/v1/runs/{run_id}/operations/{run_id}-{i}",
                json={"state": state, "evidence": evidence or None},
            )
        )

    for i in (1, 2, 3):
        move(i, "sent")
    move(1, "confirmed", receipt_id="rcpt-1")
    move(2, "conflict" if not settle else "confirmed", status="409 version mismatch")
    move(3, "uncertain", error="no reply within 30 s", checked_by="worker-a")
    runtime.signal(run_id, f"{run_id}-done", "completed")
    if settle:
        move(3, "confirmed", lookup="GET /invoices/INV-3: paid", checked_by="reconciler")


def scenario(
    core: Core, creds: TenantCreds, web: BrowserServer, runtime: Runtime
) -> dict[str, str]:
    """Every state a page can be in; returns {page name: path} for a signed-in person."""
    me = user_client(web.url, creds.owner_token)
    admin = user_client(web.url, creds.admin_key)
    try:
        runtime.create_run("a11y-working", title="Refactor the billing module")
        runtime.progress("a11y-working", "running tests", done=2, total=5, unit="test files")
        # Delegated tokens on the working run: one active, one revoked.
        for name in ("test helper", "linter"):
            made = ok(
                runtime.http.post(
                    "/v1/runs/a11y-working/delegations",
                    json={"capabilities": ["runs.read"], "expires_in": 3600, "name": name},
                )
            )
        ok(admin.delete(f"/v1/delegations/{made['id']}"))

        runtime.create_run("a11y-ask", title="Deploy the API to staging")
        expires = (core.db.clock() + timedelta(hours=1)).isoformat()
        runtime.open_request(
            "a11y-ask",
            "a11y-approve",
            summary="Deploy v2 to staging?",
            details={"command": "deploy --env staging", "risk": "rollback takes a minute"},
            expires_at=expires,
        )
        # A risky shell command (issue 19 item 1: the preview), editable before approving
        # (item 3: the command in a form), as the Claude Code hook opens it.
        runtime.create_run("a11y-action", title="Clean the build")
        runtime.open_request(
            "a11y-action",
            "a11y-shell",
            summary="Claude Code wants to use Bash",
            details={"tool_name": "Bash", "cwd": "/home/dev/shop"},
            action={"kind": "shell", "command": "rm -rf ./build", "cwd": "/home/dev/shop"},
            editable={
                "schema": {
                    "type": "object",
                    "properties": {"command": {"type": "string", "maxLength": 10000}},
                    "required": ["command"],
                },
                "value": {"command": "rm -rf ./build"},
            },
            expires_at=expires,
        )
        runtime.create_run("a11y-choice", title="Pick a release window")
        runtime.open_request(
            "a11y-choice",
            "a11y-window",
            kind="choice",
            summary="When should it ship?",
            options=[{"id": "now", "label": "Now"}, {"id": "tonight", "label": "Tonight"}],
        )
        runtime.create_run("a11y-review", title="Sync three invoices")
        ledger(runtime, "a11y-review", settle=False)
        runtime.create_run("a11y-settled", title="Sync three more invoices")
        ledger(runtime, "a11y-settled", settle=True)
        runtime.create_run("a11y-failed", title="Migrate the database")
        runtime.signal(
            "a11y-failed",
            "a11y-failed-1",
            "failed",
            reason="migration 12 failed",
            error={"message": "column exists", "user_action_required": True},
        )
        runtime.create_run("a11y-cancelled", title="Rebuild the search index")
        runtime.signal("a11y-cancelled", "a11y-cancelled-1", "cancelled", reason="not needed")

        # An answered request: Earlier in the inbox, and a deep link that is stale now.
        runtime.create_run("a11y-answered", title="Rotate the signing keys")
        opened = runtime.open_request("a11y-answered", "a11y-rotate", summary="Rotate now?")
        (stale,) = [n["id"] for n in opened["notifications"]]
        answer(me, "a11y-rotate")

        # A change proposed by another member, waiting for the owner.
        _, bob = add_user(core, creds.tenant_id, "bob@a11y.test")
        runtime.create_run(
            "a11y-amend", title="Write the release notes", authority={"users": ["bob@a11y.test"]}
        )
        bobs = user_client(web.url, bob)
        ok(
            bobs.post(
                "/v1/runs/a11y-amend/amendments",
                headers={"Idempotency-Key": "a11y-amend-1"},
                json={
                    "text": "Mention the new API limits",
                    "changes": {"objective": "Notes with limits"},
                },
            )
        )
        bobs.close()
        # The people page with a grant.
        ok(
            admin.post(
                "/v1/subject-grants",
                json={
                    "user": "bob@a11y.test",
                    "subject": {"type": "project", "id": "a11y"},
                    "role": "amender",
                },
            )
        )

        # A digest of two quiet completions.
        rule = {
            "id": "completed.digest_all",
            "when": {"attention": "completed"},
            "decision": "digest",
            "urgency": "low",
            "digest_window_s": 600,
            "digest_max_items": 50,
        }
        ok(admin.put("/v1/policy", json={"rules": [rule]}))
        for n in (1, 2):
            runtime.create_run(f"a11y-quiet-{n}", title=f"Nightly report {n}")
            runtime.signal(f"a11y-quiet-{n}", f"a11y-quiet-{n}-done", "completed")
        assert digests.flush_due(core, core.db.clock() + timedelta(seconds=1200)) == 1
        (digest,) = [
            n["id"]
            for n in ok(me.get("/v1/notifications"))["notifications"]
            if n["attention_type"] == "digest"
        ]
        ok(admin.put("/v1/policy", json={"rules": []}))

        # A schedule with two instruction versions and a run it started, paused.
        schedule = ok(
            me.post(
                "/v1/schedules",
                json={
                    "name": "Invoice reconciliation",
                    "instruction": "Reconcile yesterday's invoices against the ledger",
                    "cadence": "0 9 * * 1-5",
                    "authority": {"users": ["bob@a11y.test"]},
                },
            )
        )["id"]
        ok(me.patch(f"/v1/schedules/{schedule}", json={"instruction": "Reconcile and flag"}))
        runtime.create_run("a11y-scheduled", title="Invoices of Monday", schedule={"id": schedule})
        ok(me.post(f"/v1/schedules/{schedule}/pause", json={"reason": "quarter close"}))
    finally:
        me.close()
        admin.close()
    pages = {
        f"run {r}": f"/runs/a11y-{r}"
        for r in (
            "working",
            "ask",
            "action",
            "choice",
            "review",
            "settled",
            "failed",
            "cancelled",
            "amend",
        )
    }
    pages.update(
        {
            "inbox": "/",
            # Grouped by agent or project, the digest folded, one filter chosen.
            "inbox by agent": "/?group=agent&show=finished",
            "runs": "/runs",
            "settings": "/settings",
            "people": "/people",
            "schedules": "/schedules",
            "schedule": f"/schedules/{schedule}",
            "stale deep link": f"/n/{stale}",
            "digest": f"/n/{digest}",
            "no access": "/runs/nobody-has-this",
            "demo mailbox": "/demo/mailbox",
        }
    )
    return pages


SIGNED_OUT = {
    "sign-in": "/login",
    "sign-in from a link": "/login?next=/n/ntf_x",
    "expired sign-in link": "/auth/rbl_not-a-real-link",
    "wrong address": "/no-such-page",
    "API reference (Swagger UI)": "/docs",
    "API reference (ReDoc)": "/redoc",
}


def test_every_page_has_no_axe_violations_in_both_themes(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    browser: Browser,
) -> None:
    signed_in = scenario(core, creds, web, runtime)
    # The OpenAPI document is built on its first request: once, before any page waits.
    assert runtime.http.get("/openapi.json", timeout=WAIT_MS / 1000).status_code == 200
    found: dict[str, list[dict[str, Any]]] = {}
    checked = 0
    assert {t for t, _ in COMBINATIONS} == set(THEMES)
    assert {s for _, s in COMBINATIONS} == set(SIZES)
    for theme, size in COMBINATIONS:
        viewport = SIZES[size]
        ctx = browser.new_context(base_url=web.url, viewport=viewport, color_scheme=theme)
        ctx.set_default_timeout(WAIT_MS)
        ctx.set_default_navigation_timeout(WAIT_MS)
        try:
            page = ctx.new_page()
            for name, path in SIGNED_OUT.items():
                page.goto(path)
                if path == "/docs":
                    page.wait_for_selector("#swagger-ui .opblock")
                elif path == "/redoc":
                    page.wait_for_selector("#redoc [data-section-id*='/operation/']")
                found[f"{name} · {theme} · {size}"] = axe_violations(page)
                checked += 1
            page.goto(f"/auth/{login_link(core, creds.tenant_id, creds.owner_id)}")
            page.wait_for_selector("#sign-out")
            for name, path in signed_in.items():
                page.goto(path)
                page.wait_for_load_state("load")
                found[f"{name} · {theme} · {size}"] = axe_violations(page)
                checked += 1
        finally:
            ctx.close()
    report = ROOT / "test-artifacts" / "axe.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(found, indent=2))
    assert checked == len(COMBINATIONS) * (len(SIGNED_OUT) + len(signed_in))
    bad = {page: v for page, v in found.items() if v}
    assert not bad, json.dumps(bad, indent=2)


def test_every_page_in_german_has_no_axe_violations(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    browser: Browser,
) -> None:
    """The same pages in German (issue 19 item 6): before sign-in from the browser's
    language, after it from the person's preference. ``<html lang>`` names German, so
    screen readers read it with a German voice (axe's html-has-lang and valid-lang)."""
    signed_in = scenario(core, creds, web, runtime)
    r = runtime.http.put(
        "/v1/me/preferences", json={"locale": "de"}, headers=bearer(creds.owner_token)
    )
    assert r.status_code == 200, r.text
    found: dict[str, list[dict[str, Any]]] = {}
    ctx = browser.new_context(base_url=web.url, viewport=SIZES["desktop"], locale="de-DE")
    ctx.set_default_timeout(WAIT_MS)
    ctx.set_default_navigation_timeout(WAIT_MS)
    try:
        page = ctx.new_page()
        pages = {n: p for n, p in SIGNED_OUT.items() if not p.startswith(("/docs", "/redoc"))}
        for name, path in pages.items():
            page.goto(path)
            assert page.get_attribute("html", "lang") == "de", name
            found[name] = axe_violations(page)
        page.goto(f"/auth/{login_link(core, creds.tenant_id, creds.owner_id)}")
        page.wait_for_selector("#sign-out")
        for name, path in signed_in.items():
            page.goto(path)
            page.wait_for_load_state("load")
            assert page.get_attribute("html", "lang") == "de", name
            found[name] = axe_violations(page)
    finally:
        ctx.close()
    bad = {page: v for page, v in found.items() if v}
    assert not bad, json.dumps(bad, indent=2)
