"""The chat channel against a real local Apprise ``json://`` receiver on 127.0.0.1.

The receiver counts every request it gets, so "refused before any connection" and
"Apprise did not retry" are facts observed at the peer, not assumptions about Apprise.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbell.channels.base import (
    DeliveryUnknown,
    Outbound,
    PermanentDeliveryError,
    Sent,
    TransientDeliveryError,
)
from runbell.channels.chat import ChatChannel
from runbell.channels.chat_urls import (
    SUPPORTED_SCHEMES,
    ChatEndpoint,
    check_destination,
    load_plugins,
    parse_destination,
    redact,
)
from runbell.domain.errors import UnsafeDestination, ValidationFailed
from tests.channels.rebinding import Trap, TwoFacedDNS
from tests.timeouts import WAIT

LOCAL = frozenset({"127.0.0.1"})
SECRET = "planted-secret-7f3a9c"
PUBLIC_IP = "93.184.215.14"


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A local HTTP peer: answers ``status`` (or hangs) and records every request."""

    port: int = 0
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    requests: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str = "/hook", scheme: str = "json") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            receiver.requests.append(
                Received(self.command, self.path, dict(self.headers.items()), body)
            )
            if receiver.hang:
                receiver.release.wait(timeout=WAIT)
            self.send_response(receiver.status)
            for name, value in receiver.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_POST = do_GET = do_PUT = _record

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest output clean

    return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from _serve("127.0.0.1")


def _serve(bind: str) -> Iterator[Receiver]:
    state = Receiver()
    server = ThreadingHTTPServer((bind, 0), _handler(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but not listening: connecting to it is refused, and nobody can take it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def no_dns(host: str, port: int) -> Sequence[str]:
    raise AssertionError(f"unexpected DNS lookup for {host!r}")


def fixed_dns(*answers: str, asked: list[str] | None = None) -> Callable[[str, int], Sequence[str]]:
    def resolve(host: str, port: int) -> Sequence[str]:
        if asked is not None:
            asked.append(host)
        return answers

    return resolve


def outbound(url: str, **overrides: Any) -> Outbound:
    fields: dict[str, Any] = {
        "delivery_id": "dlv_1",
        "tenant_id": "ten_1",
        "channel": "chat",
        "destination": "dst_1",
        "identity": "idt_1",
        "attempt_no": 1,
        "now": datetime(2025, 1, 1, tzinfo=UTC),
        "urgency": "normal",
        "title": "A run needs your attention",
        "body": "Open Runbell to see what happened.",
        "deep_link": "https://runbell.example.com/n/ntf_123",
        "target": {"url": url},
    }
    fields.update(overrides)
    return Outbound(**fields)


# --- delivery -------------------------------------------------------------------------


async def test_send_posts_neutral_title_and_deep_link_once(receiver: Receiver) -> None:
    msg = outbound(receiver.url())

    sent = await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(msg)

    assert isinstance(sent, Sent)
    assert len(receiver.requests) == 1
    request = receiver.requests[0]
    assert (request.method, request.path) == ("POST", "/hook")
    payload = request.json()
    assert payload["title"] == msg.title
    # Apprise's json plugin calls the body "message".
    assert payload["message"] == f"{msg.body}\n{msg.deep_link}"


async def test_fields_other_than_title_body_and_deep_link_never_leave(
    receiver: Receiver,
) -> None:
    msg = outbound(
        receiver.url(),
        delivery_id=SECRET,
        tenant_id=SECRET,
        destination=SECRET,
        identity=SECRET,
        notification_id=SECRET,
        run_id=SECRET,
        collapse_key=SECRET,
        event_type=SECRET,
        payload={"details": SECRET, "prompt": SECRET},
        target={"url": receiver.url(), "note": SECRET},
    )

    await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(msg)

    assert len(receiver.requests) == 1
    request = receiver.requests[0]
    seen = request.body + request.path.encode() + repr(request.headers).encode()
    assert SECRET.encode() not in seen


@pytest.mark.parametrize("query", ["", "?retry=3&wait=0", "?optional=yes&retry=2"])
async def test_5xx_is_transient_and_apprise_does_not_retry(receiver: Receiver, query: str) -> None:
    # A URL asking Apprise for its own retries (or to hide failures) is overruled.
    receiver.status = 500

    with pytest.raises(TransientDeliveryError) as caught:
        await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(
            outbound(receiver.url(f"/hook{query}"))
        )

    assert caught.value.status_code == 500
    assert len(receiver.requests) == 1


@pytest.mark.parametrize(
    ("status", "error", "flags"),
    [
        (429, TransientDeliveryError, {}),
        (503, TransientDeliveryError, {}),
        (400, PermanentDeliveryError, {"gone": False, "operator_alert": False}),
        (401, PermanentDeliveryError, {"gone": False, "operator_alert": True}),
        (404, PermanentDeliveryError, {"gone": False, "operator_alert": True}),
        (410, PermanentDeliveryError, {"gone": True, "operator_alert": False}),
    ],
)
async def test_status_codes_map_to_typed_errors(
    receiver: Receiver, status: int, error: type[Exception], flags: dict[str, bool]
) -> None:
    receiver.status = status

    with pytest.raises(error) as caught:
        await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(outbound(receiver.url()))

    assert getattr(caught.value, "status_code", None) == status
    for name, value in flags.items():
        assert getattr(caught.value, name) is value
    assert len(receiver.requests) == 1


async def test_a_refusal_inside_a_2xx_reply_is_permanent(receiver: Receiver) -> None:
    # Gotify's plugin accepts only 200; anything else, even a 2xx, is its failure.
    receiver.status = 201
    url = f"gotify://127.0.0.1:{receiver.port}/abcdefghijklmno"

    with pytest.raises(PermanentDeliveryError) as caught:
        await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(outbound(url))

    assert caught.value.status_code == 201
    assert caught.value.operator_alert is True
    assert len(receiver.requests) == 1
    assert receiver.requests[0].path.startswith("/message")


@pytest.mark.parametrize("query", ["", "?redirect=yes"])
async def test_redirect_is_not_followed(receiver: Receiver, query: str) -> None:
    receiver.status = 302
    receiver.headers = {"Location": f"http://127.0.0.1:{receiver.port}/internal-only"}

    with pytest.raises(PermanentDeliveryError) as caught:
        await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(
            outbound(receiver.url(f"/hook{query}"))
        )

    assert caught.value.status_code == 302
    assert caught.value.operator_alert is True
    # Apprise keeps its own options (redirect=) out of the request it sends.
    assert [r.path for r in receiver.requests] == ["/hook"]


async def test_closed_port_is_transient(closed_port: int) -> None:
    url = f"json://127.0.0.1:{closed_port}/hook"

    with pytest.raises(TransientDeliveryError) as caught:
        await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(outbound(url))

    assert caught.value.status_code is None


async def test_peer_that_never_answers_is_unknown(receiver: Receiver) -> None:
    # The request was written; whether it was acted on cannot be known.
    receiver.hang = True

    with pytest.raises(DeliveryUnknown):
        await ChatChannel(allow_hosts=LOCAL, resolve=no_dns, timeout=0.5).send(
            outbound(receiver.url())
        )

    assert len(receiver.requests) == 1


async def test_error_details_hold_no_url_secrets(receiver: Receiver) -> None:
    receiver.status = 500
    url = f"json://bob:hunter2@127.0.0.1:{receiver.port}/s3cr3t-path?-token=t0k3n"

    with pytest.raises(TransientDeliveryError) as caught:
        await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(outbound(url))

    text = f"{caught.value} {caught.value.detail} {caught.value.extra}"
    for secret in ("bob", "hunter2", "s3cr3t", "t0k3n"):
        assert secret not in text
    assert f"127.0.0.1:{receiver.port}" in text


async def test_missing_url_is_a_configuration_problem() -> None:
    msg = outbound("", target={})

    with pytest.raises(PermanentDeliveryError) as caught:
        await ChatChannel(allow_hosts=LOCAL, resolve=no_dns).send(msg)

    assert caught.value.operator_alert is True


async def test_dns_failure_is_transient() -> None:
    def broken(host: str, port: int) -> Sequence[str]:
        raise socket.gaierror(-2, "Name or service not known")

    with pytest.raises(TransientDeliveryError):
        await ChatChannel(allow_hosts=LOCAL, resolve=broken).send(
            outbound("jsons://hooks.example.com/x")
        )


# --- SSRF -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "allow"),
    [
        ("json://10.0.0.5/x", LOCAL),
        ("json://localhost:{port}/x", LOCAL),
        ("json://127.0.0.1:{port}/x", frozenset()),
        ("json://[::ffff:127.0.0.1]:{port}/x", LOCAL),
        ("json://2130706433:{port}/x", LOCAL),
        ("json://0x7f000001:{port}/x", LOCAL),
        ("json://127.1:{port}/x", LOCAL),
        ("jsons://127.0.0.1:{port}/x", frozenset()),
        ("jsons://169.254.169.254/latest/meta-data", LOCAL),
        ("jsons://[::1]:{port}/x", LOCAL),
        ("ntfy://127.0.0.1:{port}/topic", frozenset()),
        ("gotify://127.0.0.1:{port}/abcdefghijklmno", frozenset()),
        # not an allowed plugin at all, though it would happily POST to the receiver
        ("form://127.0.0.1:{port}/x", LOCAL),
    ],
)
async def test_unsafe_destinations_are_refused_before_connecting(
    receiver: Receiver, template: str, allow: frozenset[str]
) -> None:
    url = template.format(port=receiver.port)

    with pytest.raises(PermanentDeliveryError) as caught:
        await ChatChannel(allow_hosts=allow, resolve=no_dns).send(outbound(url))

    assert caught.value.operator_alert is True
    assert receiver.requests == []


# --- DNS rebinding -----------------------------------------------------------------------

REBIND_NAME = "chat.rebind.test"


@pytest.fixture
def rebinding_chat(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Receiver, Trap, TwoFacedDNS]]:
    """A ``json://`` receiver on 127.0.0.2 reached as ``chat.rebind.test``, whose name
    answers 127.0.0.2 once and 127.0.0.3 (a trap on the same port) on every later lookup."""
    for rx in _serve("127.0.0.2"):
        dns = TwoFacedDNS(REBIND_NAME, "127.0.0.2", "127.0.0.3").install(monkeypatch)
        with Trap("127.0.0.3", rx.port) as trap:
            yield rx, trap, dns


async def test_chat_dials_the_checked_address_when_dns_answers_differently_later(
    rebinding_chat: tuple[Receiver, Trap, TwoFacedDNS],
) -> None:
    """The name is resolved once, by the SSRF check; Apprise's own connection goes to the
    checked address with the name in Host; the second answer is never contacted."""
    rx, trap, dns = rebinding_chat
    channel = ChatChannel(allow_hosts=frozenset({REBIND_NAME}), timeout=WAIT)

    sent = await channel.send(outbound(f"json://{REBIND_NAME}:{rx.port}/hook"))

    assert sent == Sent()
    (got,) = rx.requests
    assert got.path == "/hook"
    assert got.headers["Host"] == f"{REBIND_NAME}:{rx.port}"
    assert dns.lookups == 1
    assert trap.settle() == 0


async def test_two_faced_dns_would_catch_an_unguarded_apprise_call(
    rebinding_chat: tuple[Receiver, Trap, TwoFacedDNS],
) -> None:
    """Calibration of the rig above: Apprise on its own resolves the name again, gets the
    second answer and connects to the trap."""
    import apprise

    rx, trap, dns = rebinding_chat
    dns.lookups = 1  # as if the SSRF check had just used the first answer
    load_plugins()  # as chat_urls loads them (Apprise alone warns about imghdr)
    notifier = apprise.Apprise()
    notifier.add(f"json://{REBIND_NAME}:{rx.port}/hook?retry=0")
    notifier.notify(body="b", title="t")
    assert trap.settle() == 1
    assert rx.requests == []


def test_every_supported_plugin_dials_through_urllib3() -> None:
    """guarded_dials pins urllib3's connections; a supported plugin on another HTTP stack
    (or raw sockets) would escape it, so an Apprise upgrade that does that must fail here
    and be documented as unpinned in docs/channels/chat.md."""
    import ast
    import inspect

    import apprise

    other_stacks = {"httpx", "aiohttp", "http.client", "urllib.request", "socket", "pycurl"}
    load_plugins()  # as chat_urls loads them (Apprise alone warns about imghdr)
    manager: Any = apprise.plugins.N_MGR
    for scheme in sorted(SUPPORTED_SCHEMES):
        module = inspect.getmodule(manager[scheme])
        assert module is not None
        imported: set[str] = set()
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
        assert "requests" in imported, scheme
        assert not imported & other_stacks, (scheme, imported & other_stacks)


def test_check_destination_refuses_names_resolving_to_private_addresses() -> None:
    with pytest.raises(UnsafeDestination):
        check_destination(
            "jsons://hooks.example.com/x", allow_hosts=frozenset(), resolve=fixed_dns("10.1.2.3")
        )
    check_destination(
        "jsons://hooks.example.com/x", allow_hosts=frozenset(), resolve=fixed_dns(PUBLIC_IP)
    )


def test_check_destination_checks_the_fixed_api_host_of_saas_plugins() -> None:
    asked: list[str] = []

    with pytest.raises(UnsafeDestination):
        check_destination(
            "slack://T000/B000/XXXX",
            allow_hosts=frozenset(),
            resolve=fixed_dns("127.0.0.1", asked=asked),
        )
    assert asked == ["hooks.slack.com"]
    check_destination(
        "tgram://123456:abc/789", allow_hosts=frozenset(), resolve=fixed_dns(PUBLIC_IP)
    )


def test_check_destination_allows_allow_listed_plain_http() -> None:
    check_destination("json://127.0.0.1:8080/x", allow_hosts=LOCAL, resolve=no_dns)
    with pytest.raises(UnsafeDestination):
        check_destination("json://127.0.0.1:8080/x", allow_hosts=frozenset(), resolve=no_dns)


# --- parsing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "service", "endpoint"),
    [
        ("slack://T000/B000/XXXX", "slack", ChatEndpoint("hooks.slack.com", None, True)),
        ("slack://xoxb-1234-1234-abc124/#general", "slack", ChatEndpoint("slack.com", None, True)),
        ("tgram://123456:abc/789", "telegram", ChatEndpoint("api.telegram.org", None, True)),
        ("discord://1234/abcd", "discord", ChatEndpoint("discord.com", None, True)),
        ("ntfy://my-topic", "ntfy", ChatEndpoint("ntfy.sh", None, True)),
        ("ntfys://ntfy.example.com/alerts", "ntfy", ChatEndpoint("ntfy.example.com", None, True)),
        ("json://127.0.0.1:8080/hook", "json", ChatEndpoint("127.0.0.1", 8080, False)),
        ("jsons://u:pw@hooks.example.com/x", "json", ChatEndpoint("hooks.example.com", None, True)),
        ("matrixs://u:pw@m.example.com/#room", "matrix", ChatEndpoint("m.example.com", None, True)),
    ],
)
def test_parse_destination_names_service_and_contacted_host(
    url: str, service: str, endpoint: ChatEndpoint
) -> None:
    target = parse_destination(url)

    assert target.service == service
    assert target.endpoints == (endpoint,)


@pytest.mark.parametrize(
    "url",
    [
        "foo://bar",
        "windows://",
        "macosx://",
        "dbus://",
        "glib://",
        "gnome://",
        "syslog://",
        "rsyslog://localhost",
        "form://hooks.example.com",
        "xml://hooks.example.com",
        "mailto://user:pw@example.com",
        "slack://",  # a supported service, but not a valid URL for it
        "json://127.0.0.1/x?verify=no",  # TLS verification stays on
        "ntfys://ntfy.example.com/one/two",  # one chat per destination
        "json://127.0.0.1/x,json://10.0.0.1/y",  # two URLs to Apprise.add
        "json://127.0.0.1/x;json://10.0.0.1/y",
        "tgram://123456:abc/789,790",  # a target list
        "not a url",
        "",
    ],
)
def test_parse_destination_refuses_unsupported_and_local_plugins(url: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_destination(url)

    assert caught.value.extra.get("field") == "url"


# --- redaction ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown", "secrets"),
    [
        ("slack://T000/B000/XXXX", "slack://…", ["T000", "B000", "XXXX"]),
        ("tgram://123:abc/456", "tgram://…", ["123", "abc", "456"]),
        (
            "json://bob:hunter2@127.0.0.1:8080/hook/s3cr3t?-token=t0k3n",
            "json://127.0.0.1:8080/…",
            ["bob", "hunter2", "s3cr3t", "t0k3n"],
        ),
        ("ntfy://private-topic-name", "ntfy://…", ["private-topic-name"]),
        ("windows://secretish", "windows://…", ["secretish"]),
        ("hunter2", "(not an Apprise URL)", ["hunter2"]),
    ],
)
def test_redact_shows_scheme_and_host_only(url: str, shown: str, secrets: list[str]) -> None:
    text = redact(url)

    assert text == shown
    for secret in secrets:
        assert secret not in text


TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=6)


@settings(max_examples=30, deadline=None)
@given(a=TOKEN, b=TOKEN, c=TOKEN)
def test_redact_never_returns_tokens(a: str, b: str, c: str) -> None:
    for url in (
        f"slack://{a}/{b}/{c}",
        f"tgram://123456:{a}/{b}",
        f"discord://{a}/{b}",
        f"json://{a}:{b}@127.0.0.1:8080/{c}",
    ):
        text = redact(url)
        assert a not in text
        assert b not in text
        assert c not in text
