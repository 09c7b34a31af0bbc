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

Libraries built on ``requests`` get the same guarantee two ways:

* ``PinnedAdapter(target)``, a ``requests`` transport adapter for one checked
  :class:`~runbell.domain.ssrf.Target` (web push hands pywebpush a session with it
  mounted): the urllib3 pool dials the checked address, TLS SNI and certificate
  verification use the name, and the ``Host`` header keeps it.
* ``guarded_dials(targets, ...)``, for libraries that call ``requests.post`` with no
  session to inject (Apprise's plugins): while the context is active (in this thread,
  and in threads that copy its ``contextvars``, as ``asyncio.to_thread`` and Apprise's
  executor do), every TCP connection urllib3 opens dials a checked address: a pinned
  ``(host, port)`` its checked address, any other host is resolved once, checked with
  the same rules and dialled at the checked answer. Nothing outside the context is
  affected.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
import httpx
import requests
import requests.adapters
import urllib3.util.connection

from runbell.domain.errors import UnsafeDestination
from runbell.domain.ssrf import Resolver, Target, check_url, parse_host

__all__ = [
    "AsyncSafeTransport",
    "DialGuard",
    "PinnedAdapter",
    "SafeTransport",
    "guarded_dials",
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
    limits: httpx.Limits | None = None,
) -> httpx.AsyncClient:
    """The async twin of ``safe_client`` (``limits``: the connection pool's, httpx's
    defaults when not given)."""
    pool = {} if limits is None else {"limits": limits}
    return httpx.AsyncClient(
        transport=AsyncSafeTransport(allow_hosts=allow_hosts, resolve=resolve, **pool),
        follow_redirects=False,
        trust_env=False,
        timeout=timeout,
    )


# --- requests / urllib3 ----------------------------------------------------------------


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _host_key(host: str) -> str:
    """A host as urllib3 and ``check_url`` may spell it, reduced to one form."""
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host.isascii():
        # Not a valid name: it matches no pin, and check_url refuses it.
        with contextlib.suppress(UnicodeError):
            host = host.encode("idna").decode("ascii")
    return host


class PinnedAdapter(requests.adapters.HTTPAdapter):
    """A ``requests`` adapter that sends to one checked :class:`Target` and nowhere else.

    The urllib3 connection pool is keyed on (and dials) ``target.addresses[0]``; for https
    the TLS ``server_hostname`` (SNI) and the certificate's hostname check use
    ``target.host``; the ``Host`` header names ``target.host`` too. A request for any
    other origin raises ``requests.exceptions.InvalidURL`` before connecting. Proxies are
    never used. No retries (the dispatcher owns them). Mount it on a fresh session::

        session = requests.Session()
        session.trust_env = False
        pinned = PinnedAdapter(check_url(url, allow_hosts=..., resolve=...))
        session.mount("https://", pinned)
        session.mount("http://", pinned)
    """

    def __init__(self, target: Target) -> None:
        super().__init__(max_retries=0)
        self.target = target

    def _same_origin(self, url: str) -> bool:
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        except ValueError:
            return False
        return (parts.scheme.lower(), _host_key(parts.hostname or ""), port) == (
            self.target.scheme,
            _host_key(self.target.host),
            self.target.port,
        )

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: Any, cert: Any = None
    ) -> Any:  # (host params, pool kwargs); requests' stubs type them as closed TypedDicts
        params, kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        host_params: dict[str, Any] = dict(params)
        pool_kwargs: dict[str, Any] = dict(kwargs)
        host_params["host"] = self.target.addresses[0]
        if self.target.scheme == "https" and parse_host(self.target.host) is None:
            pool_kwargs["server_hostname"] = self.target.host
            pool_kwargs["assert_hostname"] = self.target.host
        return host_params, pool_kwargs

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        if not self._same_origin(str(request.url)):
            # Details name the host only: push endpoints carry a capability in their path.
            raise requests.exceptions.InvalidURL(
                f"request is not for the checked destination {self.target.host!r}",
                request=request,
            )
        default = 443 if self.target.scheme == "https" else 80
        host = f"[{self.target.host}]" if ":" in self.target.host else self.target.host
        request.headers["Host"] = (
            host if self.target.port == default else _netloc(self.target.host, self.target.port)
        )
        return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert)


@dataclass
class DialGuard:
    """What :func:`guarded_dials` enforces for one send; see there.

    ``refused`` collects the destinations the guard refused during the send (a plugin
    contacting a host we did not expect, which resolves into our network), so the caller
    can report a refusal instead of the library's generic connection error. ``opened``
    counts the connections that were established: a connection error after one opened
    may have come after the request was written (its outcome is unknown).
    """

    allow_hosts: frozenset[str]
    resolve: Resolver
    pins: dict[tuple[str, int], str] = field(default_factory=dict)
    refused: list[UnsafeDestination] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    opened: int = 0

    def connected(self) -> None:
        with self.lock:
            self.opened += 1

    def pin(self, target: Target) -> None:
        with self.lock:
            self.pins[(_host_key(target.host), target.port)] = target.addresses[0]

    def address_for(self, host: str, port: int) -> str:
        """The address to dial for ``host:port``: its pin, or a freshly checked answer."""
        key = (_host_key(host), port)
        with self.lock:
            pinned = self.pins.get(key)
        if pinned is not None:
            return pinned
        # Not a host the caller checked: check it now, dial exactly what was checked.
        # (The scheme is unknown down here; the rules for addresses do not depend on it.)
        try:
            target = check_url(
                f"https://{_netloc(key[0], port)}/",
                allow_hosts=self.allow_hosts,
                resolve=self.resolve,
            )
        except UnsafeDestination as exc:
            with self.lock:
                self.refused.append(exc)
            # An OSError is what urllib3 expects from a failed connect: the library reports
            # a connection error, and the caller reads ``refused`` for the real reason.
            raise ConnectionRefusedError(f"refused by the SSRF guard: {exc.detail}") from None
        self.pin(target)
        return target.addresses[0]


_DIAL_GUARD: contextvars.ContextVar[DialGuard | None] = contextvars.ContextVar(
    "runbell_dial_guard", default=None
)
_hook_lock = threading.Lock()


def _install_dial_hook() -> None:
    """Route urllib3's connects through the active :class:`DialGuard` (once per process).

    urllib3 opens every TCP connection with ``urllib3.util.connection.create_connection``;
    the wrapper changes only the address dialled, and only while a guard is active in the
    calling context, so the name still drives SNI, certificate checks and ``Host``.
    """
    with _hook_lock:
        current = urllib3.util.connection.create_connection
        if getattr(current, "runbell_dial_guard", False):
            return

        def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
            guard = _DIAL_GUARD.get()
            if guard is not None:
                host, port = address
                address = (guard.address_for(host, port), port)
            sock = current(address, *args, **kwargs)
            if guard is not None:
                guard.connected()
            return sock

        create_connection.runbell_dial_guard = True  # type: ignore[attr-defined]
        urllib3.util.connection.create_connection = create_connection


@contextmanager
def guarded_dials(
    targets: Iterable[Target],
    *,
    allow_hosts: frozenset[str],
    resolve: Resolver | None = None,
) -> Iterator[DialGuard]:
    """Make every urllib3 connection opened in this context dial a checked address.

    ``targets`` are the destinations the caller already checked (``check_url``): their
    ``(host, port)`` dial their first checked address without a second lookup. Any other
    host is resolved once with ``resolve``, checked with ``allow_hosts`` and dialled at
    the checked answer; a refused one fails to connect and lands in ``guard.refused``.
    """
    _install_dial_hook()
    guard = DialGuard(
        allow_hosts=frozenset(allow_hosts),
        resolve=resolve if resolve is not None else make_resolver(),
    )
    for target in targets:
        guard.pin(target)
    token = _DIAL_GUARD.set(guard)
    try:
        yield guard
    finally:
        _DIAL_GUARD.reset(token)
