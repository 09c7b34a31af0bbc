"""``/mcp`` answers only the Host and Origin it serves (DNS-rebinding protection, issue 16
row 5), describes its bearer scheme in RFC 9728 metadata, and tells the ``mcp`` SDK's own
client why a missing or wrong token is refused, without any OAuth flow being started."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.timeouts import WAIT

MCP_ACCEPT = "application/json, text/event-stream"
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def post(live: LiveServer, key: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{live.url}/mcp",
        json=LIST,
        headers={**bearer(key), "Accept": MCP_ACCEPT, **headers},
        timeout=WAIT,
    )


def allow(core: Core, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> None:
    monkeypatch.setattr(core, "settings", core.settings.model_copy(update=settings))


# (Host, Origin) → answered? ``{port}`` is the live server's; its public URL is
# http://testserver (tests/conftest.py).
MATRIX = [
    ("127.0.0.1:{port}", None, True),  # the served address, no Origin: any MCP client
    ("localhost:{port}", None, True),  # loopback under its name
    ("127.0.0.1:{port}", "http://127.0.0.1:{port}", True),  # a page Runbell serves
    ("localhost:{port}", "http://localhost:{port}", True),
    ("testserver", None, True),  # RUNBELL_PUBLIC_URL's host
    ("testserver", "http://testserver", True),
    ("127.0.0.1:{port}", "http://evil.example", False),  # another site's page
    ("127.0.0.1:{port}", "null", False),  # sandboxed frame, file: page
    ("127.0.0.1:{port}", "http://localhost:6274", False),  # not allowed (yet)
    ("evil.example", None, False),  # DNS rebinding: the attacker's name
    ("evil.example:{port}", "http://evil.example:{port}", False),
    ("127.0.0.1:1", None, False),  # another port of this machine
    ("testserver:8443", None, False),  # the public host on another port
    ("not a host", None, False),
]


@pytest.mark.parametrize(("host", "origin", "answered"), MATRIX)
def test_the_host_and_origin_matrix(
    live: LiveServer, creds: TenantCreds, host: str, origin: str | None, answered: bool
) -> None:
    headers = {"Host": host.format(port=live.port)}
    if origin is not None:
        headers["Origin"] = origin.format(port=live.port)
    r = post(live, creds.runtime_key, **headers)
    if answered:
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 403, r.text
    # An MCP client's refusal is a JSON-RPC error carrying the problem document.
    error = r.json()["error"]
    assert error["data"]["status"] == 403
    assert error["data"]["type"].endswith("/forbidden-origin")
    assert "Host" in error["message"] or "Origin" in error["message"]


def test_a_refusal_is_a_problem_document_for_other_callers(
    live: LiveServer, creds: TenantCreds
) -> None:
    for accept in ("application/json", "application/problem+json, text/event-stream"):
        r = httpx.post(
            f"{live.url}/mcp",
            json=LIST,
            headers={**bearer(creds.runtime_key), "Accept": accept, "Origin": "null"},
            timeout=WAIT,
        )
        assert r.status_code == 403
        assert r.headers["content-type"].startswith("application/problem+json")
        doc = r.json()
        assert doc["status"] == 403
        assert "RUNBELL_MCP_ALLOWED_ORIGINS" in doc["detail"]


def test_the_allow_lists_let_named_hosts_and_origins_in(
    live: LiveServer, creds: TenantCreds, core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    inspector = {"Origin": "http://localhost:6274", "Host": f"127.0.0.1:{live.port}"}
    assert post(live, creds.runtime_key, **inspector).status_code == 403
    assert post(live, creds.runtime_key, Host="runbell.internal:9000").status_code == 403
    allow(
        core,
        monkeypatch,
        mcp_allowed_origins=frozenset({"http://localhost:6274"}),
        mcp_allowed_hosts=frozenset({"runbell.internal:*", "rb.example"}),
    )
    assert post(live, creds.runtime_key, **inspector).status_code == 200
    assert post(live, creds.runtime_key, Host="runbell.internal:9000").status_code == 200
    assert post(live, creds.runtime_key, Host="rb.example").status_code == 200
    assert post(live, creds.runtime_key, Host="rb.example:8080").status_code == 403
    assert post(live, creds.runtime_key, Origin="http://localhost:6275").status_code == 403
    # A page on an allowed host is one of ours.
    assert post(live, creds.runtime_key, Origin="https://rb.example").status_code == 200


def test_the_guard_comes_before_the_credentials(live: LiveServer) -> None:
    r = httpx.post(
        f"{live.url}/mcp",
        json=LIST,
        headers={"Accept": "application/json", "Host": "evil.example"},
        timeout=WAIT,
    )
    assert r.status_code == 403


# --- RFC 9728 protected resource metadata ------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/mcp"])
def test_protected_resource_metadata_describes_the_bearer_scheme(
    live: LiveServer, suffix: str
) -> None:
    r = httpx.get(f"{live.url}/.well-known/oauth-protected-resource{suffix}", timeout=WAIT)
    assert r.status_code == 200
    doc = r.json()
    assert doc["resource"] == f"{live.url}{suffix}"
    assert doc["bearer_methods_supported"] == ["header"]
    assert "authorization_servers" not in doc
    assert doc["resource_documentation"] == f"{live.url}/docs"
    assert httpx.get(doc["resource_documentation"], timeout=WAIT).status_code == 200
    # Asked under the public URL's name, it names the public URL; under a name this
    # server does not answer to, too (nothing of the request is echoed).
    for host in ("testserver", "evil.example"):
        named = httpx.get(
            f"{live.url}/.well-known/oauth-protected-resource{suffix}",
            headers={"Host": host},
            timeout=WAIT,
        ).json()
        assert named["resource"] == f"http://testserver{suffix}"


@pytest.mark.parametrize("token", [None, "rbk_not-a-key"])
def test_a_401_points_at_the_metadata(live: LiveServer, token: str | None) -> None:
    headers = {"Accept": "application/json"} | (bearer(token) if token else {})
    r = httpx.post(f"{live.url}/mcp", json=LIST, headers=headers, timeout=WAIT)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    challenge = r.headers["www-authenticate"]
    meta = f"{live.url}/.well-known/oauth-protected-resource/mcp"
    assert challenge.startswith('Bearer realm="runbell"')
    assert f'resource_metadata="{meta}"' in challenge
    assert ('error="invalid_token"' in challenge) == (token is not None)
    assert httpx.get(meta, timeout=WAIT).json()["resource"] == f"{live.url}/mcp"


# --- what the mcp SDK's client sees --------------------------------------------------------


class Recorded(LiveServer):
    """The live server, remembering every path it was asked for."""

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self.paths: list[str] = []
        app = self.server.config.app

        async def recording(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.paths.append(scope["path"])
            await app(scope, receive, send)

        self.server.config.app = recording


@pytest.fixture
def recorded(core: Core) -> Iterator[Recorded]:
    with Recorded(core) as server:
        yield server


@pytest.mark.parametrize(
    ("token", "said"),
    [
        (None, "Unauthorized: send Authorization: Bearer <api key or user token>"),
        ("rbk_not-a-key", "Unauthorized: unknown, revoked or expired credentials"),
    ],
)
async def test_the_sdk_client_explains_a_missing_or_wrong_token(
    recorded: Recorded, token: str | None, said: str
) -> None:
    http = create_mcp_http_client(headers=bearer(token) if token else {})
    refused: MCPError | None = None
    try:
        async with (
            http,
            streamable_http_client(f"{recorded.url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
    except BaseException as exc:
        refused = _mcp_error(exc)
        if refused is None:
            raise
    assert refused is not None, "the session initialized without a credential"
    assert said in refused.error.message
    assert refused.error.data["status"] == 401
    # No OAuth flow: nothing asked for an authorization server, a registration or a token.
    assert set(recorded.paths) == {"/mcp"}, recorded.paths


def _mcp_error(exc: BaseException) -> MCPError | None:
    if isinstance(exc, MCPError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        if (found := _mcp_error(inner)) is not None:
            return found
    return None
