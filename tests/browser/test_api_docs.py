"""The API reference (/docs, /redoc) in headless Chromium on a machine with no way out:
every request that would leave 127.0.0.1 is aborted, and the reference must still render
every operation of the OpenAPI document (the bundles are served by Runbell itself)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import ConsoleMessage, Page, Route, expect

from tests.browser.conftest import BrowserServer, NewContext, axe_violations
from tests.timeouts import WAIT

pytestmark = pytest.mark.browser


class Offline:
    """Every request that would leave 127.0.0.1 is aborted and remembered; so are the
    page's console errors (a CSP refusal shows there, not as a request)."""

    def __init__(self, page: Page) -> None:
        self.left: list[str] = []
        self.errors: list[str] = []
        page.context.route("**/*", self._route)
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))

    def _route(self, route: Route) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.left.append(route.request.url)
            route.abort("internetdisconnected")

    def _console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)


def operations(spec: dict[str, Any]) -> set[str]:
    return {op["operationId"] for item in spec["paths"].values() for op in item.values()}


# --- the API reference ---------------------------------------------------------------------


def test_api_reference_renders_with_no_way_out(web: BrowserServer, new_context: NewContext) -> None:
    spec = httpx.get(f"{web.url}/openapi.json", trust_env=False, timeout=WAIT).json()
    expected = operations(spec)
    assert len(expected) > 30  # the whole API, so a half-rendered page cannot pass

    page = new_context().new_page()
    offline = Offline(page)

    # Swagger UI: every operation of the OpenAPI document, rendered from bundles served here.
    response = page.goto("/docs")
    assert response is not None and response.status == 200
    expect(page.locator(".opblock").first).to_be_visible()
    expect(page.locator(".opblock")).to_have_count(len(expected))
    shown = {
        str(i).split("-", 2)[2]
        for i in page.locator(".opblock").evaluate_all("els => els.map(e => e.id)")
    }
    assert shown == expected
    expect(page.locator("#operations-runs-put_run_v1_runs__run_id__put")).to_contain_text(
        "/v1/runs/{run_id}"
    )
    # An operation opens with its parameters and responses: the bundle really runs.
    page.locator("#operations-runs-put_run_v1_runs__run_id__put .opblock-summary").click()
    expect(page.locator("#operations-runs-put_run_v1_runs__run_id__put")).to_contain_text("run_id")
    assert offline.errors == []
    assert offline.left == []
    # No inline or outside script on the page (the bundle and its starter are ours).
    csp = response.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "frame-ancestors 'none'" in csp

    # ReDoc, the other view, the same way.
    page.goto("/redoc")
    sections = page.locator("[data-section-id*='/operation/']")
    expect(sections.first).to_be_attached()
    ids = {
        str(i).rsplit("/", 1)[1]
        for i in sections.evaluate_all("els => els.map(e => e.dataset.sectionId)")
    }
    assert ids == expected
    assert offline.left == []
    # ReDoc's footer always asks for its maker's logo from a CDN: the page's CSP refuses it
    # before any request is made (so it is not in `left`), and nothing else fails.
    others = [e for e in offline.errors if "cdn.redoc.ly/redoc/logo-mini.svg" not in e]
    assert others == []


def test_api_reference_markup_fixes_keep_the_bundles_working(
    web: BrowserServer, new_context: NewContext
) -> None:
    """apidocs.js puts the bundles' markup right for assistive technology (axe-core in
    test_accessibility.py checks the result); here: it really lands on every element, also
    on ones rendered later, and nothing the bundles do is lost by it."""
    page = new_context().new_page()
    page.goto("/docs")
    put = page.locator("#operations-runs-put_run_v1_runs__run_id__put")
    expect(put).to_be_visible()
    # Swagger's title reads as level 2 under our h1; no link left inside an expand button.
    expect(page.locator(".swagger-ui .info h1.title")).to_have_attribute("aria-level", "2")
    assert page.locator(".opblock-summary-control a").count() > 30
    expect(page.locator(".opblock-summary-control a[href]")).to_have_count(0)
    # Deep linking still works: opening an operation writes its address, which opens it.
    put.locator(".opblock-summary-control").click()
    expect(put.locator(".opblock-body")).to_be_visible()
    expect(page).to_have_url(f"{web.url}/docs#/runs/put_run_v1_runs__run_id__put")
    page.reload()
    expect(
        page.locator("#operations-runs-put_run_v1_runs__run_id__put .opblock-body")
    ).to_be_visible()
    expect(page.locator(".opblock-summary-control a[href]")).to_have_count(0)
    # An opened operation (parameters, responses, examples) has no axe findings either.
    # Clicked in the page, not through Playwright's actionability wait: the PUT body opened
    # above it (issue 18's schema) can still be laying out on a loaded machine and kept the
    # button "not stable" past the timeout — twice, even after scrolling to it first. The
    # bundle's own click handler runs either way, and the next line checks what it did.
    opener = page.locator("#operations-runs-list_runs_v1_runs_get .opblock-summary-control")
    expect(opener).to_be_visible()
    opener.evaluate("button => button.click()")
    expect(page.locator("#operations-runs-list_runs_v1_runs_get .opblock-body")).to_be_visible()
    expect(page.locator("table.responses-table:not([aria-label])")).to_have_count(0)
    assert axe_violations(page) == []

    page.goto("/redoc")
    expect(page.locator("[data-section-id*='/operation/']").first).to_be_attached()
    # Every ReDoc h5 reads as level 3, every select has a name.
    assert page.locator("#redoc h5").count() > 30
    expect(page.locator("#redoc h5:not([aria-level='3'])")).to_have_count(0)
    assert page.locator("#redoc select").count() > 0
    expect(page.locator("#redoc select:not([aria-label])")).to_have_count(0)
    expect(page.locator("#redoc select").first).to_have_attribute("aria-label", "Example")
