"""The pure rules behind /mcp's Host and Origin check and the failed-authentication
limit (runbell.domain.origins, runbell.domain.throttle)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from runbell.config import Settings, setting_problems
from runbell.domain.origins import Guard, parse_authority, parse_origin
from runbell.domain.throttle import address_key, credential_prefix, verdict

SERVER = ("127.0.0.1", 8080)


@pytest.mark.parametrize(
    ("host", "origin", "ok"),
    [
        ("127.0.0.1:8080", None, True),
        ("localhost:8080", None, True),
        ("LOCALHOST:8080", "http://localhost:8080", True),
        ("runbell.example.com", "https://runbell.example.com", True),
        ("runbell.example.com:443", None, True),
        ("runbell.example.com.", None, True),
        ("runbell.example.com:8443", None, False),
        ("127.0.0.1:8081", None, False),
        ("evil.example", None, False),
        ("127.0.0.1:8080", "null", False),
        ("127.0.0.1:8080", "http://evil.example", False),
        ("127.0.0.1:8080", "http://localhost:6274", True),  # allow-listed origin
        ("127.0.0.1:8080", "http://localhost:6274/path", False),
        ("127.0.0.1:8080", "file://", False),
        ("internal.example:9999", None, True),  # host:* in the allow-list
        ("[::1]:8080", None, False),  # the socket is 127.0.0.1, not ::1
        ("a:b:c", None, False),
        ("", None, False),
        (None, None, True),  # no Host at all: nothing to be rebound
    ],
)
def test_the_guard(host: str | None, origin: str | None, ok: bool) -> None:
    guard = Guard.of(
        "https://runbell.example.com",
        hosts=["internal.example:*"],
        origins=["http://localhost:6274"],
    )
    assert (guard.refusal(host, origin, SERVER) is None) is ok


def test_an_ipv6_socket_and_its_loopback_name() -> None:
    guard = Guard.of("http://127.0.0.1:8080", (), ())
    assert guard.refusal("[::1]:9000", None, ("::1", 9000)) is None
    assert guard.refusal("localhost:9000", None, ("::1", 9000)) is None
    assert guard.refusal("[::2]:9000", None, ("::1", 9000)) is not None


def test_parsing() -> None:
    assert parse_authority("Example.COM:80") is not None
    assert parse_authority("example.com:0") is None
    assert parse_authority("example.com:99999") is None
    assert parse_authority("example.com:*") is None
    assert parse_authority("example.com:*", wildcard=True) is not None
    assert parse_origin("null") is None
    assert parse_origin("https://a.example:8443") is not None
    assert parse_origin("ftp://a.example") is None


def test_bad_allow_list_entries_are_one_line_per_setting() -> None:
    with pytest.raises(ValidationError) as bad:
        Settings(mcp_allowed_hosts="ok.example,bad host", mcp_allowed_origins="localhost:6274")
    lines = setting_problems(bad.value)
    assert any(line.startswith("RUNBELL_MCP_ALLOWED_HOSTS: ") for line in lines)
    assert any(line.startswith("RUNBELL_MCP_ALLOWED_ORIGINS: ") for line in lines)
    parsed = Settings(mcp_allowed_hosts='["a.example:*", "b.example"]')
    assert parsed.mcp_allowed_hosts == {"a.example:*", "b.example"}


def test_verdicts() -> None:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    at = t0 + timedelta(seconds=15.2)
    assert not verdict(20, window_start=t0, now=at, burst=20, window_s=60).throttled
    over = verdict(21, window_start=t0, now=at, burst=20, window_s=60)
    assert over.throttled and over.first_over and over.retry_after_s == 45
    later = verdict(22, window_start=t0, now=t0 + timedelta(seconds=60), burst=20, window_s=60)
    assert later.throttled and not later.first_over and later.retry_after_s == 1


def test_keys_never_hold_a_secret() -> None:
    assert credential_prefix("rbk_Ab3dEFGH" + "x" * 30) == "rbk_Ab3d"
    assert credential_prefix("rbu_zz") == "rbu_zz"
    assert credential_prefix("ghp_secretsecret") == "other"
    assert address_key("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64"
    assert address_key("::ffff:192.0.2.1") == "192.0.2.1"
    assert address_key("192.0.2.1") == "192.0.2.1"
    assert address_key(None) == "unknown"
