"""The SDK's transport: an ``http://`` server gets a client that never loads the CA bundle
(httpx loads it for every client it makes: ~30 ms of a hook call's 150 ms budget, issue 20
row 3); an ``https://`` one verifies as always."""

from __future__ import annotations

import ssl

import pytest

from runbell.client import AsyncClient, Client
from runbell.client._core import plain_http


def _context(client: Client | AsyncClient) -> ssl.SSLContext:
    pool = client._http._transport._pool  # type: ignore[attr-defined]
    context: ssl.SSLContext = pool._ssl_context
    return context


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_only_https_servers_load_and_check_certificates(cls: type[Client | AsyncClient]) -> None:
    plain = cls("http://127.0.0.1:8080", "rbk_x", environ={})
    secure = cls("https://runbell.example", "rbk_x", environ={})
    assert _context(plain).verify_mode == ssl.CERT_NONE  # never used: no TLS to speak
    assert _context(secure).verify_mode == ssl.CERT_REQUIRED
    assert _context(secure).check_hostname


def test_plain_http_is_the_scheme_only() -> None:
    assert plain_http("http://127.0.0.1:8080")
    assert plain_http("HTTP://runbell.lan")
    assert not plain_http("https://runbell.example")
    assert not plain_http("https://http.example")
