"""`runbell serve --demo` (what `make run` starts): a simulated agent asks for approval,
a person approves, the run finishes — with webhook, email and inbox deliveries in the
trail. Real process, real HTTP, real local mail sink."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.test_cli import SECRETS_NOTE, secrets_file
from tests.conftest import free_port
from tests.timeouts import WAIT, scaled

TOKEN = re.compile(r"\b(rbu_[A-Za-z0-9_-]{20,})")
ADMIN = re.compile(r"admin key\s+(rbk_[A-Za-z0-9_-]{20,})")
RUNBELL = str(Path(sys.executable).with_name("runbell"))


def until(what: Callable[[], Any], seconds: float = scaled(60)) -> Any:
    """Poll ``what`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = what()
        except httpx.TransportError:  # the server is still starting
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"gave up after {seconds} s")


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[str, str, str, Path]]:
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNBELL_")}
    env.update(RUNBELL_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1")
    with log.open("w") as out:
        proc = subprocess.Popen(
            [RUNBELL, "serve", "--port", str(port), "--demo"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        # Not a terminal: the first start's secrets are in the file its output names.
        until(lambda: SECRETS_NOTE.search(log.read_text()))
        text = secrets_file(log.read_text()).read_text()
        yield base, TOKEN.search(text).group(1), ADMIN.search(text).group(1), log  # type: ignore[union-attr]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_demo_run_asks_for_approval_and_finishes_with_every_delivery_in_the_trail(
    demo: tuple[str, str, str, Path],
) -> None:
    """The newcomer's minute: approve the demo request, the run completes, and the trail
    shows the inbox, email and webhook deliveries."""
    base, token, admin, log = demo
    me = {"Authorization": f"Bearer {token}"}
    ops = {"Authorization": f"Bearer {admin}"}
    with httpx.Client(base_url=base, timeout=WAIT, trust_env=False) as http:

        def pending() -> dict[str, Any] | None:
            r = http.get("/v1/input-requests/demo-approve-deploy", headers=me)
            return r.json() if r.status_code == 200 else None

        request = until(pending)["input_request"]
        assert request["state"] == "pending" and request["kind"] == "approval"
        answer = http.post(
            "/v1/input-requests/demo-approve-deploy/responses",
            headers={**me, "Idempotency-Key": "demo-test-1"},
            json={
                "decision": "approve",
                "expected_run_version": request["run_version"],
                "expected_request_version": request["version"],
            },
        )
        assert answer.status_code == 200, answer.text

        def finished() -> dict[str, Any] | None:
            run = http.get("/v1/runs/demo-deploy", headers=me).json()
            return run if run["state"] == "completed" else None

        run = until(finished)
        assert run["report"]["summary"] == "v2 is live on staging"

        inbox = http.get("/v1/notifications", headers=me).json()["notifications"]
        asked = next(n for n in inbox if n["attention_type"] == "input_required")
        assert asked["state"] == "resolved"

        def delivered() -> dict[str, Any] | None:
            trail = http.get(f"/v1/notifications/{asked['id']}/trail", headers=ops).json()
            channels = {d["channel"]: d["status"] for d in trail["deliveries"]}
            sent = channels.get("email") == channels.get("webhook") == "accepted"
            return trail if sent else None

        trail = until(delivered)
        channels = {d["channel"]: d["status"] for d in trail["deliveries"]}
        assert channels["inbox"] == "accepted"
        assert trail["why"]["rule_id"] == "input_required.blocking_expiring"

        def webhooks() -> list[dict[str, Any]] | None:
            rows = http.get("/v1/deliveries?channel=webhook&limit=200", headers=ops).json()
            done = [d for d in rows["deliveries"] if d["status"] == "accepted"]
            types = {d["event_type"] for d in done}
            return done if {"run.finished", "input_request.answered"} <= types else None

        assert until(webhooks)
        mailbox = http.get("/demo/mailbox").text
        assert "A run needs your input" in mailbox and "/n/" in mailbox
    assert "Traceback" not in log.read_text()


def test_demo_invoice_sync_review_waits_for_the_person_then_the_lookup_resolves_it(
    demo: tuple[str, str, str, Path],
) -> None:
    """The second demo run: five operations, one reply lost. Completed → needs_review
    naming the uncertain invoice (in the notification and the ledger). The review waits
    for the person (issue 16 row 13: it used to be gone 8 s later, before anyone had read
    the banner): the invoice stays uncertain, its evidence saying what happens next, until
    the notification is opened; then the lookup confirms it, the review is resolved, the
    completion alert follows, and the ledger keeps the invoice's whole history."""
    base, token, _admin, log = demo
    me = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, timeout=WAIT, trust_env=False) as http:

        def notes() -> list[dict[str, Any]]:
            inbox = http.get("/v1/notifications", headers=me).json()["notifications"]
            return [n for n in inbox if n["run_id"] == "demo-sync-invoices"]

        def reviewed() -> dict[str, Any] | None:
            return next((n for n in notes() if n["attention_type"] == "needs_review"), None)

        def lost() -> dict[str, Any]:
            ledger = http.get("/v1/runs/demo-sync-invoices/operations", headers=me).json()
            return next(o for o in ledger["operations"] if o["operation_id"] == "invoice-4")

        review = until(reviewed)
        assert review["reason"].startswith("4 confirmed, 1 uncertain"), review["reason"]
        assert "uncertain: invoice-4" in review["reason"]
        # Held: nobody has opened the review, so nothing settles it. The demo's own
        # polls of the inbox (one a second) come and go meanwhile.
        for _ in range(5):
            time.sleep(1)
            assert lost()["state"] == "uncertain"
            assert reviewed()["state"] == "open"  # type: ignore[index]
        assert "seconds after you open this review" in lost()["evidence"]["next"]

        # The person opens the review (what /n/{id}, a mail link or the run page record).
        opened = http.post(
            f"/v1/notifications/{review['id']}/receipts",
            headers={**me, "Idempotency-Key": "demo-open-1"},
            json={"kind": "opened", "channel": "email"},
        )
        assert opened.status_code == 201, opened.text

        def settled() -> dict[str, Any] | None:
            run = http.get("/v1/runs/demo-sync-invoices", headers=me).json()
            return run if run["outcome"] == "verified" else None

        run = until(settled)
        assert run["state"] == "completed"
        assert run["operations"] == {"counts": {"confirmed": 5}, "text": "5 confirmed"}
        invoice = lost()
        assert [h["state"] for h in invoice["history"]] == [
            "planned",
            "sent",
            "uncertain",
            "confirmed",
        ]
        assert invoice["history"][2]["evidence"]["error"] == "no reply within 30 s"
        assert invoice["evidence"]["checked_by"] == "demo reconciler"
        by_type = {(n["attention_type"], n["state"]) for n in notes()}
        assert ("needs_review", "resolved") in by_type and ("completed", "open") in by_type
        assert sum(1 for n in notes() if n["attention_type"] == "needs_review") == 1
        # The review was mailed with the neutral text only: no counts, no invoice ids.
        mailbox = until(lambda: (t := http.get("/demo/mailbox").text) and "needs review" in t and t)
        assert "invoice-4" not in mailbox and "INV-1004" not in mailbox
    assert "Traceback" not in log.read_text()
