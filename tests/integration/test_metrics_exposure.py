"""`/metrics` holds every tenant's delivery counts: served without a token only on loopback.

DESIGN §6 lists `/metrics` for operators; a server listening beyond loopback (`--host
0.0.0.0`) with no `RUNBELL_METRICS_TOKEN` keeps it closed (404 problem saying how to open
it) instead of showing cross-tenant counts to anyone who can reach the port.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from runbell.api.routers.health import is_loopback, metrics_refusal
from runbell.app import build, create_app
from runbell.flows.context import Core
from runbell.testing import Clock
from tests.conftest import bearer, make_settings

TOKEN = "metrics-token-5b1e"
MakeClient = Callable[..., TestClient]
ANY_V4 = "0.0.0.0"  # noqa: S104 (the value under test, never bound here)


@pytest.fixture
def make_client(tmp_path: Path, db_url: str) -> Iterator[MakeClient]:
    clients: list[TestClient] = []
    cores: list[Core] = []

    def make(listen_host: str | None, token: str | None = None) -> TestClient:
        settings = make_settings(tmp_path, db_url, metrics_token=token)
        core = build(settings, clock=Clock(), migrate=False)
        cores.append(core)
        client = TestClient(create_app(core, bridge=False, listen_host=listen_host))
        clients.append(client.__enter__())
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)
    for core in cores:
        core.db.dispose()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        (ANY_V4, False),
        ("::", False),
        ("", False),
        ("192.168.1.20", False),
        ("runbell.internal", False),
    ],
)
def test_loopback_is_only_what_answers_this_machine_alone(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert (metrics_refusal(host, None) is None) is loopback
    assert metrics_refusal(host, TOKEN) is None  # a token opens it everywhere


@pytest.mark.parametrize("host", [None, "127.0.0.1", "::1", "localhost"])
def test_loopback_server_serves_metrics_without_a_token(
    make_client: MakeClient, host: str | None
) -> None:
    r = make_client(host).get("/metrics")
    assert r.status_code == 200, r.text
    assert "runbell_deliveries" in r.text


@pytest.mark.parametrize("host", [ANY_V4, "::", "10.1.2.3"])
def test_exposed_server_without_token_keeps_metrics_closed(
    make_client: MakeClient, host: str | None
) -> None:
    client = make_client(host)
    r = client.get("/metrics")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["type"].endswith("/metrics-disabled")
    assert "RUNBELL_METRICS_TOKEN" in body["detail"]
    assert "runbell_" not in r.text
    # Everything else still works.
    assert client.get("/healthz").status_code == 200


def test_exposed_server_with_token_needs_it(make_client: MakeClient) -> None:
    client = make_client(ANY_V4, token=TOKEN)
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=bearer("wrong")).status_code == 401
    r = client.get("/metrics", headers=bearer(TOKEN))
    assert r.status_code == 200
    assert "runbell_deliveries" in r.text
