"""The sign-in email goes through the outbox like every other email.

What a person or an operator would notice: one email with a working link per workspace,
nothing of the links readable in the database, the same email whether the worker loop or
the page itself sends it, and no email once the links it carries have expired. Against a
real SMTP server (aiosmtpd) on 127.0.0.1, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.app import build, create_app
from runbell.dispatch.wiring import build_channels
from runbell.dispatch.worker import Worker
from runbell.domain.channels import SIGN_IN
from runbell.flows import deliveries, sessions
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import Clock, add_user, make_tenant
from tests.conftest import make_settings
from tests.peers import Dispatcher, SmtpPeer, mail_text
from tests.timeouts import WAIT

ADDRESS = "pat@example.test"


@pytest.fixture
def smtp() -> Iterator[SmtpPeer]:
    with SmtpPeer() as peer:
        yield peer


@pytest.fixture
def mail_core(tmp_path: Path, db_url: str, clock: Clock, smtp: SmtpPeer) -> Iterator[Core]:
    clock.freeze()
    rb = build(
        make_settings(
            tmp_path,
            db_url,
            smtp_host="127.0.0.1",
            smtp_port=smtp.port,
            smtp_from="Runbell <rb@runbell.test>",
        ),
        clock=clock,
        migrate=False,
    )
    yield rb
    rb.db.dispose()


def _links(text: str) -> list[str]:
    return re.findall(r"http://testserver/auth/\S+", text)


def _stored(core: Core, delivery_id: str) -> dict[str, object]:
    with core.db.read() as conn:
        row = conn.execute(sa.select(t.deliveries).where(t.deliveries.c.id == delivery_id)).one()
    return dict(row._mapping)


def test_one_email_per_request_with_a_sealed_link_per_workspace(
    mail_core: Core, clock: Clock, smtp: SmtpPeer
) -> None:
    acme = make_tenant(mail_core, "acme", owner_email=ADDRESS)
    beta = make_tenant(mail_core, "beta")
    add_user(mail_core, beta.tenant_id, ADDRESS)

    delivery_id = sessions.request_sign_in(mail_core, " Pat@Example.test ", "/settings")

    assert delivery_id is not None
    stored = _stored(mail_core, delivery_id)
    assert (stored["channel"], stored["event_type"]) == ("email", SIGN_IN)
    assert stored["destination"] == ADDRESS and stored["tenant_id"] == acme.tenant_id
    # At rest, the links (and the other workspace's name) are sealed.
    at_rest = repr(stored)
    assert "/auth/" not in at_rest and "rbl_" not in at_rest and "beta" not in at_rest
    assert smtp.parsed() == []  # queued: a worker sends it

    with Dispatcher(mail_core, clock) as worker:
        assert worker.tick() == 1

    [mail] = smtp.parsed()
    assert mail["To"] == ADDRESS
    assert mail["Subject"] == "Your Runbell sign-in link"
    assert mail["Message-ID"] == f"<{delivery_id}@runbell.test>"  # stable across retries
    assert mail["List-Unsubscribe"] is None and not mail.is_multipart()
    text = mail_text(mail)
    assert "Open the link for the workspace you want." in text
    assert "acme:" in text and "beta:" in text
    links = _links(text)
    assert len(links) == 2 and all(link.endswith("?next=/settings") for link in links)
    for link in links:
        token = link.split("/auth/")[1].split("?")[0]
        assert isinstance(sessions.sign_in(mail_core, token), sessions.SignedIn)
    view = deliveries.get_delivery(mail_core, acme.tenant_id, delivery_id)
    assert view["status"] == "accepted" and view["event_type"] == SIGN_IN


def test_an_address_nobody_has_queues_nothing(mail_core: Core, clock: Clock) -> None:
    make_tenant(mail_core, "acme")
    assert sessions.request_sign_in(mail_core, "stranger@elsewhere.test") is None
    with Dispatcher(mail_core, clock) as worker:
        assert worker.tick() == 0


def test_a_sign_in_email_is_not_sent_once_its_links_expired(
    mail_core: Core, clock: Clock, smtp: SmtpPeer
) -> None:
    creds = make_tenant(mail_core, "acme", owner_email=ADDRESS)
    delivery_id = sessions.request_sign_in(mail_core, ADDRESS)
    assert delivery_id is not None
    clock.advance(sessions.LINK_TTL.total_seconds() + 1)

    with Dispatcher(mail_core, clock) as worker:
        assert worker.tick() == 1

    assert smtp.parsed() == []
    view = deliveries.get_delivery(mail_core, creds.tenant_id, delivery_id)
    assert view["status"] == "cancelled"
    assert "expired" in view["last_error"]


def test_a_server_with_its_worker_loop_sends_it_from_the_loop(
    mail_core: Core, smtp: SmtpPeer
) -> None:
    """`runbell serve`: the page only queues the email; the worker loop in the same
    process sends it, once."""
    make_tenant(mail_core, "acme", owner_email=ADDRESS)
    worker = Worker(mail_core, build_channels(mail_core))
    with TestClient(create_app(mail_core, bridge=False, worker=worker)) as client:
        form = client.get("/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert csrf
        answer = client.post("/login", data={"csrf_token": csrf.group(1), "email": ADDRESS})
        assert "If that address belongs to a member" in answer.text
        deadline = time.monotonic() + WAIT
        while not smtp.parsed() and time.monotonic() < deadline:
            time.sleep(0.01)
    [mail] = smtp.parsed()
    assert len(_links(mail_text(mail))) == 1
    assert smtp.attempts == 1
