"""A phone's path to the server, tested (issue 20 item 5): `runbell serve` behind Caddy with
its local CA (`tls internal`), as docs/operations.md#https-for-phones sets it up.

The pieces are the real ones: Debian's ``caddy`` runs ``deploy/Caddyfile`` itself (the file
the docs print; its ports, site and upstream come from the environment variables the file
reads), as a private process whose CA, certificates and config live under ``tmp_path``
(``HOME``/``XDG_DATA_HOME``/``XDG_CONFIG_HOME``), never the system's caddy service;
``runbell serve`` is a child process with ``RUNBELL_PUBLIC_URL`` at Caddy's ``https://``
address. Chromium trusts Caddy's root the way a phone does once its root is installed: the
root is added to the NSS database of the browser's own ``HOME`` (``certutil``), and
certificate errors are not ignored. Over ``https://`` the browser signs in (a ``Secure``
cookie), sees the inbox update live (the event stream through the proxy), registers the
service worker, subscribes to push (the local push service stands in for the browser
vendor's, as in test_web_flows.py), gets the server's push with an ``https://`` link,
and answers the request from the page that link opens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.acceptance.processes import ServeProc
from tests.acceptance.test_worker_processes import child_env, wait_for
from tests.browser.conftest import CHROMIUM, LAUNCH_ARGS, PHONE, ROOT, login_link
from tests.browser.test_web_flows import FAKE_SUBSCRIBE, SHOWN, PushWatch, pushes
from tests.channels.push_receiver import PushReceiver
from tests.conftest import IN_CI, bearer, free_port
from tests.timeouts import WAIT, WAIT_MS

pytestmark = pytest.mark.browser

CADDYFILE = ROOT / "deploy" / "Caddyfile"
SITE = "127.0.0.1"  # a loopback name the certificate is issued for (an IP SAN)


def require(program: str, package: str) -> str:
    """The program's path; skips without it (fails in CI, which installs ``package``)."""
    found = shutil.which(program)
    if found is None:
        reason = f"{program} not found: install Debian's `{package}` package"
        if IN_CI:
            pytest.fail("CI requires the HTTPS test: " + reason)
        pytest.skip(reason)
    return found


@dataclass
class Caddy:
    url: str  # https://127.0.0.1:PORT, what RUNBELL_PUBLIC_URL says
    root: Path  # the local CA's root certificate, what a phone installs
    log: Path
    proc: subprocess.Popen[bytes]

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.root))


def start_caddy(stack: ExitStack, tmp: Path, upstream: str) -> Caddy:
    caddy = require("caddy", "caddy")
    https_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "CADDY_"))}
    env.update(
        HOME=str(tmp / "caddy-home"),
        XDG_DATA_HOME=str(tmp / "caddy-data"),
        XDG_CONFIG_HOME=str(tmp / "caddy-config"),
        CADDY_ADMIN="off",  # no admin endpoint on :2019, which another caddy may hold
        CADDY_HTTP_PORT=str(free_port()),
        CADDY_HTTPS_PORT=str(https_port),
        RUNBELL_SITE=SITE,
        RUNBELL_UPSTREAM=upstream,
    )
    log = tmp / "caddy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [caddy, "run", "--config", str(CADDYFILE), "--adapter", "caddyfile"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=WAIT)

    stack.callback(stop)
    root = tmp / "caddy-data" / "caddy" / "pki" / "authorities" / "local" / "root.crt"
    url = f"https://{SITE}:{https_port}"
    found = Caddy(url=url, root=root, log=log, proc=proc)

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"caddy exited {proc.returncode}:\n{log.read_text()}")
        if not root.exists():
            return False
        try:
            with httpx.Client(verify=found.tls(), trust_env=False, timeout=WAIT) as http:
                http.get(f"{url}/readyz")  # 502 until the server listens: still TLS
                return True
        except httpx.HTTPError:
            return False

    wait_for(answers, "caddy to answer over https")
    return found


def trusting_home(tmp: Path, root: Path) -> Path:
    """A HOME whose NSS database (where Chromium on Linux reads its roots) trusts ``root``
    as a certificate authority for web sites, as a phone does with the root installed."""
    certutil = require("certutil", "libnss3-tools")
    home = tmp / "browser-home"
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    db = f"sql:{nssdb}"
    subprocess.run([certutil, "-d", db, "-N", "--empty-password"], check=True)
    subprocess.run(
        [certutil, "-d", db, "-A", "-t", "C,,", "-n", "caddy-local-root", "-i", str(root)],
        check=True,
    )
    return home


@pytest.fixture
def served(core: Core, creds: TenantCreds, db_url: str, tmp_path: Path) -> Iterator[Caddy]:
    """`runbell serve` on a loopback port behind Caddy, its links at Caddy's address. Caddy
    starts first: the server's RUNBELL_PUBLIC_URL needs Caddy's port."""
    del core, creds  # the database and the tenant exist before the server starts
    with ExitStack() as stack:
        upstream_port = free_port()
        caddy = start_caddy(stack, tmp_path, f"127.0.0.1:{upstream_port}")
        env = child_env(tmp_path, db_url, RUNBELL_PUBLIC_URL=caddy.url)
        serve = ServeProc(env, tmp_path / "serve.log")
        serve.port, serve.url = upstream_port, f"http://127.0.0.1:{upstream_port}"
        stack.callback(serve.kill)
        serve.launch()
        serve.ready()

        def proxied() -> bool:
            with httpx.Client(verify=caddy.tls(), trust_env=False, timeout=WAIT) as http:
                return http.get(f"{caddy.url}/readyz").status_code == 200

        wait_for(proxied, "runbell through caddy", [serve])
        yield caddy


@pytest.fixture
def trusting_browser(served: Caddy, tmp_path: Path) -> Iterator[Browser]:
    if not (CHROMIUM.exists() and os.access(CHROMIUM, os.X_OK)):
        require(str(CHROMIUM), "chromium")
    home = trusting_home(tmp_path, served.root)
    with sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=LAUNCH_ARGS,
            env={**os.environ, "HOME": str(home)},
        )
        try:
            yield launched
        finally:
            launched.close()


def test_phone_over_https_signs_in_subscribes_and_answers(
    core: Core,
    creds: TenantCreds,
    served: Caddy,
    trusting_browser: Browser,
    push_service: PushReceiver,
) -> None:
    caddy, base = served, served.url
    run_id, request_id = "phone-1", "approve-phone-1"

    context = trusting_browser.new_context(
        base_url=base,
        ignore_https_errors=False,  # the certificate must check out against the root
        viewport={"width": PHONE["width"], "height": PHONE["height"]},
        is_mobile=True,
        has_touch=True,
    )
    context.set_default_timeout(WAIT_MS)
    context.set_default_navigation_timeout(WAIT_MS)
    try:
        subscription = push_service.new_subscription()
        context.grant_permissions(["notifications"], origin=base)
        context.add_init_script(script=FAKE_SUBSCRIBE % json.dumps(subscription))
        page = context.new_page()

        # Signed in over https: a secure context, and the session cookie is Secure.
        page.goto(f"/auth/{login_link(core, creds.tenant_id, creds.owner_id)}")
        expect(page.locator("#sign-out")).to_be_visible()
        assert page.url == f"{base}/"
        assert page.evaluate("window.isSecureContext") is True
        (cookie,) = [c for c in context.cookies() if c["name"] == "rb_session"]
        assert cookie["secure"] is True
        # What "Add to Home Screen" reads: iOS offers push only to a standalone web app.
        href = page.locator('link[rel="manifest"]').get_attribute("href")
        manifest = page.evaluate("async (u) => (await fetch(u)).json()", href)
        assert manifest["display"] == "standalone" and manifest["start_url"] == "/"

        # The service worker and the push subscription, from the settings page.
        page.goto("/settings")
        page.locator("#enable-push").click()
        expect(page.locator("#push-status")).to_have_text(
            "Browser notifications are on for this device."
        )
        watch = PushWatch(context, page, base)
        assert watch.registration_id()

        # The inbox open while the runtime asks: the event stream reaches it through Caddy.
        page.goto("/")
        page.evaluate("window.__sameDocument = true")
        with runtime_over_https(caddy, creds) as runtime:
            r = runtime.put(
                f"/v1/runs/{run_id}",
                json={"owner": creds.owner_email, "title": "Deploy", "state": "working"},
            )
            assert r.status_code == 201, r.text
            r = runtime.post(
                f"/v1/runs/{run_id}/input-requests",
                json={"input_request_id": request_id, "kind": "approval", "summary": "Ship?"},
            )
            assert r.status_code == 201, r.text
        expect(page.locator("#new-items")).to_contain_text("1 new")
        assert page.evaluate("window.__sameDocument === true")

        # The push: its link is the public https address; the service worker shows it.
        (got,) = pushes(page, push_service, 1)
        link = got.payload["url"]
        assert link.startswith(f"{base}/n/"), link
        watch.deliver(got.plaintext.decode("utf-8"))
        (shown,) = page.evaluate(SHOWN)
        assert shown["data"]["url"] == link

        # Opened from the alert, answered on the page.
        page.goto(link)
        expect(page.locator("#opened-from")).to_be_visible()
        page.locator("#approve").click()
        expect(page).to_have_url(re.compile(rf"/runs/{run_id}\?answered={request_id}$"))
        expect(page.locator("#answer-recorded")).to_contain_text("approved")
    finally:
        context.close()

    with runtime_over_https(caddy, creds) as runtime:
        now = runtime.get(f"/v1/runs/{run_id}").json()
    assert now["state"] == "working" and now["pending_input_request"] is None


def runtime_over_https(caddy: Caddy, creds: TenantCreds) -> httpx.Client:
    """An agent runtime reaching the server through Caddy, trusting the same root."""
    return httpx.Client(
        base_url=caddy.url,
        verify=caddy.tls(),
        headers=bearer(creds.runtime_key),
        timeout=WAIT,
        trust_env=False,
    )
