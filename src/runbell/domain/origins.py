"""Which ``Host`` and ``Origin`` headers ``/mcp`` answers: DNS-rebinding protection.

The MCP streamable HTTP transport requires a server to validate ``Origin``: a web page on
``http://evil.example`` whose name an attacker re-points at 127.0.0.1 would otherwise talk
to a server on this machine with the page's own origin. Runbell answers a request only
when

- its ``Host`` names this server: the address the request arrived on (the listening
  socket; ``localhost`` too when that is a loopback address), ``RUNBELL_PUBLIC_URL``'s
  host, or a host of ``RUNBELL_MCP_ALLOWED_HOSTS``; and
- its ``Origin``, when it sends one, is one of those hosts too (a page Runbell itself
  serves) or an origin of ``RUNBELL_MCP_ALLOWED_ORIGINS``. ``Origin: null`` (a sandboxed
  frame, a ``file:`` page, a redirect) is never allowed.

A program that sends no ``Origin`` (every MCP client outside a browser) is judged by its
``Host`` alone.

A port is compared when both sides name one; a side without a port stands for the
default ports (80 and 443), since behind a TLS-terminating proxy the scheme a browser
used is not the one the server sees. ``host:*`` in the allow-list matches any port.

Example::

    guard = Guard.of("https://runbell.example.com", hosts=(), origins=())
    assert guard.refusal("runbell.example.com", None, ("10.0.0.5", 8080)) is None
    assert guard.refusal("evil.example", None, ("10.0.0.5", 8080)) is not None
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

DEFAULT_PORTS = frozenset({80, 443})


@dataclass(frozen=True)
class HostPorts:
    """A host and the ports it stands for (None: any port)."""

    host: str
    ports: frozenset[int] | None

    def matches(self, other: HostPorts) -> bool:
        if self.host != other.host:
            return False
        if self.ports is None or other.ports is None:
            return True
        return bool(self.ports & other.ports)


def _host(text: str) -> str | None:
    host = text.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            return None
    if not host or any(c in host for c in "/?#@[] \t\\"):
        return None
    return host


def parse_authority(text: str, *, wildcard: bool = False) -> HostPorts | None:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` (``host:*`` when ``wildcard``);
    None when it is none of these."""
    text = text.strip()
    if not text:
        return None
    name, port = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:]
        if rest and not port:
            return None
    elif text.count(":") == 1:
        name, port = text.split(":")
        if not port:
            return None
    elif ":" in text:
        return None  # a bare IPv6 address must be bracketed in a Host header
    host = _host(name)
    if host is None:
        return None
    if not port:
        return HostPorts(host, DEFAULT_PORTS)
    if port == "*" and wildcard:
        return HostPorts(host, None)
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return HostPorts(host, frozenset({int(port)}))


def parse_origin(text: str) -> HostPorts | None:
    """The authority of an ``Origin`` (``scheme://host[:port]``, nothing more); None for
    ``null`` or anything else."""
    text = text.strip()
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest or "/" in rest:
        return None
    return parse_authority(rest)


def served_authorities(server: tuple[str, int] | None) -> list[HostPorts]:
    """The socket address a request arrived on, and ``localhost`` when it is loopback."""
    if server is None or not server[0]:
        return []
    host = _host(server[0])
    if host is None:
        return []
    ports = frozenset({int(server[1])}) if server[1] else DEFAULT_PORTS
    found = [HostPorts(host, ports)]
    try:
        if ipaddress.ip_address(host).is_loopback:
            found.append(HostPorts("localhost", ports))
    except ValueError:
        pass
    return found


@dataclass(frozen=True)
class Guard:
    """The hosts and origins configured for this server (the socket address is added per
    request)."""

    hosts: tuple[HostPorts, ...]
    origins: tuple[HostPorts, ...]

    @staticmethod
    def of(public_url: str, hosts: Iterable[str], origins: Iterable[str]) -> Guard:
        return _guard(public_url, frozenset(hosts), frozenset(origins))

    def refusal(
        self, host: str | None, origin: str | None, server: tuple[str, int] | None
    ) -> str | None:
        """None when the request may be answered, else why not (one sentence, safe to show:
        it repeats only what the request itself sent)."""
        ours = [*self.hosts, *served_authorities(server)]
        if host is not None:
            named = parse_authority(host)
            if named is None or not any(a.matches(named) for a in ours):
                return (
                    f"Host {host[:200]!r} is not an address this server answers /mcp on; "
                    "an operator can add it to RUNBELL_MCP_ALLOWED_HOSTS"
                )
        if origin is not None:
            page = parse_origin(origin)
            if page is None or not any(a.matches(page) for a in [*ours, *self.origins]):
                return (
                    f"Origin {origin[:200]!r} may not call /mcp; an operator can add it to "
                    "RUNBELL_MCP_ALLOWED_ORIGINS"
                )
        return None


@lru_cache(maxsize=16)
def _guard(public_url: str, hosts: frozenset[str], origins: frozenset[str]) -> Guard:
    public = urlsplit(public_url)
    configured = [a for a in (parse_authority(h, wildcard=True) for h in sorted(hosts)) if a]
    if public.hostname:
        named = parse_authority(public.netloc.rpartition("@")[2])
        if named is not None:
            configured.insert(0, named)
    pages = [a for a in (parse_origin(o) for o in sorted(origins)) if a]
    return Guard(tuple(configured), tuple(pages))


def host_entry_problem(entry: str) -> str | None:
    """Why ``entry`` cannot be an allowed host (``host``, ``host:port``, ``host:*``)."""
    if parse_authority(entry, wildcard=True) is None:
        return f"{entry[:100]!r} is not a host, host:port or host:*"
    return None


def origin_entry_problem(entry: str) -> str | None:
    """Why ``entry`` cannot be an allowed origin (``scheme://host[:port]``)."""
    if parse_origin(entry) is None:
        return f"{entry[:100]!r} is not an origin such as https://app.example.com"
    return None
