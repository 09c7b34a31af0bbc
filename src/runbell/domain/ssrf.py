"""The SSRF guard for outbound URLs: pure rules, no sockets, no DNS.

Runbell sends webhooks to URLs its tenants choose, so every outbound URL is a
request to reach into *our* network on somebody else's behalf. ``check_url``
decides whether a URL may be dialled and returns the exact addresses that were
checked; the I/O shell (``runbell.outbound``) then connects to one of those
addresses and nothing else, so a DNS answer cannot change between check and
connect.

A URL is refused (``UnsafeDestination``, whose ``detail`` names the rule) when:

* it does not parse, or its scheme is not ``http``/``https``;
* it carries userinfo (``https://user:pw@host``), which hides the real host
  from people reading it and is never needed for a webhook;
* its host is empty, or not a valid DNS name / IP literal (spaces, control
  characters, empty labels, a dotted name that ends in a number but is not a
  valid IPv4 address, ...);
* it uses ``http`` and its host is not allow-listed (https only by default);
* its host is a local-only name: ``localhost``, ``*.localhost``, ``*.local``,
  ``*.internal``, ``*.home.arpa``, ``*.localdomain`` or a bare single label;
* its host is an IP literal -- in any spelling a resolver or browser accepts:
  dotted, one integer (``2130706433``), octal (``0177.0.0.1``), hex
  (``0x7f000001``), shortened (``127.1``), bracketed IPv6 with or without a
  zone id -- whose address ``blocked_reason`` rejects;
* it names a host whose resolution is empty, or contains *any* blocked address
  (one bad address refuses the whole URL: the connector might pick it).

Blocked addresses are everything that is not plainly public unicast: loopback,
private, link-local (including the ``169.254.169.254`` cloud metadata service),
CGNAT, "this network", IETF protocol assignments, documentation, benchmarking,
multicast, broadcast, reserved, and for IPv6 also every address that embeds or
tunnels to an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo),
unique-local, site-local and anything outside global unicast ``2000::/3``.
IPv4-mapped addresses are refused even when the embedded address is public.

Allow-listing is the operator's escape hatch (that is how tests reach a local
receiver): an entry is a host (``"127.0.0.1"``, ``"hooks.lan"``) or a
``host:port`` pair (``"127.0.0.1:8080"``, ``"[::1]:8080"``). An allow-listed host
may use ``http`` and may be (or resolve to) a blocked address; the match is on
the literal host text as written in the URL, so allow-listing ``127.0.0.1``
does not also allow ``2130706433`` or ``localhost``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna

from runbell.domain import limits
from runbell.domain.errors import UnsafeDestination

__all__ = [
    "IPAddress",
    "ParsedUrl",
    "Resolver",
    "Target",
    "blocked_reason",
    "check_url",
    "parse_host",
    "parse_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Order matters: the first matching network gives the reason.
_BLOCKED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/32"), "unspecified"),
    (_V4("0.0.0.0/8"), "reserved"),  # "this network"
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "cgnat"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local"),  # includes 169.254.169.254 (metadata)
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "reserved"),  # IETF protocol assignments
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("192.88.99.0/24"), "6to4"),  # 6to4 relay anycast
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "benchmarking"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("255.255.255.255/32"), "broadcast"),
    (_V4("240.0.0.0/4"), "reserved"),
)

_BLOCKED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("::ffff:0:0/96"), "ipv4-mapped"),
    (_V6("::ffff:0:0:0/96"), "ipv4-translated"),
    (_V6("::/96"), "ipv4-compatible"),
    (_V6("64:ff9b::/96"), "nat64"),
    (_V6("64:ff9b:1::/48"), "nat64"),
    (_V6("100::/64"), "discard"),
    (_V6("2001::/32"), "teredo"),
    (_V6("2001:2::/48"), "benchmarking"),
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("2002::/16"), "6to4"),
    (_V6("3fff::/20"), "documentation"),
    (_V6("fc00::/7"), "unique-local"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local"),
    (_V6("ff00::/8"), "multicast"),
)

_GLOBAL_UNICAST_V6 = _V6("2000::/3")

_LOCAL_NAMES = ("localhost",)
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa", ".localdomain")

_DEC = re.compile(r"[0-9]+", re.ASCII)
_OCT = re.compile(r"0[0-7]*", re.ASCII)  # "0" alone is octal zero
_HEX = re.compile(r"0[xX][0-9a-fA-F]*", re.ASCII)  # "0x" alone is zero (WHATWG)
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?", re.ASCII)


def _ipv4_number(part: str) -> int | None:
    """One dotted part as the WHATWG URL / inet_aton parsers read it, or None."""
    if _HEX.fullmatch(part):
        return int(part[2:] or "0", 16)
    if _OCT.fullmatch(part):
        return int(part, 8)
    if _DEC.fullmatch(part) and not part.startswith("0"):
        return int(part, 10)
    return None


def _parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # one trailing dot is allowed ("127.0.0.1.")
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None:
            return None
        numbers.append(number)
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, n in enumerate(leading):
        value += n << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _parse_ipv6(host: str) -> ipaddress.IPv6Address | None:
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" not in host:
        return None
    address, _, zone = host.partition("%")  # "fe80::1%eth0" or URL-encoded "%25eth0"
    if "%" in host and not zone:
        return None
    try:
        return ipaddress.IPv6Address(address)
    except ValueError:
        return None


def parse_host(host: str) -> IPAddress | None:
    """The address an IP-literal host denotes, in any accepted spelling; None for a name.

    Accepts dotted decimal, a single integer, octal and hex parts, shortened
    forms (``127.1``), a trailing dot, and IPv6 with or without brackets and
    zone id (the zone is dropped). Only ASCII digits count: ``int()`` would
    also accept other scripts' digits, underscores and whitespace.
    """
    host = host.strip().lower() if host.isascii() else host
    if not host.isascii() or not host:
        return None
    v6 = _parse_ipv6(host)
    if v6 is not None:
        return v6
    return _parse_ipv4(host)


def blocked_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be dialled (a short rule name), or None when it is public."""
    if isinstance(ip, ipaddress.IPv4Address):
        for network4, reason in _BLOCKED_V4:
            if ip in network4:
                return reason
    else:
        ip = ipaddress.IPv6Address(ip.packed)  # drop any zone id
        for network6, reason in _BLOCKED_V6:
            if ip in network6:
                return reason
        if ip not in _GLOBAL_UNICAST_V6:
            return "reserved"
    # Belt and braces: anything the stdlib does not consider global is refused too.
    if not ip.is_global:
        return "reserved"
    return None


@dataclass(frozen=True)
class Target:
    """A URL that passed the guard, with the only addresses it may be dialled at.

    ``host`` is the URL's host lower-cased (IDNA/punycode for non-ASCII names,
    no brackets for IPv6); ``addresses`` are IP literals in the order to try.
    """

    scheme: str
    host: str
    port: int
    path_and_query: str
    addresses: tuple[str, ...]


def _refuse(rule: str, detail: str, field: str | None = None) -> UnsafeDestination:
    # Details name the host, never the whole URL: webhook URLs often carry secrets
    # in their path or query, and errors end up in logs and problem documents.
    return UnsafeDestination(f"refused outbound URL ({rule}): {detail}", rule=rule, field=field)


def _is_allowed(host: str, port: int, allow_hosts: frozenset[str]) -> bool:
    names = {host, f"[{host}]"} if ":" in host else {host}
    allowed = {entry.strip().lower() for entry in allow_hosts}
    return any(name in allowed or f"{name}:{port}" in allowed for name in names)


def _ends_in_number(host: str) -> bool:
    """WHATWG "ends in a number": such a host is an IPv4 literal or invalid, never a name."""
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    last = labels[-1]
    return bool(_DEC.fullmatch(last) or _HEX.fullmatch(last))


def _normalise_name(host: str, field: str | None) -> str:
    """The ASCII (IDNA) form of a host name, as the HTTP client will send it; refuses
    what IDNA cannot encode, and A-labels (``xn--…``) that do not decode (the client
    decodes them lazily, so an invalid one would fail later, outside any check)."""
    bad = _refuse("invalid-host", f"{host!r} is not a valid host name", field)
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii").lower()
        except (UnicodeError, ValueError) as exc:
            raise bad from exc
    for label in host.split("."):
        if label.startswith("xn--"):
            try:
                idna.decode(label)
            except (UnicodeError, ValueError) as exc:
                raise bad from exc
    return host


def _check_syntax(host: str, field: str | None) -> None:
    """A host name's DNS syntax: labels of 1-63 letters, digits, ``-`` or ``_`` (not at
    either end), at most 253 characters (one trailing dot allowed)."""
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise _refuse("invalid-host", f"{host[:300]!r} is not a valid host name", field)


def _check_name(host: str, field: str | None) -> None:
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if name in _LOCAL_NAMES or name.endswith(_LOCAL_SUFFIXES):
        raise _refuse("local-name", f"{host!r} is a local-only name", field)
    if len(labels) == 1:
        raise _refuse("single-label", f"{host!r} is a bare single-label host name", field)


def _checked_addresses(host: str, answers: Sequence[str], *, enforce: bool) -> tuple[str, ...]:
    if not answers:
        raise _refuse("unresolved", f"{host!r} resolved to no address")
    checked: list[str] = []
    for answer in answers:
        ip = parse_host(answer)
        if ip is None:
            raise _refuse("bad-resolution", f"{host!r} resolved to non-address {answer!r}")
        reason = blocked_reason(ip) if enforce else None
        if reason is not None:
            raise _refuse(reason, f"{host!r} resolves to {ip} ({reason})")
        if str(ip) not in checked:
            checked.append(str(ip))
    return tuple(checked)


@dataclass(frozen=True)
class ParsedUrl:
    """An http(s) URL that parses, as every outbound check and client will read it.

    ``host`` is lower-cased ASCII (IDNA for non-ASCII names, no brackets for IPv6);
    ``raw_host`` as written; ``ip`` the address an IP-literal host denotes (None for a
    name, whose syntax is checked); ``port`` the explicit or default port."""

    scheme: str
    raw_host: str
    host: str
    port: int
    path_and_query: str
    ip: IPAddress | None


def parse_url(url: str, *, field: str | None = None) -> ParsedUrl:
    """The one parse step every URL-taking face shares (webhook endpoints, chat, push,
    state readers): refuses what does not parse, with ``UnsafeDestination`` naming the
    rule and, when given, the request ``field`` (a 422 naming it).

    Refused: not a string, over :data:`limits.URL` characters, spaces or control
    characters anywhere, no http(s) scheme, a bad port, userinfo, an empty host, a host
    that is not a valid DNS name or IP literal (labels over 63 characters, empty labels,
    names over 253 characters, invalid IDNA such as ``xn--localhost-``)."""
    if not isinstance(url, str) or not url.strip():
        raise _refuse("malformed", "the URL is empty", field)
    if len(url) > limits.URL:
        raise _refuse("malformed", f"the URL is longer than {limits.URL} characters", field)
    text = url.strip()
    authority = re.split(r"[/?#]", text.partition("//")[2], maxsplit=1)[0]
    if any(ch.isspace() or not ch.isprintable() for ch in authority):
        raise _refuse("invalid-host", "the host contains spaces or control characters", field)
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        raise _refuse("malformed", "the URL contains spaces or control characters", field)
    try:
        parts = urlsplit(text)
        port_given = parts.port
    except ValueError as exc:
        raise _refuse("malformed", f"cannot parse URL: {exc}", field) from exc

    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise _refuse("scheme", f"scheme {scheme[:20] or '(none)'!r} is not http(s)", field)
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise _refuse("userinfo", "credentials in the URL are not allowed", field)
    raw_host = parts.hostname or ""
    if not raw_host:
        raise _refuse("empty-host", "the URL has no host", field)

    port = port_given if port_given is not None else (443 if scheme == "https" else 80)
    if port == 0:
        raise _refuse("malformed", "port 0 cannot be dialled", field)
    host = _normalise_name(raw_host, field)
    path_and_query = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    ip = parse_host(host)
    if ip is None:
        if ":" in host or "%" in host or _ends_in_number(host):
            raise _refuse(
                "invalid-host", f"{host[:300]!r} is not a valid IP address or host name", field
            )
        _check_syntax(host, field)
    return ParsedUrl(
        scheme=scheme,
        raw_host=raw_host,
        host=host,
        port=port,
        path_and_query=path_and_query,
        ip=ip,
    )


def check_url(
    url: str, *, allow_hosts: frozenset[str], resolve: Resolver, field: str | None = None
) -> Target:
    """Check ``url`` against the SSRF rules; return where it may be dialled, or raise.

    ``url`` is parsed by :func:`parse_url` first. ``resolve(host, port)`` is called once,
    only for host names (never for IP literals); whatever it raises (e.g. ``OSError``
    for a failed lookup) propagates unchanged, since a lookup failure is a network
    error, not a verdict on the destination. Raises ``UnsafeDestination`` naming the
    rule (and ``field``, when given).
    """
    parsed = parse_url(url, field=field)
    scheme, host, port, ip = parsed.scheme, parsed.host, parsed.port, parsed.ip
    allowed = _is_allowed(host, port, allow_hosts) or _is_allowed(
        parsed.raw_host, port, allow_hosts
    )
    if scheme == "http" and not allowed:
        raise _refuse("https-only", f"plain http to {host!r} is not allowed", field)

    if ip is not None:
        reason = None if allowed else blocked_reason(ip)
        if reason is not None:
            raise _refuse(reason, f"{host!r} is the address {ip} ({reason})", field)
        addresses: tuple[str, ...] = (str(ip),)
    else:
        if not allowed:
            _check_name(host, field)
        addresses = _checked_addresses(host, resolve(host, port), enforce=not allowed)

    return Target(
        scheme=scheme,
        host=host,
        port=port,
        path_and_query=parsed.path_and_query,
        addresses=addresses,
    )
