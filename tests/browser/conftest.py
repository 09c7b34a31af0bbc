"""Fixtures for the browser tests: Debian's Chromium driven by Playwright (sync API), the
real app under uvicorn with its delivery worker, a runtime talking HTTP, and a local push
service that decrypts what the server sends.

SQLite only: these tests are about what a browser sees and does. Every data path they
touch (runs, input requests, sessions, subscriptions, deliveries) already runs on both
SQLite and PostgreSQL in tests/integration and tests/acceptance.

Chromium: /usr/bin/chromium, never a downloaded build (`playwright install` is not used).
When it is missing the tests skip with a clear message, except in CI (CI=true) where
they fail, so they can never be skipped silently there.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from runbell.app import create_app
from runbell.config import Settings
from runbell.dispatch.wiring import build_channels
from runbell.dispatch.worker import Worker
from runbell.flows.context import Core
from runbell.store import sessions
from runbell.testing import TenantCreds
from tests.channels.push_receiver import PushReceiver
from tests.conftest import IN_CI, LiveServer, bearer, free_port, make_settings
from tests.timeouts import WAIT, WAIT_MS, scaled

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
# Every Playwright wait and expect() is bounded by tests.timeouts.WAIT_MS (scaled by
# RUNBELL_TEST_TIME_SCALE); importing it from here keeps working.

expect.set_options(timeout=WAIT_MS)


# --- the database and the server ------------------------------------------------------


@pytest.fixture
def db_url(tmp_path: Path, sqlite_template: Path) -> str:
    """SQLite only (overrides the parametrized fixture): PostgreSQL is covered by the API
    and web tests in tests/integration, which exercise the same code paths."""
    target = tmp_path / "runbell.db"
    shutil.copy(sqlite_template, target)
    return f"sqlite:///{target}"


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def settings(tmp_path: Path, db_url: str, port: int) -> Settings:
    # public_url is the live server, so deep links in pushes point where the browser is.
    return make_settings(tmp_path, db_url, public_url=f"http://127.0.0.1:{port}")


class BrowserServer(LiveServer):
    """:class:`tests.conftest.LiveServer` with the delivery worker on the server's loop,
    as `runbell serve` runs it, so a subscription made in the browser gets real pushes."""

    def __init__(self, core: Core, port: int, routers: Sequence[APIRouter] = ()) -> None:
        import uvicorn

        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        worker = Worker(core, build_channels(core))
        config = uvicorn.Config(
            create_app(core, bridge=False, worker=worker, routers=routers),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            # Open event streams must not hold the teardown for long.
            timeout_graceful_shutdown=int(scaled(2)),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)


@pytest.fixture
def web(core: Core, port: int) -> Iterator[BrowserServer]:
    with BrowserServer(core, port) as server:
        yield server


@pytest.fixture
def push_service() -> Iterator[PushReceiver]:
    """A push service on 127.0.0.1 that decrypts each push with the test's browser keys
    (127.0.0.1 is on the outbound allow-list in tests.conftest.make_settings)."""
    with PushReceiver() as receiver:
        yield receiver


# --- the browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not (CHROMIUM.exists() and os.access(CHROMIUM, os.X_OK)):
        reason = (
            f"Chromium not found at {CHROMIUM}: install Debian's `chromium` package "
            "(the browser tests never download a browser)"
        )
        if IN_CI:
            pytest.fail("CI requires the browser tests: " + reason)
        pytest.skip(reason)
    with sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


NewContext = Callable[..., BrowserContext]


@pytest.fixture
def new_context(browser: Browser, web: BrowserServer) -> Iterator[NewContext]:
    """Fresh browser profiles (own cookies, own service workers), closed after the test —
    before the server stops (this fixture depends on ``web``), so no stream holds it up."""
    made: list[BrowserContext] = []

    def make(**options: Any) -> BrowserContext:
        options.setdefault("viewport", DESKTOP)
        ctx = browser.new_context(base_url=web.url, **options)
        ctx.set_default_timeout(WAIT_MS)
        ctx.set_default_navigation_timeout(WAIT_MS)
        made.append(ctx)
        return ctx

    yield make
    for ctx in reversed(made):
        ctx.close()


# --- helpers ------------------------------------------------------------------------------


def login_link(core: Core, tenant_id: str, user_id: str) -> str:
    """A one-time sign-in token, made by the same store function the CLI and /login use."""
    with core.db.transaction() as tx:
        return sessions.create_login_link(tx.conn, tenant_id, user_id, tx.now)


def sign_in(page: Page, core: Core, tenant_id: str, user_id: str) -> None:
    """Sign ``page``'s context in through a real one-time link; lands on the inbox."""
    page.goto(f"/auth/{login_link(core, tenant_id, user_id)}")
    expect(page.locator("#sign-out")).to_be_visible()


def wait_until(
    page: Page, condition: Callable[[], bool], what: str, timeout_s: float = WAIT
) -> None:
    """Wait for something outside the page (a CDP event, a push the server sent).

    ``page.wait_for_timeout`` is what lets Playwright's sync API dispatch CDP events
    between checks; the loop ends as soon as the condition holds and fails at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        page.wait_for_timeout(50)


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot for the docs under test-artifacts/screenshots/ (gitignored):
    the whole page, or with ``full_page=False`` the screen as the person sees it now."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 0
    return path


class Runtime:
    """An agent runtime on the HTTP API with its runtime key, as integrators call it."""

    def __init__(self, base_url: str, creds: TenantCreds) -> None:
        self.creds = creds
        self.http = httpx.Client(
            base_url=base_url,
            headers=bearer(creds.runtime_key),
            timeout=WAIT,
            trust_env=False,  # no proxy between the test and 127.0.0.1
        )

    def close(self) -> None:
        self.http.close()

    def create_run(self, run_id: str, **fields: Any) -> dict[str, Any]:
        body = {
            "owner": self.creds.owner_email,
            "title": f"Deploy {run_id}",
            "kind": "coding",
            "objective": "Ship the fix for the flaky checkout test",
            "state": "working",
            **fields,
        }
        r = self.http.put(f"/v1/runs/{run_id}", json=body)
        assert r.status_code == 201, r.text
        return dict(r.json())

    def update_run(self, run_id: str, **fields: Any) -> dict[str, Any]:
        r = self.http.put(f"/v1/runs/{run_id}", json=fields)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def signal(self, run_id: str, event_id: str, state: str, **fields: Any) -> dict[str, Any]:
        body = {"event_id": event_id, "state": state, **fields}
        r = self.http.post(f"/v1/runs/{run_id}/signals", json=body)
        assert r.status_code == 200 and r.json()["outcome"] == "applied", r.text
        return dict(r.json())

    def progress(self, run_id: str, message: str, **counts: Any) -> None:
        body = {"message": message, "counts": counts or None}
        r = self.http.post(f"/v1/runs/{run_id}/progress", json=body)
        assert r.status_code == 202 and r.json()["accepted"], r.text

    def open_request(self, run_id: str, request_id: str, **fields: Any) -> dict[str, Any]:
        body = {
            "input_request_id": request_id,
            "kind": "approval",
            "summary": "Push the fix to main?",
            **fields,
        }
        r = self.http.post(f"/v1/runs/{run_id}/input-requests", json=body)
        assert r.status_code == 201, r.text
        return dict(r.json())


@pytest.fixture
def runtime(web: BrowserServer, creds: TenantCreds) -> Iterator[Runtime]:
    rt = Runtime(web.url, creds)
    yield rt
    rt.close()


def user_client(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers=bearer(token), timeout=WAIT, trust_env=False)


# --- accessibility (axe-core) ------------------------------------------------------------


def axe_violations(page: Page, context: Any = None) -> list[dict[str, Any]]:
    """axe-core's violations on ``page`` as it is now: the ``axe.min.js`` the
    ``axe-playwright-python`` dev dependency bundles, injected from disk (no network)."""
    from axe_playwright_python.base import AXE_FILE_PATH

    if not page.evaluate("() => Boolean(window.axe)"):
        page.evaluate(AXE_FILE_PATH.read_text(encoding="utf-8"))
    found = page.evaluate(
        "async (context) => (await axe.run(context || document, "
        "{resultTypes: ['violations']})).violations",
        context,
    )
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "nodes": [" ".join(map(str, n["target"])) for n in v["nodes"]][:5],
            "summary": (v["nodes"][0].get("failureSummary") or "")[:300] if v["nodes"] else "",
        }
        for v in found
    ]
