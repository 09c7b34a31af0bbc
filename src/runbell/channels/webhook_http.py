"""The worker's webhook client: SSRF-guarded keep-alive HTTP/1.1 POSTs on asyncio streams.

Why not httpx here: profiling the drain (bench/profile/p3-p4-delivery.md, "second pass")
showed a worker spending about 1 ms of CPU per webhook, most of it in httpx/httpcore's
layers for one POST (request and URL objects, the auth/redirect/cookie steps, anyio's
stream and cancel-scope wrappers, h11's state machine) plus a thread hop per request for
the SSRF check. A webhook is always the same exchange — one POST with a small body, a
status and at most an excerpt of the answer — so this client does only that, with the
same guarantees:

- every request is checked with :func:`runbell.domain.ssrf.check_url` and dialled at the
  *first checked address* only (no second lookup, so no DNS-rebinding window); ``Host``
  and, for https, SNI and certificate verification use the name. The check runs inline
  for IP-literal hosts (it does no I/O then) and in a thread for names (it resolves);
- redirects are never followed (a 3xx is handed back like any status), no proxy from
  the environment is used;
- one deadline (``timeout``) covers connect, write and the answer: a send never outlives
  it, which is what the claim's lease assumes (:func:`runbell.flows.delivery_claim.
  lease_cover`);
- failures are told apart the way the channel needs them: :class:`ConnectFailed` (the
  request was certainly not sent: the lookup or the connect failed) and
  :class:`ExchangeFailed` (anything after the connection opened: the request may have
  arrived). A :class:`~runbell.domain.errors.UnsafeDestination` propagates unchanged.

Each lane holds one keep-alive connection (:class:`KeepAliveLanes`, as many lanes as
the worker sends at once); a connection is reused only for the same scheme, address,
port and (for https) name, and only while the peer has not closed it. A response whose
body is not read to its end (longer than the excerpt plus a small drain allowance, or
delimited by closing) closes the connection instead of leaving it in an unknown state.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runbell.domain.ssrf import Resolver, Target, check_url

__all__ = ["ConnectFailed", "ExchangeFailed", "KeepAliveLanes", "Reply", "RequestRefused"]

# Read at most this much of a response body for the excerpt; a longer body is drained up
# to _DRAIN_LIMIT to keep the connection, and beyond that the connection is closed.
EXCERPT_BYTES = 2000
_DRAIN_LIMIT = 64 * 1024
_HEAD_LIMIT = 64 * 1024  # status line + headers: more than that is not an answer
_NO_BODY = frozenset({204, 304})


class ConnectFailed(Exception):
    """Nothing was sent: the name did not resolve, or the connection did not open."""


class RequestRefused(Exception):
    """The request cannot be written as asked (a control character in a header or the
    path): it can never work."""


class ExchangeFailed(Exception):
    """The connection was open and the request may have arrived, but no complete answer
    came back (a reset, a timeout, a malformed response)."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # lower-cased names
    body: bytes  # at most EXCERPT_BYTES of it


class _NeedsLookup(Exception):
    pass


def _no_lookup(host: str, port: int) -> Sequence[str]:
    raise _NeedsLookup


def _ssl_context() -> ssl.SSLContext:
    """Certificate and host name verification, with certifi's roots like httpx."""
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - certifi comes with httpx
        return ssl.create_default_context()


class _Lane:
    """One keep-alive connection, used by one exchange at a time."""

    def __init__(self) -> None:
        self._key: tuple[str, str, int, str] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    def _usable(self, key: tuple[str, str, int, str]) -> bool:
        r, w = self._reader, self._writer
        return (
            self._key == key
            and r is not None
            and w is not None
            and not w.is_closing()
            and not r.at_eof()
            and r.exception() is None
        )

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._key = self._reader = self._writer = None

    async def exchange(
        self,
        target: Target,
        request: bytes,
        timeout: float,
        open_connection: _Opener,
        ssl_context: ssl.SSLContext | None,
    ) -> Reply:
        https = target.scheme == "https"
        address = target.addresses[0]
        key = (target.scheme, address, target.port, target.host if https else "")
        connecting = False
        try:
            async with asyncio.timeout(timeout):
                if not self._usable(key):
                    self.close()
                    connecting = True
                    try:
                        self._reader, self._writer = await open_connection(
                            address,
                            target.port,
                            ssl=ssl_context if https else None,
                            server_hostname=target.host if https else None,
                        )
                    except (OSError, ssl.SSLError) as exc:
                        raise ConnectFailed(f"{type(exc).__name__}: {exc}"[:200]) from exc
                    connecting = False
                    self._key = key
                reader, writer = self._reader, self._writer
                assert reader is not None and writer is not None
                writer.write(request)
                await writer.drain()
                reply, keep = await _read_reply(reader)
        except ConnectFailed:
            self.close()
            raise
        except TimeoutError as exc:
            self.close()
            if connecting:
                raise ConnectFailed("ConnectTimeout: the connection did not open in time") from exc
            raise ExchangeFailed("ReadTimeout: no complete answer in time") from exc
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError) as exc:  # fmt: skip
            self.close()
            raise ExchangeFailed(f"{type(exc).__name__}: {exc}"[:200]) from exc
        except BaseException:
            self.close()  # cancelled mid-exchange: the connection's state is unknown
            raise
        if not keep:
            self.close()
        return reply


class _Opener:
    """``asyncio.open_connection``'s signature (a test dials through its own)."""

    async def __call__(
        self, host: str, port: int, *, ssl: ssl.SSLContext | None, server_hostname: str | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            host, port, ssl=ssl, server_hostname=server_hostname, limit=_HEAD_LIMIT
        )


async def _read_reply(reader: asyncio.StreamReader) -> tuple[Reply, bool]:
    """The final answer (interim 1xx skipped) and whether the connection can be reused."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise ValueError("malformed status line")
        status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise ValueError("malformed header line")
            name = name.lower()
            value = value.strip()
            if name in headers and name not in ("content-length", "transfer-encoding"):
                headers[name] = f"{headers[name]}, {value}"
            elif name in headers and headers[name] != value:
                raise ValueError(f"conflicting {name} headers")
            else:
                headers[name] = value
        if 100 <= status < 200 and status != 101:
            continue
        break
    keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    if status in _NO_BODY:
        return Reply(status, headers, b""), keep
    te = headers.get("transfer-encoding")
    if te is not None:
        if te.lower() != "chunked":
            raise ValueError("unsupported transfer-encoding")
        body, complete = await _read_chunked(reader)
        return Reply(status, headers, body), keep and complete
    length = headers.get("content-length")
    if length is None:  # delimited by closing: read the excerpt, then drop the connection
        body = await reader.read(EXCERPT_BYTES)
        while len(body) < EXCERPT_BYTES:
            more = await reader.read(EXCERPT_BYTES - len(body))
            if not more:
                break
            body += more
        return Reply(status, headers, body), False
    if not length.isdigit():
        raise ValueError("malformed content-length")
    n = int(length)
    if n > EXCERPT_BYTES + _DRAIN_LIMIT:
        body = await reader.readexactly(EXCERPT_BYTES)
        return Reply(status, headers, body), False
    body = await reader.readexactly(n)
    return Reply(status, headers, body[:EXCERPT_BYTES]), keep


async def _read_chunked(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """A chunked body's first EXCERPT_BYTES; True when it was read to its end."""
    body = bytearray()
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size_text = size_line[:-2].split(b";", 1)[0].strip()
        if not size_text or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
            raise ValueError("malformed chunk size")
        size = int(size_text, 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return bytes(body[:EXCERPT_BYTES]), True
        total += size
        if total > EXCERPT_BYTES + _DRAIN_LIMIT:
            return bytes(body[:EXCERPT_BYTES]), False
        chunk = await reader.readexactly(size + 2)
        if chunk[-2:] != b"\r\n":
            raise ValueError("malformed chunk")
        if len(body) < EXCERPT_BYTES:
            body += chunk[:-2]


def _request(target: Target, body: bytes, headers: Mapping[str, str]) -> bytes:
    """The request's bytes. Names and values are ours (signatures, content type); the
    path comes from the checked URL. Anything that could split the request is refused."""
    default_port = 443 if target.scheme == "https" else 80
    host = f"[{target.host}]" if ":" in target.host else target.host
    authority = host if target.port == default_port else f"{host}:{target.port}"
    lines = [
        f"POST {target.path_and_query} HTTP/1.1",
        f"host: {authority}",
        f"content-length: {len(body)}",
    ]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    head = "\r\n".join(lines)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in head.replace("\r\n", "")) or " " in (
        target.path_and_query
    ):
        raise ValueError("a control character or space in the request line or a header")
    return head.encode("latin-1") + b"\r\n\r\n" + body


class KeepAliveLanes:
    """``n`` keep-alive connections used as one; each POST takes an idle lane (waiting
    for one when all are busy)."""

    def __init__(
        self,
        n: int,
        *,
        allow_hosts: frozenset[str] = frozenset(),
        timeout: float = 10.0,
        resolve: Resolver | None = None,
        open_connection: _Opener | None = None,
    ) -> None:
        from runbell.outbound import make_resolver

        if n < 1:
            raise ValueError("at least one lane")
        self.lanes = [_Lane() for _ in range(n)]
        self._idle: asyncio.LifoQueue[_Lane] | None = None
        self._allow_hosts = frozenset(allow_hosts)
        self._timeout = timeout
        self._resolve = resolve if resolve is not None else make_resolver()
        self._open = open_connection or _Opener()
        self._ssl: ssl.SSLContext | None = None

    def check(self, url: str) -> Target | None:
        """The checked target when that needs no lookup (an IP-literal host); None when
        the host is a name. Raises ``UnsafeDestination`` for a refused URL."""
        try:
            return check_url(url, allow_hosts=self._allow_hosts, resolve=_no_lookup)
        except _NeedsLookup:
            return None

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        target = self.check(url)
        if target is None:
            try:
                target = await asyncio.to_thread(
                    check_url, url, allow_hosts=self._allow_hosts, resolve=self._resolve
                )
            except OSError as exc:
                raise ConnectFailed(f"cannot resolve the host: {exc}") from exc
        try:
            request = _request(target, body, headers)
        except ValueError as exc:
            raise RequestRefused(str(exc)) from exc
        if self._idle is None:  # made on first use, inside the loop that uses it
            self._idle = asyncio.LifoQueue()
            for lane in self.lanes:
                self._idle.put_nowait(lane)
        if target.scheme == "https" and self._ssl is None:
            self._ssl = _ssl_context()
        lane = await self._idle.get()
        try:
            return await lane.exchange(target, request, self._timeout, self._open, self._ssl)
        finally:
            self._idle.put_nowait(lane)

    async def aclose(self) -> None:
        for lane in self.lanes:
            lane.close()
