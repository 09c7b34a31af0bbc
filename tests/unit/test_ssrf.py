"""The SSRF guard refuses every hostile destination, in every spelling, and names the rule."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.errors import UnsafeDestination
from runbell.domain.ssrf import Target, blocked_reason, check_url, parse_host

NO_ALLOW: frozenset[str] = frozenset()


def no_dns(host: str, port: int) -> Sequence[str]:
    raise AssertionError(f"IP literals and refused names must not be resolved ({host}:{port})")


def fake_dns(table: dict[str, list[str]]) -> Callable[[str, int], Sequence[str]]:
    def resolve(host: str, port: int) -> Sequence[str]:
        return table[host]

    return resolve


DNS = fake_dns(
    {
        "example.com": ["93.184.216.34"],
        "internal-db.example.com": ["10.0.0.5"],
        "split.example.com": ["93.184.216.34", "192.168.0.7"],
        "rebind.example.com": ["2606:2800:220:1:248:1893:25c8:1946", "::ffff:127.0.0.1"],
        "metadata.example.com": ["169.254.169.254"],
        "v6loop.example.com": ["::1"],
        "nothing.example.com": [],
    }
)

# (url, expected rule)
HOSTILE: list[tuple[str, str]] = [
    # private ranges
    ("https://10.0.0.1/", "private"),
    ("https://172.16.5.4/", "private"),
    ("https://192.168.1.1/", "private"),
    # local names
    ("https://localhost/", "local-name"),
    ("https://localhost./", "local-name"),
    ("https://foo.localhost/", "local-name"),
    ("https://printer.local/", "local-name"),
    ("https://metadata.google.internal/", "local-name"),
    ("https://intranet/", "single-label"),
    # loopback, in every spelling
    ("https://127.0.0.1/", "loopback"),
    ("https://127.1/", "loopback"),
    ("https://127.0.1/", "loopback"),
    ("https://2130706433/", "loopback"),
    ("https://0x7f000001/", "loopback"),
    ("https://0x7f.0.0.1/", "loopback"),
    ("https://0177.0.0.1/", "loopback"),
    ("https://017700000001/", "loopback"),
    ("https://127.0.0.1./", "loopback"),
    ("https://0.0.0.0/", "unspecified"),
    ("https://0/", "unspecified"),
    ("https://[::1]/", "loopback"),
    ("https://[::]/", "unspecified"),
    # IPv6 forms that carry or tunnel to an IPv4 address
    ("https://[::ffff:127.0.0.1]/", "ipv4-mapped"),
    ("https://[::ffff:7f00:1]/", "ipv4-mapped"),
    ("https://[::ffff:8.8.8.8]/", "ipv4-mapped"),  # mapped is refused even when public
    ("https://[::127.0.0.1]/", "ipv4-compatible"),
    ("https://[64:ff9b::7f00:1]/", "nat64"),
    ("https://[64:ff9b:1::1]/", "nat64"),
    ("https://[2002:7f00:1::]/", "6to4"),
    ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "teredo"),
    # other IPv6 special ranges
    ("https://[fe80::1]/", "link-local"),
    ("https://[fe80::1%25eth0]/", "link-local"),
    ("https://[fc00::1]/", "unique-local"),
    ("https://[fd12:3456::1]/", "unique-local"),
    ("https://[fec0::1]/", "site-local"),
    ("https://[ff02::1]/", "multicast"),
    ("https://[2001:db8::1]/", "documentation"),
    ("https://[2001:2::1]/", "benchmarking"),
    ("https://[100::1]/", "discard"),
    # other IPv4 special ranges
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://100.64.0.1/", "cgnat"),
    ("https://198.18.0.1/", "benchmarking"),
    ("https://224.0.0.1/", "multicast"),
    ("https://255.255.255.255/", "broadcast"),
    ("https://240.0.0.1/", "reserved"),
    ("https://192.0.0.8/", "reserved"),
    ("https://192.0.2.1/", "documentation"),
    ("https://198.51.100.7/", "documentation"),
    ("https://203.0.113.9/", "documentation"),
    ("https://192.88.99.1/", "6to4"),
    # names whose resolution is hostile
    ("https://internal-db.example.com/", "private"),
    ("https://split.example.com/", "private"),
    ("https://rebind.example.com/", "ipv4-mapped"),
    ("https://metadata.example.com/", "link-local"),
    ("https://v6loop.example.com/", "loopback"),
    ("https://nothing.example.com/", "unresolved"),
    # scheme, userinfo, malformed
    ("http://example.com/", "https-only"),
    ("ftp://example.com/file", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("gopher://example.com/", "scheme"),
    ("example.com/hook", "scheme"),
    ("https://user@example.com/", "userinfo"),
    ("https://user:pw@example.com/", "userinfo"),
    ("https://example.com\\@127.0.0.1/", "userinfo"),
    ("https:///path-only", "empty-host"),
    ("https://[::1/", "malformed"),
    ("https://example.com:99999/", "malformed"),
    ("https://1.2.3.999/", "invalid-host"),
    ("https://1.2.3.4.5/", "invalid-host"),
    ("https://example.0x10/", "invalid-host"),
    ("https://%31%32%37.0.0.1/", "invalid-host"),
    ("https://127.0.0.1\\.example.com/", "invalid-host"),
    ("https://exa mple.com/", "invalid-host"),
    # fullwidth digits, ideographic full stops, fullwidth letters: IDNA maps them to ASCII
    ("https://\uff11\uff12\uff17\u3002\uff10\u3002\uff10\u3002\uff11/", "loopback"),
    ("https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/", "local-name"),
]


@pytest.mark.parametrize(("url", "rule"), HOSTILE, ids=[url for url, _ in HOSTILE])
def test_hostile_destination_is_refused_with_its_rule(url: str, rule: str) -> None:
    with pytest.raises(UnsafeDestination) as caught:
        check_url(url, allow_hosts=NO_ALLOW, resolve=DNS)
    assert caught.value.extra["rule"] == rule
    assert f"({rule})" in caught.value.detail


def test_there_are_at_least_thirty_hostile_cases() -> None:
    assert len(HOSTILE) >= 30


def test_ip_literals_are_never_resolved() -> None:
    for url in ("https://127.1/", "https://[::1]/", "https://0x7f000001/"):
        with pytest.raises(UnsafeDestination):
            check_url(url, allow_hosts=NO_ALLOW, resolve=no_dns)


def test_public_https_hostname_is_allowed_and_pinned_to_checked_address() -> None:
    target = check_url("https://Example.COM/hooks/run?x=1#frag", allow_hosts=NO_ALLOW, resolve=DNS)
    assert target == Target(
        scheme="https",
        host="example.com",
        port=443,
        path_and_query="/hooks/run?x=1",
        addresses=("93.184.216.34",),
    )


def test_public_ipv6_literal_is_allowed() -> None:
    target = check_url(
        "https://[2606:2800:220:1:248:1893:25c8:1946]:8443", allow_hosts=NO_ALLOW, resolve=no_dns
    )
    assert target.addresses == ("2606:2800:220:1:248:1893:25c8:1946",)
    assert target.port == 8443
    assert target.path_and_query == "/"


@pytest.mark.parametrize(
    ("url", "allow"),
    [
        ("http://127.0.0.1:8080/hook", "127.0.0.1"),
        ("http://127.0.0.1:8080/hook", "127.0.0.1:8080"),
        ("http://[::1]:8080/hook", "[::1]:8080"),
        ("http://[::1]:8080/hook", "::1"),
    ],
)
def test_allow_listed_loopback_over_http_is_allowed(url: str, allow: str) -> None:
    target = check_url(url, allow_hosts=frozenset({allow}), resolve=no_dns)
    assert target.scheme == "http"
    assert target.port == 8080
    assert target.addresses in (("127.0.0.1",), ("::1",))


def test_allow_listed_name_may_resolve_to_loopback() -> None:
    resolve = fake_dns({"receiver.test": ["127.0.0.1"]})
    target = check_url(
        "http://receiver.test:9000/", allow_hosts=frozenset({"receiver.test:9000"}), resolve=resolve
    )
    assert target.addresses == ("127.0.0.1",)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8081/",  # another port than the allow-listed one
        "http://2130706433:8080/",  # the same address spelled differently
        "http://localhost:8080/",  # a name for it
        "http://127.0.0.2:8080/",  # a neighbour
    ],
)
def test_allow_list_is_exact(url: str) -> None:
    with pytest.raises(UnsafeDestination):
        check_url(url, allow_hosts=frozenset({"127.0.0.1:8080"}), resolve=no_dns)


def test_resolver_errors_propagate_as_network_errors() -> None:
    def failing(host: str, port: int) -> Sequence[str]:
        raise OSError("temporary failure in name resolution")

    with pytest.raises(OSError, match="temporary failure"):
        check_url("https://example.com/", allow_hosts=NO_ALLOW, resolve=failing)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F.0.0.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0", "0.0.0.0"),  # noqa: S104
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("[fe80::1%25eth0]", "fe80::1"),
        ("fe80::1%eth0", "fe80::1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("example.com", None),
        ("1.2.3.999", None),
        ("1.2.3.4.5", None),
        ("08.0.0.1", None),
        ("1_0.0.0.1", None),
        ("\uff11\uff12\uff17.0.0.1", None),  # non-ASCII digits are not digits to a resolver
        ("256.1", None),
        ("4294967296", None),
        ("[not-v6]", None),
        ("", None),
    ],
)
def test_parse_host(host: str, expected: str | None) -> None:
    ip = parse_host(host)
    assert (None if ip is None else str(ip)) == expected


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450::1"]
)
def test_public_addresses_are_not_blocked(address: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) is None


BLOCKED_V4 = [
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "255.255.255.255/32",
    )
]


@st.composite
def blocked_ipv4(draw: st.DrawFn) -> ipaddress.IPv4Address:
    network = draw(st.sampled_from(BLOCKED_V4))
    first = int(network.network_address)
    return ipaddress.IPv4Address(draw(st.integers(first, first + network.num_addresses - 1)))


def spellings(ip: ipaddress.IPv4Address) -> list[str]:
    octets = ip.packed
    value = int(ip)
    return [
        str(ip),
        str(value),
        hex(value),
        f"0X{value:X}",
        f"0{value:o}",
        ".".join(f"0{o:o}" for o in octets),
        ".".join(hex(o) for o in octets),
        f"{octets[0]}.{int.from_bytes(octets[1:], 'big')}",
        f"{octets[0]}.{octets[1]}.{int.from_bytes(octets[2:], 'big')}",
        f"{ip}.",
        f"[::ffff:{ip}]",
    ]


@given(blocked_ipv4())
def test_every_spelling_of_a_blocked_ipv4_is_refused(ip: ipaddress.IPv4Address) -> None:
    assert blocked_reason(ip) is not None
    for host in spellings(ip):
        assert parse_host(host) is not None, host
        with pytest.raises(UnsafeDestination):
            check_url(f"https://{host}/", allow_hosts=NO_ALLOW, resolve=no_dns)


@given(blocked_ipv4())
def test_a_name_resolving_to_a_blocked_ipv4_is_refused(ip: ipaddress.IPv4Address) -> None:
    resolve = fake_dns({"hooks.example.com": ["93.184.216.34", str(ip)]})
    with pytest.raises(UnsafeDestination):
        check_url("https://hooks.example.com/", allow_hosts=NO_ALLOW, resolve=resolve)
