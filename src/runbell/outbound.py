"""Outbound HTTP that cannot be pointed at our own network: the I/O shell of the SSRF guard.

Every request sent through ``SafeTransport`` / ``AsyncSafeTransport`` is first
checked with ``runbell.domain.ssrf.check_url`` (which resolves the host once)
and is then sent to the *first checked address*: the URL's host is rewritten
to that IP literal, the ``Host`` header keeps the original name, and for https
the TLS SNI / certificate check uses the original name too. Nothing resolves
the name again between the check and the connect, so DNS rebinding has no
window.

Redirects are never followed: ``safe_client`` / ``safe_async_client`` build
clients with ``follow_redirects=False`` (and ``trust_env=False``, so no proxy
from the environment sees the request). A 3xx response is handed back as is;
callers must treat it as a failed delivery, never as an instruction to go
elsewhere.

A failed DNS lookup surfaces as ``httpx.ConnectError`` (a transient network
error, retried as such); a refused destination raises ``UnsafeDestination``.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import anyio.to_thread
import httpx

from runbell.domain.ssrf import Resolver, Target, check_url, parse_host

__all__ = [
    "AsyncSafeTransport",
    "SafeTransport",
    "make_resolver",
    "safe_async_client",
    "safe_client",
]


def make_resolver() -> Resolver:
    """A resolver backed by ``socket.getaddrinfo``: every TCP address of ``host``, in order."""

    def resolve(host: str, port: int) -> Sequence[str]:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        return [str(info[4][0]) for info in infos]

    return resolve


def _pin(request: httpx.Request, target: Target) -> None:
    """Point ``request`` at the checked address, keeping the name for Host and TLS."""
    address = target.addresses[0]
    if target.scheme == "https" and parse_host(target.host) is None:
        request.extensions["sni_hostname"] = target.host
        # httpcore pools connections by (scheme, ip, port); a TLS connection verified for
        # one name must not be reused for another name behind the same address.
        request.headers["Connection"] = "close"
    request.url = request.url.copy_with(host=address)


def _network_error(request: httpx.Request, exc: OSError) -> httpx.ConnectError:
    return httpx.ConnectError(f"cannot resolve {request.url.host!r}: {exc}", request=request)


class SafeTransport(httpx.HTTPTransport):
    """An ``httpx.HTTPTransport`` that checks each request and dials only checked addresses."""

    def __init__(
        self,
        *,
        allow_hosts: frozenset[str] = frozenset(),
        resolve: Resolver | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._allow_hosts = frozenset(allow_hosts)
        self._resolve = resolve if resolve is not None else make_resolver()

    def _check(self, url: str) -> Target:
        return check_url(url, allow_hosts=self._allow_hosts, resolve=self._resolve)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            target = self._check(str(request.url))
        except OSError as exc:
            raise _network_error(request, exc) from exc
        _pin(request, target)
        return super().handle_request(request)


class AsyncSafeTransport(httpx.AsyncHTTPTransport):
    """The async twin of ``SafeTransport``; resolution runs in a worker thread."""

    def __init__(
        self,
        *,
        allow_hosts: frozenset[str] = frozenset(),
        resolve: Resolver | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._allow_hosts = frozenset(allow_hosts)
        self._resolve = resolve if resolve is not None else make_resolver()

    def _check(self, url: str) -> Target:
        return check_url(url, allow_hosts=self._allow_hosts, resolve=self._resolve)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            target = await anyio.to_thread.run_sync(self._check, str(request.url))
        except OSError as exc:
            raise _network_error(request, exc) from exc
        _pin(request, target)
        return await super().handle_async_request(request)


def safe_client(
    allow_hosts: frozenset[str] = frozenset(),
    timeout: float = 10.0,
    *,
    resolve: Resolver | None = None,
) -> httpx.Client:
    """A client that never follows redirects, ignores proxy env vars and dials checked IPs."""
    return httpx.Client(
        transport=SafeTransport(allow_hosts=allow_hosts, resolve=resolve),
        follow_redirects=False,
        trust_env=False,
        timeout=timeout,
    )


def safe_async_client(
    allow_hosts: frozenset[str] = frozenset(),
    timeout: float = 10.0,
    *,
    resolve: Resolver | None = None,
) -> httpx.AsyncClient:
    """The async twin of ``safe_client``."""
    return httpx.AsyncClient(
        transport=AsyncSafeTransport(allow_hosts=allow_hosts, resolve=resolve),
        follow_redirects=False,
        trust_env=False,
        timeout=timeout,
    )
