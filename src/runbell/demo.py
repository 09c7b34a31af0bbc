"""``runbell serve --demo``: a simulated agent that asks for approval, so a newcomer can
approve it in the browser and watch the run finish — with every delivery in the trail.

What it sets up (once per database, on the first tenant):

- a tenant webhook endpoint pointing at this server's own ``/demo/webhook-sink``, which
  verifies the Standard Webhooks signature like any receiver would;
- a local SMTP sink (aiosmtpd) when no SMTP server is configured, whose mails are listed
  at ``/demo/mailbox`` (styled like the app, links clickable; the sign-in page points
  there);
- a run that works for a few seconds, asks "Deploy the demo app to staging?", waits for
  the answer, and then completes (approved) or stops (rejected);
- a second run, an invoice sync with five operations whose fourth reply is lost: it
  reports completed, the run answers ``needs_review`` (the uncertain invoice on the run
  page and in the notification), and the review waits for the person: only once they
  have opened it (the notification, from the inbox, a mail or a push, or the run's page:
  its ``first_seen_at``, read through the inbox flow) — or after
  :data:`LOOKUP_HOLD_S` at the latest — does a lookup confirm the invoice, a few seconds
  later, while they watch. The review is resolved, the completion alert follows, and the
  run page keeps the invoice's history: uncertain at …, confirmed by the lookup at ….

Nothing here is used outside demo mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import structlog
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from starlette.routing import NoMatchFound

from runbell.api.responses import answer_json
from runbell.domain.errors import NotFound
from runbell.domain.principal import Principal
from runbell.flows import accounts, endpoints, inbox, operations, ownership, runs, signals
from runbell.flows import input_requests as actions
from runbell.flows.context import Core
from runbell.flows.inputs import MoveBody
from runbell.flows.signals import Signal
from runbell.web.templating import render

log = structlog.get_logger(__name__)

RUN_ID = "demo-deploy"
REQUEST_ID = "demo-approve-deploy"
LEDGER_RUN_ID = "demo-sync-invoices"
#: (operation id, invoice, amount): the invoice sync's five intended effects.
LEDGER_OPERATIONS = (
    ("invoice-1", "INV-1001", 120),
    ("invoice-2", "INV-1002", 80),
    ("invoice-3", "INV-1003", 310),
    ("invoice-4", "INV-1004", 45),
    ("invoice-5", "INV-1005", 99),
)
LOST_REPLY = "invoice-4"
#: Seconds between the person opening the review and the lookup of the lost reply: time
#: to read the uncertain invoice before the page shows it settled.
LOOKUP_AFTER_SEEN_S = 15.0
#: The review waits this long at most for the person (then the lookup runs anyway).
LOOKUP_HOLD_S = 600.0
#: What the uncertain invoice's evidence tells the person (shown on the run page).
NEXT_STEP = (
    "The demo's reconciler looks this invoice up in the billing system "
    f"{LOOKUP_AFTER_SEEN_S:g} seconds after you open this review (at the latest "
    f"{LOOKUP_HOLD_S / 60:g} minutes after the sync finished); this page then shows the answer "
    "by itself."
)
MAILBOX_ROUTE = "demo_mailbox"
SINK_PATH = "/demo/webhook-sink"


@dataclass
class DemoState:
    received_webhooks: list[dict[str, Any]] = field(default_factory=list)
    mails: list[dict[str, str]] = field(default_factory=list)
    smtp: Any = None


def start_mail_sink(state: DemoState) -> tuple[str, int]:
    """A local SMTP server that keeps what it receives (shown at /demo/mailbox)."""
    from aiosmtpd.controller import Controller

    class Keep:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
            body = msg.get_body(preferencelist=("plain",))
            state.mails.append(
                {
                    "to": ", ".join(envelope.rcpt_tos),
                    "subject": str(msg["subject"]),
                    "message_id": str(msg["message-id"]),
                    "text": body.get_content() if body is not None else "",
                }
            )
            return "250 kept"

    import socket

    with socket.socket() as probe:  # a free port: aiosmtpd's own port 0 is not exposed
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    controller = Controller(Keep(), hostname="127.0.0.1", port=port)
    controller.start()
    state.smtp = controller
    return "127.0.0.1", port


def sink_router(core: Core, state: DemoState) -> APIRouter:
    @contextlib.asynccontextmanager
    async def registered(app: FastAPI) -> AsyncIterator[None]:
        # The web's sign-in pages say where mail lands (runbell.web.signin.mailbox_path).
        app.state.mailbox_path = mailbox_path
        yield

    router = APIRouter(prefix="/demo", include_in_schema=False, lifespan=registered)

    @router.post("/webhook-sink")
    async def webhook_sink(request: Request) -> dict[str, str]:
        body = await request.body()
        endpoints.verify_own_delivery(core, SINK_PATH, body, request.headers)
        state.received_webhooks.append(
            {"id": request.headers.get("webhook-id", ""), "body": body.decode()[:2000]}
        )
        return {"ok": "verified"}

    if state.smtp is not None:  # with a real SMTP server configured, mail goes there

        @router.get("/mailbox", name=MAILBOX_ROUTE)
        def mailbox(request: Request) -> Response:
            # The mailbox can hold sign-in links: only this machine may read it, even when
            # the demo server listens on every interface.
            if not _from_this_machine(request):
                raise NotFound("no such page")
            return render(
                "mailbox.html.j2",
                {
                    "title": "Demo mailbox",
                    "page": "mailbox",
                    "mails": [{**m, "parts": _linked(m["text"])} for m in reversed(state.mails)],
                },
            )

    return router


def _from_this_machine(request: Request) -> bool:
    return request.client is not None and request.client.host in ("127.0.0.1", "::1")


_URL = re.compile(r"https?://[^\s<>\"']+")


def _linked(text: str) -> list[tuple[str, str | None]]:
    """``text`` cut into (text, link) parts, so the links in a mail can be clicked."""
    parts: list[tuple[str, str | None]] = []
    at = 0
    for m in _URL.finditer(text):
        url = m.group(0).rstrip(".,;:!?)")
        parts.append((text[at : m.start()], None))
        parts.append((url, url))
        at = m.start() + len(url)
    parts.append((text[at:], None))
    return [p for p in parts if p[0]]


def mailbox_path(request: Request) -> str | None:
    """Where this server's demo mailbox is, for pages that say where mail lands: ``None``
    unless ``runbell serve --demo`` runs its own mail sink and this person may open it."""
    try:
        path = str(request.app.url_path_for(MAILBOX_ROUTE))
    except NoMatchFound:
        return None
    return path if _from_this_machine(request) else None


def setup(core: Core, base_url: str) -> tuple[str, str] | None:
    """Register the demo webhook endpoint on the first tenant; (tenant id, owner id)."""
    found = accounts.first_tenant_owner(core.db)
    if found is None:
        return None
    tenant_id, owner_id = found
    endpoints.ensure_endpoint(
        core, tenant_id, f"{base_url}{SINK_PATH}", description="demo sink (this server)"
    )
    return tenant_id, owner_id


async def agent(core: Core, tenant_id: str, owner_id: str, stop: asyncio.Event) -> None:
    """The demo's two simulated runs, side by side: the deploy that asks for approval, and
    the invoice sync whose lost reply is looked up after it reports completed."""
    await asyncio.gather(
        deploy_agent(core, tenant_id, owner_id, stop),
        ledger_agent(core, tenant_id, owner_id, stop),
    )


async def ledger_agent(core: Core, tenant_id: str, owner_id: str, stop: asyncio.Event) -> None:
    """The invoice sync: five operations, one reply lost (``uncertain``). It reports
    ``completed``; the run answers ``needs_review`` with the uncertain item named. A few
    seconds later a lookup finds the invoice paid: the review is resolved, and only then
    does the completion alert follow. Idempotent across restarts."""
    who = Principal(tenant_id=tenant_id, kind="key", role="runtime")
    source = signals.api_source(core, who)
    state = _state_of(core, who, LEDGER_RUN_ID)
    if state is None:
        await asyncio.to_thread(
            runs.put_run,
            core,
            who,
            LEDGER_RUN_ID,
            {
                "owner": owner_id,
                "title": "Mark five demo invoices paid in the billing system",
                "kind": "pipeline",
                "objective": "Record the payments that arrived today on their invoices.",
                "state": "working",
            },
        )
        claimed = await asyncio.to_thread(
            ownership.claim, core, who, LEDGER_RUN_ID, "demo-worker-1"
        )
        epoch = answer_json(claimed)["epoch"]
        await asyncio.to_thread(
            operations.declare,
            core,
            who,
            LEDGER_RUN_ID,
            {
                "epoch": epoch,
                "operations": [
                    {
                        "operation_id": op_id,
                        "target": {"type": "invoice", "id": invoice},
                        "intent": "mark paid",
                        "details": {"amount_eur": amount, "payment_ref": f"PAY-{invoice}"},
                        "idempotency_key": f"demo-{op_id}",
                    }
                    for op_id, invoice, amount in LEDGER_OPERATIONS
                ],
            },
        )
        for op_id, invoice, _ in LEDGER_OPERATIONS:
            await _move(core, who, op_id, "sent", epoch=epoch)
            if await _wait(stop, 0.8):
                return
            if op_id == LOST_REPLY:
                evidence = {
                    "error": "no reply within 30 s",
                    "checked_by": "demo-worker-1",
                    "next": NEXT_STEP,
                }
                await _move(core, who, op_id, "uncertain", epoch=epoch, evidence=evidence)
            else:
                receipt = {"receipt_id": f"rcpt-{invoice}", "checked_by": "billing API reply"}
                await _move(core, who, op_id, "confirmed", epoch=epoch, evidence=receipt)
        await asyncio.to_thread(
            signals.accept_signal,
            core,
            tenant_id,
            source,
            LEDGER_RUN_ID,
            Signal(
                event_id="demo-sync-finished",
                state="completed",
                reason="all invoices sent",
                actor=ownership.actor_of(who, "demo-worker-1"),
            ),
        )
        log.info("demo.ledger_completed", run_id=LEDGER_RUN_ID)
    elif state != "completed":
        return  # a run left over from an older demo: nothing to settle
    # The review waits for the person; the lookup follows once they have seen it.
    if await _held_until_seen(core, tenant_id, owner_id, stop):
        return
    if await _wait(stop, LOOKUP_AFTER_SEEN_S):
        return
    found = await asyncio.to_thread(operations.list_operations, core, who, LEDGER_RUN_ID)
    lost = next(o for o in found["operations"] if o["operation_id"] == LOST_REPLY)
    if lost["state"] == "uncertain":
        lookup = {
            "lookup": f"GET /invoices/{lost['target']['id']}: status paid",
            "checked_by": "demo reconciler",
        }
        await _move(core, who, LOST_REPLY, "confirmed", evidence=lookup)
        log.info("demo.ledger_reviewed", run_id=LEDGER_RUN_ID)


async def _held_until_seen(core: Core, tenant_id: str, owner_id: str, stop: asyncio.Event) -> bool:
    """Wait until the owner has seen the sync's review (or :data:`LOOKUP_HOLD_S` passed);
    True when the demo is stopping meanwhile."""
    owner = Principal(tenant_id=tenant_id, kind="user", role="owner", user_id=owner_id)
    deadline = asyncio.get_running_loop().time() + LOOKUP_HOLD_S
    while asyncio.get_running_loop().time() < deadline:
        if await asyncio.to_thread(_review_seen, core, owner):
            log.info("demo.review_seen", run_id=LEDGER_RUN_ID)
            return False
        if await _wait(stop, 1.0):
            return True
    return False


def _review_seen(core: Core, owner: Principal) -> bool:
    """Whether the owner has seen the sync's review: its notification has a
    ``first_seen_at`` (opened from the inbox, a mail, a push or the run page), or it is no
    longer open (acknowledged, or settled another way)."""
    found = inbox.list_notifications(core, owner, states=None, before=None, limit=200)
    reviews = [
        n
        for n in found["notifications"]
        if n["run_id"] == LEDGER_RUN_ID and n["attention_type"] == "needs_review"
    ]
    return any(n["first_seen_at"] is not None or n["state"] != "open" for n in reviews)


async def _move(core: Core, who: Principal, op_id: str, state: str, **extra: Any) -> None:
    body = cast(MoveBody, {"state": state, **extra})  # epoch and evidence, as given
    await asyncio.to_thread(operations.move, core, who, LEDGER_RUN_ID, op_id, body)


def _state_of(core: Core, who: Principal, run_id: str) -> str | None:
    try:
        return str(runs.get_run(core, who, run_id)["state"])
    except NotFound:
        return None


async def deploy_agent(core: Core, tenant_id: str, owner_id: str, stop: asyncio.Event) -> None:
    """The simulated deploy run: work, ask, wait, finish. Idempotent across restarts."""
    who = Principal(tenant_id=tenant_id, kind="key", role="runtime")
    source = signals.api_source(core, who)
    if _run_state(core, who) is None:
        await asyncio.to_thread(
            runs.put_run,
            core,
            who,
            RUN_ID,
            {
                "owner": owner_id,
                "title": "Deploy the demo app to staging",
                "kind": "pipeline",
                "objective": "Build, test and deploy v2 of the demo app to staging.",
                "notify_on_complete": True,
                "state": "working",
                "details": {
                    "command": "deploy --env staging --version v2",
                    "changes": ["api: new /health endpoint", "web: dark mode"],
                },
            },
        )
        for step, message in enumerate(("building", "running tests", "preparing deploy")):
            await asyncio.to_thread(
                runs.record_progress,
                core,
                who,
                RUN_ID,
                message,
                {"done": step + 1, "total": 3, "unit": "steps"},
            )
            if await _wait(stop, 1.5):
                return
        await asyncio.to_thread(
            actions.open_request,
            core,
            who,
            RUN_ID,
            {
                "input_request_id": REQUEST_ID,
                "kind": "approval",
                "summary": "Deploy v2 of the demo app to staging?",
                "details": {
                    "command": "deploy --env staging --version v2",
                    "risk": "staging only; rollback takes one minute",
                },
                "expires_at": (core.db.clock() + timedelta(hours=1)).isoformat(),
            },
        )
        log.info("demo.waiting_for_approval", run_id=RUN_ID)
    # Wait for the answer (the run moves back to working when someone answers).
    answer = None
    while not stop.is_set():
        req, answer, state = await asyncio.to_thread(_request_state, core, who)
        if state in ("completed", "failed", "cancelled"):
            return
        if req in ("answered", "expired", "cancelled"):
            break
        if await _wait(stop, 1.0):
            return
    if await _wait(stop, 2.0):
        return
    approved = answer == "approve"
    await asyncio.to_thread(
        signals.accept_signal,
        core,
        tenant_id,
        source,
        RUN_ID,
        Signal(
            event_id="demo-finished",
            actor=ownership.actor_of(who),
            state="completed" if approved else "cancelled",
            reason="deployed to staging" if approved else "deploy rejected by the reviewer",
            report={
                "iterations": 3,
                "summary": "v2 is live on staging" if approved else "nothing was deployed",
                "trace_id": "demo-trace-1",
            },
        ),
    )
    log.info("demo.finished", run_id=RUN_ID, approved=approved)


def _run_state(core: Core, who: Principal) -> str | None:
    """The demo run's state, or None before it exists."""
    try:
        return str(runs.get_run(core, who, RUN_ID)["state"])
    except NotFound:
        return None


def _request_state(core: Core, who: Principal) -> tuple[str | None, str | None, str | None]:
    """(the approval request's state, its answer's decision, the run's state); None for
    what does not exist (yet)."""
    try:
        found = actions.get_request(core, who, REQUEST_ID)
    except NotFound:
        return None, None, _run_state(core, who)
    request = found["input_request"]
    return request["state"], request["decision"], found["run"]["state"]


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
        return True
    except TimeoutError:
        return False
