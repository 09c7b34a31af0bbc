"""The SSRF-safe HTTP clients against a real local HTTP server."""

from __future__ import annotations

import contextvars
import datetime
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from runbell.domain.errors import UnsafeDestination
from runbell.domain.ssrf import Target, check_url
from runbell.outbound import (
    PinnedAdapter,
    SafeTransport,
    guarded_dials,
    make_resolver,
    safe_async_client,
    safe_client,
)
from tests.channels.rebinding import TwoFacedDNS
from tests.timeouts import WAIT


@dataclass
class Seen:
    connections: int = 0
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Host header)
    sni: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    seen: Seen

    def get_request(self) -> tuple[socket.socket, object]:
        conn, addr = super().get_request()
        with self.seen.lock:
            self.seen.connections += 1
        return conn, addr


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse would be visible
    server: _Server

    def do_GET(self) -> None:
        seen = self.server.seen
        with seen.lock:
            seen.requests.append((self.path, self.headers.get("Host")))
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://10.0.0.1/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Receiver:
    port: int
    seen: Seen

    @property
    def origin(self) -> str:
        return f"127.0.0.1:{self.port}"

    def settle(self) -> None:
        """Make sure every connection made so far has been accepted and counted.

        The server accepts in order, so once a fresh request over a plain client has
        been answered, any earlier connection attempt has been counted too.
        """
        with httpx.Client(trust_env=False, timeout=WAIT) as plain:
            assert plain.get(f"http://{self.origin}/settle").status_code == 200


def _serve(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen = Seen()
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield Receiver(port=server.server_address[1], seen=server.seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from _serve()


def _self_signed(name: str, directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_receiver(tmp_path: Path) -> Iterator[tuple[Receiver, ssl.SSLContext]]:
    """An https receiver whose certificate names only ``receiver.test``; records SNI."""
    cert, key = _self_signed("receiver.test", tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    sni: list[str | None] = []

    def record_sni(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        sni.append(name)

    server_ctx.sni_callback = record_sni
    client_ctx = ssl.create_default_context(cafile=str(cert))
    for rx in _serve(server_ctx):
        rx.seen.sni = sni
        yield rx, client_ctx


def resolver_to(address: str) -> Callable[[str, int], Sequence[str]]:
    def resolve(host: str, port: int) -> Sequence[str]:
        return [address]

    return resolve


def test_allow_listed_receiver_is_reached(receiver: Receiver) -> None:
    with safe_client(allow_hosts=frozenset({receiver.origin})) as client:
        response = client.get(f"http://{receiver.origin}/hook?a=1")
    assert response.status_code == 200
    assert response.text == "ok"
    assert receiver.seen.requests == [("/hook?a=1", receiver.origin)]


def test_dialled_address_is_the_checked_one_and_host_header_keeps_the_name(
    receiver: Receiver,
) -> None:
    name = f"receiver.test:{receiver.port}"
    with safe_client(allow_hosts=frozenset({name}), resolve=resolver_to("127.0.0.1")) as client:
        response = client.get(f"http://{name}/named")
    assert response.status_code == 200
    assert receiver.seen.requests == [("/named", name)]


def test_without_allow_list_nothing_connects(receiver: Receiver) -> None:
    with safe_client() as client:
        for url in (
            f"http://{receiver.origin}/",
            f"https://{receiver.origin}/",
            f"https://2130706433:{receiver.port}/",
            f"https://[::ffff:127.0.0.1]:{receiver.port}/",
        ):
            with pytest.raises(UnsafeDestination):
                client.get(url)
    receiver.settle()
    assert receiver.seen.connections == 1  # only the settle request
    assert receiver.seen.requests == [("/settle", receiver.origin)]


def test_redirect_to_private_address_is_returned_not_followed(receiver: Receiver) -> None:
    with safe_client(allow_hosts=frozenset({receiver.origin})) as client:
        response = client.get(f"http://{receiver.origin}/redirect")
    assert response.status_code == 302
    assert response.headers["Location"] == "http://10.0.0.1/"
    assert response.next_request is not None  # httpx would have gone there; we did not
    assert receiver.seen.requests == [("/redirect", receiver.origin)]


def test_name_resolving_to_loopback_is_refused_before_connecting(receiver: Receiver) -> None:
    transport = SafeTransport(resolve=resolver_to("127.0.0.1"))
    with httpx.Client(transport=transport, trust_env=False) as client:
        for scheme in ("https", "http"):
            with pytest.raises(UnsafeDestination):
                client.get(f"{scheme}://rebind.example.com:{receiver.port}/")
    receiver.settle()
    assert receiver.seen.connections == 1
    assert [path for path, _ in receiver.seen.requests] == ["/settle"]


def test_lookup_failure_is_a_connect_error() -> None:
    def failing(host: str, port: int) -> Sequence[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with (
        safe_client(resolve=failing) as client,
        pytest.raises(httpx.ConnectError, match="cannot resolve"),
    ):
        client.get("https://hooks.example.com/")


def test_make_resolver_resolves_numeric_hosts_without_dns() -> None:
    assert "127.0.0.1" in make_resolver()("127.0.0.1", 80)


async def test_async_client_reaches_allow_listed_and_refuses_the_rest(receiver: Receiver) -> None:
    async with safe_async_client(allow_hosts=frozenset({receiver.origin})) as client:
        ok = await client.get(f"http://{receiver.origin}/async")
        redirect = await client.get(f"http://{receiver.origin}/redirect")
        with pytest.raises(UnsafeDestination):
            await client.get(f"https://127.1:{receiver.port}/")
    assert ok.status_code == 200
    assert redirect.status_code == 302
    assert receiver.seen.requests == [
        ("/async", receiver.origin),
        ("/redirect", receiver.origin),
    ]


def test_https_dials_the_checked_address_with_the_name_for_sni_and_certificate(
    tls_receiver: tuple[Receiver, ssl.SSLContext],
) -> None:
    rx, trust = tls_receiver
    good, other = f"receiver.test:{rx.port}", f"other.test:{rx.port}"
    transport = SafeTransport(
        allow_hosts=frozenset({good, other}), resolve=resolver_to("127.0.0.1"), verify=trust
    )
    with httpx.Client(transport=transport, trust_env=False) as client:
        assert client.get(f"https://{good}/tls").status_code == 200
        # Same address, another name: a new handshake whose certificate check fails,
        # never a reuse of the connection verified for receiver.test.
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            client.get(f"https://{other}/tls")
    assert rx.seen.sni == ["receiver.test", "other.test"]
    assert rx.seen.requests == [("/tls", good)]


# --- requests: PinnedAdapter and guarded_dials ---------------------------------------------


def pinned_session(target: Target, verify: str | bool = True) -> requests.Session:
    session = requests.Session()
    session.trust_env = False
    session.verify = verify
    adapter = PinnedAdapter(target)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def test_pinned_adapter_dials_the_checked_address_with_the_name_for_sni_and_certificate(
    tls_receiver: tuple[Receiver, ssl.SSLContext], tmp_path: Path
) -> None:
    """requests through PinnedAdapter: the TLS handshake names receiver.test (SNI), the
    certificate (valid for receiver.test only, never for 127.0.0.1) verifies, and Host
    keeps the name, while the socket goes to the checked address without a lookup."""
    rx, _ = tls_receiver
    name = f"receiver.test:{rx.port}"
    target = check_url(
        f"https://{name}/push", allow_hosts=frozenset({name}), resolve=resolver_to("127.0.0.1")
    )
    with pinned_session(target, verify=str(tmp_path / "cert.pem")) as session:
        response = session.post(f"https://{name}/push", data=b"x", timeout=WAIT)
        assert response.status_code == 501  # the receiver only does GET: it was reached
        with pytest.raises(requests.exceptions.InvalidURL, match=r"receiver\.test"):
            session.get(f"https://other.test:{rx.port}/push", timeout=WAIT)
    assert rx.seen.sni == ["receiver.test"]


def test_pinned_adapter_keeps_host_and_refuses_other_origins(receiver: Receiver) -> None:
    name = f"push.example.com:{receiver.port}"
    target = check_url(
        f"http://{name}/a", allow_hosts=frozenset({name}), resolve=resolver_to("127.0.0.1")
    )
    with pinned_session(target) as session:
        assert session.get(f"http://{name}/a?b=1", timeout=WAIT).text == "ok"
        for other in (
            f"http://push.example.com:{receiver.port + 1}/a",  # another port
            f"https://{name}/a",  # another scheme
            f"http://127.0.0.1:{receiver.port}/a",  # the address itself, by its own name
        ):
            with pytest.raises(requests.exceptions.InvalidURL):
                session.get(other, timeout=WAIT)
    receiver.settle()
    assert receiver.seen.requests[0] == ("/a?b=1", name)
    assert receiver.seen.connections == 2  # the pinned request and the settle request


def test_guarded_dials_pins_checked_hosts_and_checks_the_others_when_they_connect(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside guarded_dials, requests (with no session we control) dials a pinned host at
    its checked address, and an unexpected host only if it passes the guard when it
    connects; outside the context nothing changes."""
    dns = TwoFacedDNS("hook.rebind.test", "127.0.0.1", "127.0.0.3").install(monkeypatch)
    pinned = check_url(
        f"http://hook.rebind.test:{receiver.port}/",
        allow_hosts=frozenset({"hook.rebind.test"}),
        resolve=make_resolver(),
    )
    assert dns.lookups == 1
    with guarded_dials([pinned], allow_hosts=frozenset()) as guard:
        ok = requests.get(f"http://hook.rebind.test:{receiver.port}/pinned", timeout=WAIT)
        # Not pinned, and resolving to loopback without an allow-list entry: refused at
        # connect time, reported on the guard.
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"http://localhost:{receiver.port}/sneaky", timeout=WAIT)
        # Threads that copy the context are guarded too (asyncio.to_thread, Apprise).
        ctx = contextvars.copy_context()
        with pytest.raises(requests.exceptions.ConnectionError):
            threading_run(
                lambda: ctx.run(requests.get, f"http://127.1:{receiver.port}/", timeout=WAIT)
            )
    assert ok.text == "ok"
    assert dns.lookups == 1  # requests never looked the pinned name up again
    assert [exc.extra["rule"] for exc in guard.refused] == ["local-name", "loopback"]
    receiver.settle()
    assert [path for path, _ in receiver.seen.requests] == ["/pinned", "/settle"]
    # Outside the context, urllib3 dials as usual again.
    assert requests.get(f"http://127.0.0.1:{receiver.port}/after", timeout=WAIT).text == "ok"


def threading_run(fn: Callable[[], object]) -> None:
    """Run ``fn`` in another thread and re-raise what it raised."""
    errors: list[BaseException] = []

    def main() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=main)
    thread.start()
    thread.join(timeout=WAIT)
    if errors:
        raise errors[0]
