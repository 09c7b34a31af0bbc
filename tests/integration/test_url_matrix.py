"""Issue 16 row 3: every URL and host parser failure is a 422 naming the field, on every
URL-taking endpoint, and the keep-alive connection stays usable afterwards.

Before, ``https://xn--localhost-/{run_id}`` as a reader URL (and as
``openai_responses.base_url``) was a 500 on both databases — httpx decodes IDNA lazily,
outside every check — after which the server reset the connection; ``xn--zz.com`` (an
A-label that does not decode) was accepted for webhooks, push and chat and failed on
every send. All URL-taking faces now share one parse step (``domain.ssrf.parse_url``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.timeouts import WAIT

#: Malformed hosts (and authorities) a careful user, or a fuzzer, would try.
BAD_HOSTS = [
    "xn--localhost-",  # invalid IDNA: an A-label may not end with a hyphen
    "xn--zz.example.com",  # an A-label that does not decode
    "xn--.example.com",  # an empty A-label
    "a" * 64 + ".example.com",  # a label over 63 characters
    "a..example.com",  # an empty label
    ".example.com",  # an empty first label
    "-a.example.com",  # a label starting with a hyphen
    "a-.example.com",  # ... or ending with one
    ".".join(["a" * 60] * 5) + ".com",  # a name over 253 characters
    "example.com:99999",  # port out of range
    "example.com:abc",  # port not a number
    "example.com:0",  # port 0
    "example.com:-1",
    "user@example.com",  # userinfo
    "user:pw@example.com",
    "evil.example@example.com",  # userinfo hiding the real host
    "exa\x01mple.com",  # a control character
    "exa\tmple.com",  # whitespace (urlsplit would silently drop it)
    "exa mple.com",
    "[::1",  # an unterminated IPv6 literal
    "[not-an-address]",
    "ex%00ample.com",  # percent-encoded NUL
    "1.2.3.4.5",  # ends in a number but is not IPv4
    "\u2603\u200d.com",  # IDNA cannot encode a joiner here
]

Body = Callable[[str], dict[str, Any]]
KEEP = {"p256dh": "B" * 87, "auth": "A" * 22}

#: endpoint → (path, body for a host, who, the field named, the table that must stay empty)
ENDPOINTS: dict[str, tuple[str, Body, str, str, sa.Table]] = {
    "http_json reader": (
        "/v1/sources",
        lambda h: {
            "name": "s",
            "kind": "api",
            "reader": {"type": "http_json", "url_template": f"https://{h}/runs/{{run_id}}"},
        },
        "admin",
        "reader.url_template",
        t.sources,
    ),
    "openai_responses reader": (
        "/v1/sources",
        lambda h: {
            "name": "s",
            "kind": "api",
            "reader": {"type": "openai_responses", "api_key": "sk-x", "base_url": f"https://{h}"},
        },
        "admin",
        "reader.base_url",
        t.sources,
    ),
    "mcp_tasks reader": (
        "/v1/sources",
        lambda h: {
            "name": "s",
            "kind": "api",
            "reader": {"type": "mcp_tasks", "url": f"https://{h}/mcp"},
        },
        "admin",
        "reader.url",
        t.sources,
    ),
    "webhook endpoint": (
        "/v1/webhook-endpoints",
        lambda h: {"url": f"https://{h}/hook"},
        "admin",
        "url",
        t.webhook_endpoints,
    ),
    "push subscription": (
        "/v1/me/push-subscriptions",
        lambda h: {"endpoint": f"https://{h}/push/abc", "keys": KEEP},
        "owner",
        "endpoint",
        t.push_subscriptions,
    ),
    "chat destination": (
        "/v1/me/chat-destinations",
        lambda h: {"url": f"jsons://{h}/notify"},
        "owner",
        "url",
        t.chat_destinations,
    ),
}


def count(core: Core, table: sa.Table) -> int:
    with core.db.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_malformed_hosts_are_422_naming_the_field(
    core: Core, creds: TenantCreds, endpoint: str
) -> None:
    path, body, who, field, table = ENDPOINTS[endpoint]
    token = creds.admin_key if who == "admin" else creds.owner_token
    before = count(core, table)
    with (
        LiveServer(core, bridge=False) as server,
        httpx.Client(base_url=server.url, headers=bearer(token), timeout=WAIT) as http,
    ):
        for host in BAD_HOSTS:
            if endpoint == "chat destination" and "@" in host:
                continue  # Apprise URLs carry credentials as userinfo by design
            r = http.post(path, json=body(host))
            assert r.status_code == 422, (host, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/problem+json"), host
            assert r.json().get("field") == field, (host, r.json())
            # The same keep-alive connection still answers.
            again = http.get("/v1/me" if who == "owner" else "/v1/sources")
            assert again.status_code == 200, (host, again.text)
    assert count(core, table) == before


def test_the_reported_url_row_3(core: Core, creds: TenantCreds) -> None:
    """The row as filed: an invalid IDNA host in a reader URL was a 500 and a reset."""
    with (
        LiveServer(core, bridge=False) as server,
        httpx.Client(base_url=server.url, headers=bearer(creds.admin_key), timeout=WAIT) as http,
    ):
        for reader, field in (
            (
                {"type": "http_json", "url_template": "https://xn--localhost-/{run_id}"},
                "url_template",
            ),
            (
                {"type": "openai_responses", "api_key": "k", "base_url": "https://xn--localhost-"},
                "base_url",
            ),
        ):
            r = http.post("/v1/sources", json={"name": "s", "kind": "api", "reader": reader})
            assert r.status_code == 422, r.text
            assert r.json()["field"] == f"reader.{field}"
            assert http.get("/v1/sources").status_code == 200
