"""Standard Webhooks verification: tolerance, rotation, multi-signature headers, errors."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook

from runbell.domain.errors import Unauthorized
from runbell.signatures import new_secret, sign_headers, verify_signed

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
BODY = b'{"run_id":"r-1","state":"completed"}'
OLD_SECRET = "whsec_" + base64.b64encode(b"o" * 24).decode()
NEW_SECRET = "whsec_" + base64.b64encode(b"n" * 24).decode()


def library_headers(secret: str, at: datetime, msg_id: str = "msg_1", body: bytes = BODY):
    """Headers produced by the reference library, independent of our own signer."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body.decode()),
    }


def test_library_signed_request_verifies():
    verify_signed(BODY, library_headers(NEW_SECRET, NOW), [NEW_SECRET], now=NOW)


def test_header_names_are_case_insensitive():
    headers = {k.upper(): v for k, v in library_headers(NEW_SECRET, NOW).items()}
    verify_signed(BODY, headers, [NEW_SECRET], now=NOW)
    mixed = {k.title(): v for k, v in library_headers(NEW_SECRET, NOW).items()}
    verify_signed(BODY, mixed, [NEW_SECRET], now=NOW)


def test_bad_signature_is_unauthorized():
    headers = library_headers(NEW_SECRET, NOW)
    headers["webhook-signature"] = "v1," + base64.b64encode(b"x" * 32).decode()
    with pytest.raises(Unauthorized) as info:
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW)
    assert info.value.detail == "no signature matched"


def test_wrong_secret_is_unauthorized():
    with pytest.raises(Unauthorized, match="no signature matched"):
        verify_signed(BODY, library_headers(OLD_SECRET, NOW), [NEW_SECRET], now=NOW)


def test_tampered_body_is_unauthorized():
    headers = library_headers(NEW_SECRET, NOW)
    with pytest.raises(Unauthorized, match="no signature matched"):
        verify_signed(BODY.replace(b"completed", b"failed"), headers, [NEW_SECRET], now=NOW)


def test_tampered_id_is_unauthorized():
    headers = library_headers(NEW_SECRET, NOW)
    headers["webhook-id"] = "msg_2"
    with pytest.raises(Unauthorized, match="no signature matched"):
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW)


@pytest.mark.parametrize("age", [timedelta(minutes=6), timedelta(minutes=-6)])
def test_timestamp_outside_tolerance_is_unauthorized(age):
    headers = library_headers(NEW_SECRET, NOW - age)
    with pytest.raises(Unauthorized) as info:
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW)
    assert info.value.detail == "timestamp outside the 5 minute tolerance"


@pytest.mark.parametrize("age", [timedelta(minutes=4), timedelta(minutes=-4), timedelta(minutes=5)])
def test_timestamp_within_tolerance_verifies(age):
    verify_signed(BODY, library_headers(NEW_SECRET, NOW - age), [NEW_SECRET], now=NOW)


def test_custom_tolerance():
    headers = library_headers(NEW_SECRET, NOW - timedelta(seconds=31))
    with pytest.raises(Unauthorized, match="30 second tolerance"):
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW, tolerance_s=30)
    verify_signed(BODY, headers, [NEW_SECRET], now=NOW, tolerance_s=60)


def test_expired_timestamp_is_rejected_even_with_a_genuine_signature():
    # A captured request replayed later must fail on time, not be accepted.
    headers = library_headers(NEW_SECRET, NOW)
    with pytest.raises(Unauthorized, match="tolerance"):
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW + timedelta(hours=1))


def test_rotation_old_secret_still_verifies():
    headers = library_headers(OLD_SECRET, NOW)
    verify_signed(BODY, headers, [NEW_SECRET, OLD_SECRET], now=NOW)


def test_second_of_two_signatures_matches():
    headers = library_headers(NEW_SECRET, NOW)
    stale = Webhook(OLD_SECRET).sign("msg_1", NOW, BODY.decode())
    headers["webhook-signature"] = f"{stale} {headers['webhook-signature']}"
    verify_signed(BODY, headers, [NEW_SECRET], now=NOW)


def test_malformed_and_other_version_entries_do_not_hide_a_good_one():
    headers = library_headers(NEW_SECRET, NOW)
    good = headers["webhook-signature"]
    headers["webhook-signature"] = f"garbage v1a,AAAA v1,not*base64 v2,{good[3:]}  {good}"
    verify_signed(BODY, headers, [NEW_SECRET], now=NOW)


def test_only_v1_entries_count():
    headers = library_headers(NEW_SECRET, NOW)
    headers["webhook-signature"] = headers["webhook-signature"].replace("v1,", "v2,")
    with pytest.raises(Unauthorized, match="no signature matched"):
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW)


@pytest.mark.parametrize("header", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header_is_named(header):
    headers = library_headers(NEW_SECRET, NOW)
    del headers[header]
    with pytest.raises(Unauthorized) as info:
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW)
    assert info.value.detail == f"missing {header} header"


def test_empty_header_counts_as_missing():
    headers = library_headers(NEW_SECRET, NOW)
    headers["webhook-id"] = ""
    with pytest.raises(Unauthorized, match="missing webhook-id header"):
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW)


def test_all_missing_headers_are_named():
    with pytest.raises(Unauthorized) as info:
        verify_signed(BODY, {}, [NEW_SECRET], now=NOW)
    assert info.value.detail == "missing webhook-id, webhook-timestamp, webhook-signature headers"


@pytest.mark.parametrize("value", ["abc", "1717243200.5", "nan", "-5", "1e9"])
def test_non_integer_timestamp_is_unauthorized(value):
    headers = library_headers(NEW_SECRET, NOW)
    headers["webhook-timestamp"] = value
    with pytest.raises(Unauthorized, match="invalid webhook-timestamp"):
        verify_signed(BODY, headers, [NEW_SECRET], now=NOW)


def test_no_secrets_configured_is_unauthorized():
    with pytest.raises(Unauthorized, match="no signing secret"):
        verify_signed(BODY, library_headers(NEW_SECRET, NOW), [], now=NOW)


def test_non_utf8_body_is_unauthorized():
    headers = library_headers(NEW_SECRET, NOW)
    with pytest.raises(Unauthorized, match="UTF-8"):
        verify_signed(b"\xff\xfe", headers, [NEW_SECRET], now=NOW)


def test_naive_now_is_a_programming_error():
    with pytest.raises(ValueError, match="timezone-aware"):
        verify_signed(
            BODY, library_headers(NEW_SECRET, NOW), [NEW_SECRET], now=datetime(2025, 6, 1)
        )


def test_malformed_configured_secret_is_a_server_error_not_a_401():
    with pytest.raises(ValueError, match="secret") as info:
        verify_signed(BODY, library_headers(NEW_SECRET, NOW), ["whsec_"], now=NOW)
    assert not isinstance(info.value, Unauthorized)


def test_sign_headers_verifies_with_the_library_at_real_time():
    secret = new_secret()
    now = datetime.now(tz=UTC)
    headers = sign_headers(BODY, secret, "msg_out_1", now)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert headers["webhook-id"] == "msg_out_1"
    assert Webhook(secret).verify(BODY, headers) == {"run_id": "r-1", "state": "completed"}
    verify_signed(BODY, headers, [secret])


def test_sign_headers_converts_non_utc_datetimes():
    # The library stamps a datetime as UTC without converting it; we must convert.
    plus_two = NOW.astimezone(timezone(timedelta(hours=2)))
    headers = sign_headers(BODY, NEW_SECRET, "msg_1", plus_two)
    assert headers["webhook-timestamp"] == str(int(NOW.timestamp()))
    assert headers == library_headers(NEW_SECRET, NOW)


def test_sign_headers_rejects_naive_datetimes():
    with pytest.raises(ValueError, match="timezone-aware"):
        sign_headers(BODY, NEW_SECRET, "msg_1", datetime(2025, 6, 1, 12))


def test_new_secret_shape():
    first, second = new_secret(), new_secret()
    assert first != second
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"), validate=True)) == 24
    Webhook(first)  # the library accepts it


@given(
    body=st.text().map(str.encode),
    msg_id=st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40
    ),
    offset_s=st.integers(min_value=-300, max_value=300),
    key=st.binary(min_size=16, max_size=64),
)
def test_sign_then_verify_round_trip(body, msg_id, offset_s, key):
    secret = "whsec_" + base64.b64encode(key).decode()
    headers = sign_headers(body, secret, msg_id, NOW + timedelta(seconds=offset_s))
    verify_signed(body, headers, [new_secret(), secret], now=NOW)
    with pytest.raises(Unauthorized):
        verify_signed(body + b" ", headers, [secret], now=NOW)
