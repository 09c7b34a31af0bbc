"""The web push channel against a real push service and browser on 127.0.0.1.

Every push here is really signed, encrypted, sent, verified and decrypted
(``tests/channels/push_receiver.py``); nothing in pywebpush is mocked.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from runbell.channels.base import (
    DeliveryError,
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from runbell.channels.webpush import (
    MAX_PAYLOAD_BYTES,
    GuardedWebPush,
    VapidKeys,
    WebPushChannel,
    collapse_topic,
    encode_payload,
    push_payload,
)
from tests.channels.push_receiver import PushReceiver, flat_target, refused_endpoint
from tests.channels.rebinding import Trap, TwoFacedDNS
from tests.timeouts import WAIT

NOW = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
SUBJECT = "mailto:ops@runbell.example"
POINTER_FIELDS = {"v", "id", "tag", "title", "body", "url", "urgency", "require_interaction", "ts"}
SECRET = "PLANTED-SECRET-7f3a9c"  # a marker to search for in what was sent


def outbound(target: dict[str, Any], **overrides: Any) -> Outbound:
    fields: dict[str, Any] = {
        "delivery_id": "dlv_01",
        "tenant_id": "ten_01",
        "channel": "webpush",
        "destination": "psub_01",
        "identity": "dlv_01",
        "attempt_no": 1,
        "now": NOW,
        "urgency": "normal",
        "title": "Runbell",
        "body": "A run needs your input",
        "deep_link": "https://runbell.example/n/ntf_01",
        "notification_id": "ntf_01",
        "run_id": "run_01",
        "collapse_key": "ten_01:run_01",
        "target": target,
    }
    fields.update(overrides)
    return Outbound(**fields)


@pytest.fixture(scope="module")
def keys() -> VapidKeys:
    return VapidKeys.generate()


@pytest.fixture
def receiver(keys: VapidKeys) -> Iterator[PushReceiver]:
    with PushReceiver(expected_vapid_key=keys.public_key) as push:
        yield push


@pytest.fixture
def channel(keys: VapidKeys) -> WebPushChannel:
    return WebPushChannel(keys, SUBJECT, timeout=WAIT)


@pytest.fixture
def target(receiver: PushReceiver) -> dict[str, str]:
    return flat_target(receiver.new_subscription())


def secret_path(target: dict[str, str]) -> str:
    return urlsplit(target["endpoint"]).path


def assert_no_endpoint(err: DeliveryError, target: dict[str, str]) -> None:
    """The endpoint is a capability URL: neither it nor its path may leak via the error."""
    rendered = "".join(traceback.format_exception(err))
    for text in (str(err), err.detail, err.response_excerpt or "", rendered):
        assert secret_path(target) not in text
    assert f"{urlsplit(target['endpoint']).hostname}" in err.detail  # the host is fine, useful


# --- what arrives -------------------------------------------------------------------------


async def test_push_is_decrypted_by_the_subscriber_and_is_only_the_pointer(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    sent = await channel.send(outbound(target))

    (got,) = receiver.received
    assert receiver.rejected == []
    assert got.path == secret_path(target)
    assert got.headers["content-encoding"] == "aes128gcm"
    assert set(got.payload) == POINTER_FIELDS
    assert got.payload == {
        "v": 1,
        "id": "ntf_01",
        "tag": collapse_topic("ten_01:run_01"),
        "title": "Runbell",
        "body": "A run needs your input",
        "url": "https://runbell.example/n/ntf_01",
        "urgency": "normal",
        "require_interaction": False,
        "ts": int(NOW.timestamp()),
    }
    assert sent.status_code == 201
    assert sent.provider_message_id == got.location


@pytest.mark.parametrize(
    ("urgency", "header", "interrupting"),
    [
        ("low", "low", False),
        ("normal", "normal", False),
        ("time_sensitive", "high", True),
        ("urgent", "high", True),
    ],
)
async def test_urgency_header_and_require_interaction_follow_the_attention_urgency(
    channel: WebPushChannel,
    receiver: PushReceiver,
    target: dict[str, str],
    urgency: str,
    header: str,
    interrupting: bool,
) -> None:
    await channel.send(outbound(target, urgency=urgency))

    (got,) = receiver.received
    assert got.urgency == header
    assert got.payload["urgency"] == urgency
    assert got.payload["require_interaction"] is interrupting


@pytest.mark.parametrize("urgency", ["time_sensitive", "urgent"])
async def test_ttl_of_an_interrupting_message_lasts_until_its_request_expires(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str], urgency: str
) -> None:
    msg = outbound(target, urgency=urgency, expires_at=NOW + timedelta(minutes=20, seconds=34))

    await channel.send(msg)

    (got,) = receiver.received
    assert got.headers["ttl"] == "1234"
    assert got.ttl == 1234


async def test_ttl_is_at_least_a_minute_even_when_expiry_is_imminent(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    await channel.send(outbound(target, urgency="urgent", expires_at=NOW + timedelta(seconds=5)))

    assert receiver.received[0].ttl == 60


async def test_ttl_is_the_default_for_other_messages_even_with_an_expiry(
    keys: VapidKeys, receiver: PushReceiver, target: dict[str, str]
) -> None:
    channel = WebPushChannel(keys, SUBJECT, default_ttl_s=7200)

    await channel.send(outbound(target, urgency="normal", expires_at=NOW + timedelta(minutes=5)))
    await channel.send(outbound(target, urgency="urgent"))  # no expiry: default too

    assert [r.ttl for r in receiver.received] == [7200, 7200]


async def test_topic_is_the_collapse_topic_and_equal_for_the_same_collapse_key(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    await channel.send(outbound(target, notification_id="ntf_01", collapse_key="run-key"))
    await channel.send(outbound(target, notification_id="ntf_02", collapse_key="run-key"))
    await channel.send(outbound(target, notification_id="ntf_03", collapse_key="other-run"))

    first, second, other = receiver.received
    assert first.topic == second.topic == collapse_topic("run-key")
    assert other.topic == collapse_topic("other-run") != first.topic
    assert [r.payload["tag"] for r in receiver.received] == [r.topic for r in receiver.received]


async def test_topic_falls_back_to_the_notification_id(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    await channel.send(outbound(target, collapse_key=None, notification_id="ntf_77"))

    assert receiver.received[0].topic == collapse_topic("ntf_77")


@pytest.mark.parametrize("key", ["", "x", "ten_01:run_01", "ü" * 1000])
def test_collapse_topic_is_32_base64url_characters(key: str) -> None:
    topic = collapse_topic(key)

    assert len(topic) == 32
    assert set(topic) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert collapse_topic(key) == topic


async def test_vapid_jwt_is_verified_and_signed_with_the_channel_key(
    channel: WebPushChannel, keys: VapidKeys, receiver: PushReceiver, target: dict[str, str]
) -> None:
    await channel.send(outbound(target))

    (got,) = receiver.received
    assert got.headers["authorization"].startswith("vapid t=")
    assert got.vapid_key == keys.public_key == channel.public_key
    assert got.vapid_claims["aud"] == receiver.origin
    assert got.vapid_claims["sub"] == SUBJECT
    assert time.time() < got.vapid_claims["exp"] <= time.time() + 24 * 3600
    assert "crypto-key" not in got.headers  # RFC 8292 "vapid" scheme, not the draft one


async def test_each_push_gets_the_audience_of_its_own_push_service(
    channel: WebPushChannel, keys: VapidKeys
) -> None:
    # One channel serves every subscriber; claims reused between calls would carry the
    # first service's aud to the second, which rejects the push.
    with (
        PushReceiver(expected_vapid_key=keys.public_key) as first,
        PushReceiver(expected_vapid_key=keys.public_key) as second,
    ):
        await channel.send(outbound(flat_target(first.new_subscription())))
        await channel.send(outbound(flat_target(second.new_subscription())))

        assert first.received[0].vapid_claims["aud"] == first.origin
        assert second.received[0].vapid_claims["aud"] == second.origin
        assert first.rejected == second.rejected == []


async def test_proxy_environment_is_ignored(
    channel: WebPushChannel,
    receiver: PushReceiver,
    target: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead_proxy = refused_endpoint().rsplit("/push/", 1)[0]
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, dead_proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    await channel.send(outbound(target))

    assert len(receiver.received) == 1


# --- what stays out -------------------------------------------------------------------------


async def test_a_secret_outside_the_pointer_never_reaches_the_push(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    msg = outbound(
        {**target, "note": SECRET},
        run_id=f"run-{SECRET}",
        collapse_key=f"key-{SECRET}",
        event_type=f"run.{SECRET}",
        destination=f"dest-{SECRET}",
        tenant_id=f"ten-{SECRET}",
        payload={"objective": SECRET, "nested": {"output": SECRET}},
    )

    await channel.send(msg)

    (got,) = receiver.received
    assert SECRET.encode() not in got.plaintext
    assert all(SECRET not in value for value in got.headers.values())
    assert set(got.payload) == POINTER_FIELDS


@pytest.mark.parametrize("char", ["a", "é", "語", "😀"])
async def test_a_maximal_neutral_title_and_body_fit_well_under_3_kb(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str], char: str
) -> None:
    # Neutral summaries are at most 300 characters (notifications.summary); the worst
    # case is 4 UTF-8 bytes per character, which \\u escapes would have tripled.
    msg = outbound(
        target,
        title=char * 300,
        body=char * 300,
        urgency="time_sensitive",
        deep_link="https://runbell.example/n/ntf_01jd0000000000000000000000",
        notification_id="ntf_01jd0000000000000000000000",
    )
    size = len(encode_payload(push_payload(msg)).encode())

    await channel.send(msg)

    assert size < MAX_PAYLOAD_BYTES == 3072
    (got,) = receiver.received
    assert len(got.plaintext) == size
    assert got.payload["title"] == char * 300


async def test_an_oversized_payload_is_refused_before_sending(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound(target, body="x" * 3100))

    assert not caught.value.gone and not caught.value.operator_alert
    assert receiver.received == [] and receiver.rejected == []


# --- what the push service says ------------------------------------------------------------


async def test_unknown_subscription_404_is_gone(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    never_subscribed = {**target, "endpoint": f"{receiver.origin}/push/never-subscribed-token"}

    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound(never_subscribed))

    assert caught.value.gone and caught.value.status_code == 404
    assert_no_endpoint(caught.value, never_subscribed)


async def test_unsubscribed_410_is_gone(channel: WebPushChannel, receiver: PushReceiver) -> None:
    subscription = receiver.new_subscription()
    receiver.unsubscribe(subscription)

    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound(flat_target(subscription)))

    assert caught.value.gone and caught.value.status_code == 410
    assert not caught.value.operator_alert


async def test_a_push_signed_with_another_vapid_key_403_alerts_the_operator(
    target: dict[str, str], receiver: PushReceiver
) -> None:
    rotated = WebPushChannel(VapidKeys.generate(), SUBJECT)  # not the key browsers know

    with pytest.raises(PermanentDeliveryError) as caught:
        await rotated.send(outbound(target))

    assert caught.value.operator_alert and not caught.value.gone
    assert caught.value.status_code == 403
    assert receiver.received == []


async def test_429_is_transient_and_honours_retry_after(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    receiver.respond_next(429, headers={"Retry-After": "30"})

    with pytest.raises(TransientDeliveryError) as caught:
        await channel.send(outbound(target))

    assert caught.value.retry_after_s == 30
    assert caught.value.status_code == 429


async def test_429_retry_after_as_an_http_date_is_relative_to_msg_now(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    receiver.respond_next(429, headers={"Retry-After": "Mon, 06 May 2030 07:10:09 GMT"})

    with pytest.raises(TransientDeliveryError) as caught:
        await channel.send(outbound(target))

    assert caught.value.retry_after_s == 120


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_transient(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str], status: int
) -> None:
    receiver.respond_next(status, body="upstream is sad")

    with pytest.raises(TransientDeliveryError) as caught:
        await channel.send(outbound(target))

    assert caught.value.status_code == status
    assert caught.value.retry_after_s is None
    assert caught.value.response_excerpt == "upstream is sad"


async def test_payload_too_large_413_is_permanent(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    receiver.respond_next(413)

    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound(target))

    assert caught.value.status_code == 413
    assert not caught.value.gone and not caught.value.operator_alert


async def test_a_redirect_is_not_followed(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    elsewhere = receiver.new_subscription()
    receiver.respond_next(307, headers={"Location": elsewhere["endpoint"]})

    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound(target))

    assert caught.value.status_code == 307
    assert receiver.received == []


async def test_an_echoed_endpoint_is_scrubbed_from_the_excerpt(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    receiver.respond_next(400, body=f"bad push to {target['endpoint']} ({secret_path(target)})")

    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound(target))

    assert caught.value.response_excerpt is not None
    assert caught.value.response_excerpt.startswith("bad push to <endpoint>")
    assert_no_endpoint(caught.value, target)


# --- when the push service cannot be reached ------------------------------------------------


async def test_a_push_service_that_is_down_is_transient(channel: WebPushChannel) -> None:
    target = {**flat_target(_any_subscription()), "endpoint": refused_endpoint()}

    with pytest.raises(TransientDeliveryError) as caught:
        await channel.send(outbound(target))

    assert caught.value.status_code is None
    assert_no_endpoint(caught.value, target)


async def test_a_connection_closed_after_sending_is_unknown(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    receiver.drop_next()

    with pytest.raises(DeliveryUnknown) as caught:
        await channel.send(outbound(target))

    assert_no_endpoint(caught.value, target)


async def test_no_answer_within_the_timeout_is_unknown(
    keys: VapidKeys, receiver: PushReceiver, target: dict[str, str]
) -> None:
    # The receiver never answers (until the fixture stops it), so the outcome does not
    # depend on how fast this machine is; the short timeout only keeps the test quick.
    impatient = WebPushChannel(keys, SUBJECT, timeout=0.2)
    receiver.stall_next()

    with pytest.raises(DeliveryUnknown) as caught:
        await impatient.send(outbound(target))

    assert not isinstance(caught.value, TransientDeliveryError | PermanentDeliveryError)
    assert_no_endpoint(caught.value, target)


# --- bad input -------------------------------------------------------------------------------


async def test_a_target_without_keys_is_a_wiring_error(channel: WebPushChannel) -> None:
    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound({"endpoint": "https://push.example/abc"}))

    assert caught.value.operator_alert and not caught.value.gone


async def test_malformed_subscription_keys_are_permanent_but_not_gone(
    channel: WebPushChannel, target: dict[str, str]
) -> None:
    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound({**target, "p256dh": "AAAA"}))

    assert not caught.value.gone
    assert_no_endpoint(caught.value, target)


async def test_an_unknown_urgency_is_refused(
    channel: WebPushChannel, receiver: PushReceiver, target: dict[str, str]
) -> None:
    with pytest.raises(PermanentDeliveryError) as caught:
        await channel.send(outbound(target, urgency="critical"))

    assert caught.value.operator_alert
    assert receiver.received == []


@pytest.mark.parametrize("subject", ["ops@runbell.example", "http://runbell.example", ""])
def test_an_invalid_vapid_subject_fails_at_construction(keys: VapidKeys, subject: str) -> None:
    with pytest.raises(ValueError, match="VAPID subject"):
        WebPushChannel(keys, subject)


def test_https_subject_is_accepted(keys: VapidKeys) -> None:
    assert WebPushChannel(keys, "https://runbell.example").subject == "https://runbell.example"


# --- keys ------------------------------------------------------------------------------------


def test_vapid_keys_round_trip_through_pem() -> None:
    keys = VapidKeys.generate()

    again = VapidKeys.from_pem(keys.private_pem)

    assert again == keys
    assert len(keys.public_key) == 87 and "=" not in keys.public_key  # 65 bytes, base64url
    assert keys.private_pem not in repr(keys)
    assert VapidKeys.generate().public_key != keys.public_key


def test_vapid_keys_refuse_a_key_that_is_not_p256() -> None:
    other_curve = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )

    with pytest.raises(ValueError, match="P-256"):
        VapidKeys.from_pem(other_curve.decode())
    with pytest.raises(ValueError, match="PEM") as caught:
        VapidKeys.from_pem("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----")
    assert "not a key" not in str(caught.value)


def test_a_mismatched_key_pair_fails_at_construction(keys: VapidKeys) -> None:
    mixed = replace(keys, public_key=VapidKeys.generate().public_key)

    with pytest.raises(ValueError, match="does not match"):
        WebPushChannel(mixed, SUBJECT)


def _any_subscription() -> dict[str, Any]:
    """Valid browser keys for an endpoint nobody serves."""
    with PushReceiver() as push:
        return push.new_subscription()


# --- DNS rebinding -----------------------------------------------------------------------

REBIND_NAME = "push.rebind.test"


@pytest.fixture
def rebinding_push(
    keys: VapidKeys, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[PushReceiver, Trap, TwoFacedDNS]]:
    """A push service on 127.0.0.2 reached as ``push.rebind.test``, whose name answers
    127.0.0.2 once and 127.0.0.3 (a trap on the same port) on every later lookup."""
    with PushReceiver(expected_vapid_key=keys.public_key, bind="127.0.0.2", name=REBIND_NAME) as rx:
        dns = TwoFacedDNS(REBIND_NAME, "127.0.0.2", "127.0.0.3").install(monkeypatch)
        with Trap("127.0.0.3", rx.port) as trap:
            yield rx, trap, dns


async def test_push_dials_the_checked_address_when_dns_answers_differently_later(
    channel: WebPushChannel, rebinding_push: tuple[PushReceiver, Trap, TwoFacedDNS]
) -> None:
    """The guarded channel resolves the endpoint's name once, checks that answer, and the
    push reaches exactly that address, with the name in Host and in the VAPID audience;
    the address a second lookup would give is never contacted."""
    rx, trap, dns = rebinding_push
    guarded = GuardedWebPush(channel, frozenset({REBIND_NAME}))
    sub = rx.new_subscription()
    assert urlsplit(sub["endpoint"]).hostname == REBIND_NAME

    sent = await guarded.send(outbound(flat_target(sub)))

    assert sent.status_code == 201
    (got,) = rx.received
    assert got.headers["host"] == f"{REBIND_NAME}:{rx.port}"
    assert got.vapid_claims["aud"] == f"http://{REBIND_NAME}:{rx.port}"
    assert dns.lookups == 1  # the check's lookup, and no other
    assert trap.settle() == 0


async def test_two_faced_dns_would_catch_a_send_that_resolves_again(
    channel: WebPushChannel, rebinding_push: tuple[PushReceiver, Trap, TwoFacedDNS]
) -> None:
    """Calibration of the rig above: a push that is not pinned resolves the name itself,
    gets the second answer and connects to the trap."""
    rx, trap, dns = rebinding_push
    dns.lookups = 1  # as if the SSRF check had just used the first answer
    with pytest.raises(DeliveryError):
        await channel.send(outbound(flat_target(rx.new_subscription())))
    assert trap.settle() == 1
    assert rx.received == []
