"""One contract, every channel: each channel in the registry, built by its own ``SPEC`` the
way the worker builds it, sends to its real local peer on 127.0.0.1 and must behave alike.

The cases, the same for every channel (what the worker and an operator rely on):

- success: ``Sent``, and the peer got the one message;
- retryable failure (the peer says "later": 4xx-temporary, 503) → ``TransientDeliveryError``;
- permanent failure (the peer says the destination is gone) → ``PermanentDeliveryError``
  with ``gone`` (what that does to the destination is the facts' ``gone_means``);
- timeout (the peer has the request and never answers) → ``DeliveryUnknown``;
- receipt unknown (the peer has the request and hangs up) → ``DeliveryUnknown``;
- payload at its declared limit (``FACTS[name].payload_limit_bytes``, as the channel
  measures it) arrives intact; one byte over is refused before anything is sent;
- secret never in logs: with Runbell's logging levels at DEBUG, no value of the channel's
  ``secret_fields`` appears in any log line, output, error or repr.

The peers: aiosmtpd (``smtp_peer.py``), the decrypting push service and browser
(``push_receiver.py``), an Apprise ``json://`` receiver and a signature-checking webhook
receiver (``tests/peers.py``). A channel added to the registry without a peer here fails
:func:`test_every_registered_channel_has_a_peer_in_this_contract`. Nothing of Runbell's is
mocked; every wait is bounded by ``tests/timeouts.py`` and none is an assertion.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import pkgutil
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import structlog
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography.fernet import Fernet

import runbell.channels
from runbell.channels import registry
from runbell.channels.base import (
    DeliveryError,
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    Setup,
    TransientDeliveryError,
)
from runbell.channels.vapid import VapidKeys
from runbell.config import Settings
from runbell.crypto import SecretBox
from runbell.domain.channels import FACTS, ChannelFacts
from runbell.logging import QUIET_LIBRARIES, quiet_libraries
from runbell.signatures import new_secret
from tests.channels.push_receiver import PushReceiver
from tests.peers import DROP, HANG, ChatReceiver, HttpPeer, WebhookReceiver, mail_text
from tests.timeouts import WAIT, scaled

# aiosmtpd warns when AUTH is required without TLS; on loopback that is what we want.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")

NOW = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
BASE = "https://runbell.example"
# Short enough to keep the timeout case quick; the peer never answers, so the outcome does
# not depend on how fast this machine is. Every other case gets the suite's long bound.
IMPATIENT_S = scaled(0.5)
SMTP_USER = "runbell"
SMTP_PASSWORD = "smtp-PASSWORD-planted-4d2c"
CHAT_TOKEN = "chat-TOKEN-planted-8b1e"
CHAT_PASSWORD = "chat-PASSWORD-planted-5a9f"
HOOK_TOKEN = "hook-TOKEN-planted-3c7d"


class Peer:
    """One channel against its peer: how to build the channel (through its ``SPEC``),
    what to send, how to script the peer's next answer, and what arrived."""

    name: str
    #: Every secret field of the channel's facts → the planted values to search for.
    secrets: dict[str, list[str]]

    def __init__(self, box: SecretBox, tmp_path: Path) -> None:
        self.box = box
        self.tmp_path = tmp_path
        self.built: list[Any] = []

    @property
    def facts(self) -> ChannelFacts:
        return FACTS[self.name]

    def settings(self, **values: Any) -> Settings:
        base: dict[str, Any] = {
            "data_dir": self.tmp_path,
            "secret_key": Fernet.generate_key().decode(),
            "outbound_allow_hosts": frozenset({"127.0.0.1"}),
            "worker_concurrency": 1,
        }
        return Settings(**{**base, **values})

    def channel(self, timeout: float = WAIT) -> Any:
        """The channel as the worker's wiring builds it (``registry`` → ``SPEC.build``)."""
        setup = Setup(self.settings(outbound_timeout_s=timeout), BASE, self.vapid_keys)
        built = registry.spec(self.name).build(setup)
        assert built is not None and built.name == self.name
        self.built.append(built)
        return built

    def vapid_keys(self) -> VapidKeys:
        raise AssertionError(f"{self.name} needs no VAPID keys")

    def message(self, **overrides: Any) -> Outbound:
        values: dict[str, Any] = {
            "delivery_id": "dlv_contract_1",
            "tenant_id": "ten_1",
            "channel": self.name,
            "destination": "dst_1",
            "identity": "dlv_contract_1",
            "attempt_no": 1,
            "now": NOW,
            "urgency": "normal",
            "title": "A run needs your input",
            "body": "Open Runbell to see the request.",
            "deep_link": f"{BASE}/n/ntf_1",
            "notification_id": "ntf_1",
            "run_id": "run_1",
            "collapse_key": "ten_1:run_1",
            # Built from a stored destination by the channel's own spec, as prepare does.
            "target": registry.spec(self.name).target(self.stored(), self.box.open),
        }
        values.update(overrides)
        return Outbound(**values)

    def padded(self, msg: Outbound, text: str) -> Outbound:
        """``msg`` with ``text`` added to what the channel carries as its payload."""
        return replace(msg, body=text)

    # --- per peer --------------------------------------------------------------------

    def stored(self) -> dict[str, Any]:
        raise NotImplementedError

    def script(self, answer: str) -> None:
        """The peer's next answer: ``retry``, ``gone``, ``hang`` or ``drop``."""
        raise NotImplementedError

    def arrivals(self) -> int:
        """Messages that reached the peer (whatever it answered)."""
        raise NotImplementedError

    def last_text(self) -> str:
        """What the last message that reached the peer carried, decoded."""
        raise NotImplementedError


class EmailPeer(Peer):
    name = "email"

    def __init__(self, box: SecretBox, tmp_path: Path, start_smtp: Any) -> None:
        super().__init__(box, tmp_path)

        def authenticator(*args: Any) -> AuthResult:
            data = args[-1]
            ok = isinstance(data, LoginPassword) and data == (
                SMTP_USER.encode(),
                SMTP_PASSWORD.encode(),
            )
            return AuthResult(success=ok, handled=False)

        self.recorder, self.port = start_smtp(
            auth_required=True, auth_require_tls=False, authenticator=authenticator
        )
        self.secrets = {"smtp_password": [SMTP_PASSWORD]}

    def settings(self, **values: Any) -> Settings:
        return super().settings(
            smtp_host="127.0.0.1",
            smtp_port=self.port,
            smtp_username=SMTP_USER,
            smtp_password=SMTP_PASSWORD,
            smtp_from="Runbell <runbell@runbell.example>",
            **values,
        )

    def stored(self) -> dict[str, Any]:
        return {"address": "person@example.com"}

    def script(self, answer: str) -> None:
        r = self.recorder
        r.rcpt_reply = r.data_reply = None
        r.drop_after_data = r.silent_after_data = False
        if answer == "retry":
            r.rcpt_reply = "451 4.3.0 try again later"
        elif answer == "gone":
            r.rcpt_reply = "550 5.1.1 <person@example.com>: no such user"
        elif answer == "drop":
            r.drop_after_data = True
        elif answer == "hang":
            r.silent_after_data = True

    def arrivals(self) -> int:
        # A refused recipient never gets to DATA: count the recipients offered.
        return self.recorder.rcpts

    def last_text(self) -> str:
        return mail_text(self.recorder.received[-1].message)


class WebPushPeer(Peer):
    name = "webpush"

    def __init__(self, box: SecretBox, tmp_path: Path, push: PushReceiver, keys: VapidKeys):
        super().__init__(box, tmp_path)
        self.push, self.keys = push, keys
        self.subscription = push.new_subscription()
        token = urlsplit(self.subscription["endpoint"]).path.rsplit("/", 1)[1]
        pem_lines = [line for line in keys.private_pem.splitlines() if "-----" not in line]
        self.secrets = {
            "vapid_private_key": [max(pem_lines, key=len)],
            "endpoint": [token],
            "auth": [self.subscription["keys"]["auth"]],
        }

    def settings(self, **values: Any) -> Settings:
        return super().settings(vapid_subject="mailto:ops@runbell.example", **values)

    def vapid_keys(self) -> VapidKeys:
        return self.keys

    def stored(self) -> dict[str, Any]:
        # A push_subscriptions row, as store.destinations.find reads it.
        return {
            "endpoint": self.subscription["endpoint"],
            "p256dh": self.subscription["keys"]["p256dh"],
            "auth": self.subscription["keys"]["auth"],
        }

    def script(self, answer: str) -> None:
        if answer == "retry":
            self.push.respond_next(503)
        elif answer == "gone":
            self.push.respond_next(410)
        elif answer == "drop":
            self.push.drop_next()
        elif answer == "hang":
            self.push.stall_next()

    def arrivals(self) -> int:
        return len(self.push.received) + len(self.push.rejected)

    def last_text(self) -> str:
        return str(self.push.received[-1].payload["body"])


class HttpChannelPeer(Peer):
    """Chat and webhook: an HTTP peer scripted with statuses, DROP and HANG."""

    peer: HttpPeer

    def script(self, answer: str) -> None:
        status = {"retry": 503, "gone": 410, "drop": DROP, "hang": HANG}[answer]
        self.peer.respond_next(status)

    def arrivals(self) -> int:
        return len(self.peer.requests)


class ChatPeer(HttpChannelPeer):
    name = "chat"

    def __init__(self, box: SecretBox, tmp_path: Path, peer: ChatReceiver) -> None:
        super().__init__(box, tmp_path)
        self.peer = peer
        self.url = f"json://rb:{CHAT_PASSWORD}@127.0.0.1:{peer.port}/{CHAT_TOKEN}"
        self.secrets = {"url": [CHAT_TOKEN, CHAT_PASSWORD]}

    def stored(self) -> dict[str, Any]:
        # A chat_destinations row: the URL sealed at rest.
        return {"url_sealed": self.box.seal(self.url)}

    def last_text(self) -> str:
        return str(self.peer.requests[-1].json()["message"])


class WebhookPeer(HttpChannelPeer):
    name = "webhook"

    def __init__(self, box: SecretBox, tmp_path: Path, peer: WebhookReceiver) -> None:
        super().__init__(box, tmp_path)
        self.peer = peer
        self.secret = new_secret()
        peer.secrets = [self.secret]
        self.secrets = {"url": [HOOK_TOKEN], "secrets": [self.secret]}

    def stored(self) -> dict[str, Any]:
        # A webhook endpoint with its live secrets, as delivery_prepare hands it over.
        return {
            "url": self.peer.url(f"/hook/{HOOK_TOKEN}"),
            "secrets": [{"sealed": self.box.seal(self.secret)}],
            "rate_limit_per_s": None,
        }

    def message(self, **overrides: Any) -> Outbound:
        event = {"type": "run.finished", "timestamp": "2030-05-06T07:08:09Z", "data": {}}
        return super().message(
            **{"event_type": "run.finished", "payload": event, "body": "", **overrides}
        )

    def padded(self, msg: Outbound, text: str) -> Outbound:
        assert msg.payload is not None
        return replace(msg, payload={**msg.payload, "data": {"pad": text}})

    def last_text(self) -> str:
        request = self.peer.requests[-1]
        assert request.signed_by == [0]  # the receiver checked the signature
        return str(request.json()["data"]["pad"])


# --- the peers, started per test ---------------------------------------------------------------


@pytest.fixture(scope="module")
def keys() -> VapidKeys:
    return VapidKeys.generate()


#: How each registered channel's peer starts: (exit stack, secret box, tmp dir, the
#: ``start_smtp`` fixture, the VAPID keys) → the peer.
PEERS: dict[str, Callable[[contextlib.ExitStack, SecretBox, Path, Any, VapidKeys], Peer]] = {
    "email": lambda _stack, box, tmp, smtp, _keys: EmailPeer(box, tmp, smtp),
    "webpush": lambda stack, box, tmp, _smtp, keys: WebPushPeer(
        box, tmp, stack.enter_context(PushReceiver(expected_vapid_key=keys.public_key)), keys
    ),
    "chat": lambda stack, box, tmp, _smtp, _keys: ChatPeer(
        box, tmp, stack.enter_context(ChatReceiver())
    ),
    "webhook": lambda stack, box, tmp, _smtp, _keys: WebhookPeer(
        box, tmp, stack.enter_context(WebhookReceiver())
    ),
}


@pytest.fixture(params=list(registry.MODULES))
async def peer(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    start_smtp: Any,
    keys: VapidKeys,
) -> AsyncIterator[Peer]:
    box = SecretBox(Fernet.generate_key())
    with contextlib.ExitStack() as stack:
        found = PEERS[request.param](stack, box, tmp_path, start_smtp, keys)
        assert found.name == request.param
        try:
            yield found
        finally:
            for channel in found.built:
                client = getattr(channel, "_client", None)
                if client is not None:
                    await client.aclose()


async def send(channel: Any, msg: Outbound) -> Sent:
    sent: Sent = await channel.send(msg)
    return sent


# --- the contract ---------------------------------------------------------------------------


def test_every_registered_channel_has_a_peer_in_this_contract() -> None:
    assert set(PEERS) == set(registry.MODULES)


def test_every_channel_module_with_a_spec_is_registered_with_the_domain_facts() -> None:
    found = {}
    for info in pkgutil.iter_modules(runbell.channels.__path__):
        module = importlib.import_module(f"runbell.channels.{info.name}")
        spec = getattr(module, "SPEC", None)
        if spec is not None:
            found[spec.name] = module.__name__
            assert spec.facts is FACTS[spec.name]  # declared once, in the domain
            assert registry.spec(spec.name) is spec
    assert found == dict(registry.MODULES)
    assert set(registry.MODULES) == set(FACTS)


async def test_success(peer: Peer) -> None:
    msg = peer.message()
    sent = await send(peer.channel(), msg)
    assert isinstance(sent, Sent)
    assert peer.arrivals() == 1
    if peer.facts.audience == "person":
        assert "Open Runbell to see the request." in peer.last_text()


async def test_retryable_failure_is_transient(peer: Peer) -> None:
    peer.script("retry")
    with pytest.raises(TransientDeliveryError):
        await send(peer.channel(), peer.message())
    assert peer.arrivals() == 1


async def test_permanent_failure_says_the_destination_is_gone(peer: Peer) -> None:
    peer.script("gone")
    with pytest.raises(PermanentDeliveryError) as caught:
        await send(peer.channel(), peer.message())
    assert caught.value.gone
    assert peer.arrivals() == 1


async def test_no_answer_within_the_timeout_is_unknown(peer: Peer) -> None:
    peer.script("hang")
    with pytest.raises(DeliveryUnknown):
        await send(peer.channel(timeout=IMPATIENT_S), peer.message())
    assert peer.arrivals() == 1  # the peer has it: it may act on it


async def test_a_connection_dropped_after_the_request_is_unknown(peer: Peer) -> None:
    peer.script("drop")
    with pytest.raises(DeliveryUnknown):
        await send(peer.channel(), peer.message())
    assert peer.arrivals() == 1


async def test_payload_at_its_limit_arrives_intact_and_one_byte_over_is_refused(
    peer: Peer,
) -> None:
    channel = peer.channel()
    limit = peer.facts.payload_limit_bytes
    msg = peer.message()
    # One character of padding first: the first one may bring a separator with it.
    start = channel.payload_size(peer.padded(msg, "x"))
    padding = "x" * (limit - start + 1)
    at_limit = peer.padded(msg, padding)
    assert channel.payload_size(at_limit) == limit

    await send(channel, at_limit)
    assert peer.arrivals() == 1
    assert padding in peer.last_text()

    over = peer.padded(msg, padding + "x")
    assert channel.payload_size(over) == limit + 1
    with pytest.raises(PermanentDeliveryError) as caught:
        await send(channel, over)
    assert not caught.value.gone
    assert peer.arrivals() == 1  # refused before anything was sent


@pytest.fixture
def runbell_log_levels() -> Iterator[None]:
    """Runbell's logging levels (``runbell.logging.quiet_libraries``), restored after."""
    before = {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    quiet_libraries()
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("runbell_log_levels")
async def test_secrets_never_reach_a_log_an_error_or_a_repr(
    peer: Peer, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    assert set(peer.secrets) == set(peer.facts.secret_fields), "plant every secret field"
    planted = [value for values in peer.secrets.values() for value in values]
    caplog.set_level(logging.DEBUG)
    channel = peer.channel()
    msg = peer.message()
    seen: list[str] = [repr(msg)]
    with structlog.testing.capture_logs() as events:
        seen.append(repr(await send(channel, msg)))
        for answer in ("retry", "gone", "drop"):
            peer.script(answer)
            seen += _rendered(await _failure(channel, msg))
        seen += _rendered(await _failure(channel, peer.padded(msg, "x" * (2 << 20))))
    out = capsys.readouterr()
    seen += [caplog.text, repr(events), out.out, out.err]
    for text in seen:
        for secret in planted:
            assert secret not in text


async def _failure(channel: Any, msg: Outbound) -> DeliveryError:
    with pytest.raises(DeliveryError) as caught:
        await send(channel, msg)
    return caught.value


def _rendered(err: DeliveryError) -> list[str]:
    return [
        "".join(traceback.format_exception(err)),
        str(err),
        err.detail,
        err.response_excerpt or "",
        repr(err.extra),
    ]


def test_a_secret_target_field_is_hidden_from_the_outbound_repr() -> None:
    box = SecretBox(Fernet.generate_key())
    hook = registry.spec("webhook").target(
        {"url": f"https://h.example/{HOOK_TOKEN}", "secrets": [], "rate_limit_per_s": None},
        box.open,
    )
    msg = Outbound(
        delivery_id="d",
        tenant_id="t",
        channel="webhook",
        destination="ep_1",
        identity="d",
        attempt_no=1,
        now=NOW,
        urgency="normal",
        title="",
        body="",
        deep_link=BASE,
        target=hook,
    )
    assert HOOK_TOKEN not in repr(msg) and "[secret]" in repr(msg)
