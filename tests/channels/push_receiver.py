"""A real RFC 8030 push service on 127.0.0.1, with the "browsers" subscribed to it.

Tests send real web pushes here instead of mocking pywebpush, so what is checked is what
a push service and a browser would see: the VAPID ``Authorization`` header (RFC 8292), the
``TTL``/``Urgency``/``Topic`` headers, and an ``aes128gcm`` body (RFC 8291) that only the
subscriber's private key decrypts.

Example::

    with PushReceiver(expected_vapid_key=keys.public_key) as push:
        sub = push.new_subscription()
        await channel.send(outbound(target=flat_target(sub)))
        (got,) = push.received
        assert got.payload["id"] == "ntf_1" and got.urgency == "high"

Scripted answers (``respond_next``, ``drop_next``, ``stall_next``) stand in for a push
service that is overloaded, broken or slow; ``unsubscribe`` makes it answer 410 like a
service whose browser unsubscribed; an unknown path gets 404.

Unlike a real push service, a body this "browser" cannot decrypt or parse is answered
with 400 so that a test fails loudly instead of recording nothing.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import jwt as vapid_jwt

from tests.timeouts import WAIT

MAX_BODY_BYTES = 4096  # RFC 8030 §7.2: a push service must accept at least this much
MAX_JWT_LIFETIME_S = 24 * 3600  # RFC 8292 §2: exp no more than 24 hours ahead
STALL_LIMIT_S = WAIT  # a stalled request never outlives a forgotten stop() by much

_AUTH_RE = re.compile(r"^vapid\s+(?P<params>.+)$", re.IGNORECASE)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Browser:
    """One subscribed browser: its ECDH key pair and auth secret (RFC 8291)."""

    token: str
    endpoint: str
    private_key: ec.EllipticCurvePrivateKey = field(repr=False)
    auth_secret: bytes = field(repr=False)
    application_server_key: str | None = None
    unsubscribed: bool = False

    @property
    def p256dh(self) -> str:
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return b64url(point)

    @property
    def auth(self) -> str:
        return b64url(self.auth_secret)

    def subscription(self) -> dict[str, Any]:
        """What ``PushSubscription.toJSON()`` gives the page."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}

    def decrypt(self, body: bytes) -> bytes:
        return bytes(
            http_ece.decrypt(
                body,
                private_key=self.private_key,
                auth_secret=self.auth_secret,
                version="aes128gcm",
            )
        )


@dataclass(frozen=True)
class Received:
    """One push the service accepted and the browser decrypted."""

    path: str
    ttl: int
    urgency: str | None
    topic: str | None
    payload: Any  # the decrypted body parsed as JSON
    plaintext: bytes
    body_size: int
    vapid_claims: dict[str, Any]
    vapid_key: str
    location: str
    headers: dict[str, str]  # lower-case names


@dataclass(frozen=True)
class Rejected:
    """One request answered with something other than 201, and why."""

    path: str
    status: int
    reason: str


@dataclass(frozen=True)
class _Script:
    kind: str  # "status" | "drop" | "stall"
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""


class _Reject(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class PushReceiver:
    """A threaded push service on 127.0.0.1 (an ephemeral port; ``bind`` another 127.0.0.x,
    and ``name`` the host its endpoints use instead of the address).

    ``expected_vapid_key`` (base64url uncompressed point) makes every push signed with
    another key fail with 403, like a service whose subscriptions were made with a
    different ``applicationServerKey``; ``new_subscription(application_server_key=...)``
    does the same for one subscription.
    """

    def __init__(
        self,
        *,
        expected_vapid_key: str | None = None,
        bind: str = "127.0.0.1",
        name: str | None = None,
    ) -> None:
        self.expected_vapid_key = expected_vapid_key
        self.bind = bind
        self.name = name  # the host endpoints name (a DNS name in rebinding tests)
        self.received: list[Received] = []
        self.rejected: list[Rejected] = []
        self._browsers: dict[str, Browser] = {}
        self._script: list[_Script] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> PushReceiver:
        receiver = self

        class Handler(_Handler):
            owner = receiver

        server = ThreadingHTTPServer((self.bind, 0), Handler)
        server.daemon_threads = True
        self._server = server
        # A short poll interval: shutdown() waits for the next poll, at every teardown.
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.01,), name="push-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()  # let stalled handlers finish
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None

    def __enter__(self) -> PushReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        assert self._server is not None, "start() the receiver first"
        return f"http://{self.name or self.bind}:{self.port}"

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the receiver first"
        return int(self._server.server_address[1])

    # --- subscriptions -----------------------------------------------------------------

    def new_subscription(self, *, application_server_key: str | None = None) -> dict[str, Any]:
        """Subscribe a new browser; returns ``{"endpoint", "keys": {"p256dh", "auth"}}``."""
        token = secrets.token_urlsafe(24)
        browser = Browser(
            token=token,
            endpoint=f"{self.origin}/push/{token}",
            private_key=ec.generate_private_key(ec.SECP256R1()),
            auth_secret=secrets.token_bytes(16),
            application_server_key=application_server_key,
        )
        with self._lock:
            self._browsers[f"/push/{token}"] = browser
        return browser.subscription()

    def browser(self, subscription: dict[str, Any]) -> Browser:
        return self._browsers[urlsplit(subscription["endpoint"]).path]

    def unsubscribe(self, subscription: dict[str, Any]) -> None:
        """From now on pushes to this subscription get 410 Gone."""
        with self._lock:
            self.browser(subscription).unsubscribed = True

    # --- scripted answers --------------------------------------------------------------

    def respond_next(
        self,
        status: int,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
        body: str = "",
    ) -> None:
        """Answer the next ``times`` pushes with ``status`` (e.g. 429 + Retry-After, 500)."""
        with self._lock:
            self._script.extend(
                _Script("status", status, dict(headers or {}), body) for _ in range(times)
            )

    def drop_next(self, *, times: int = 1) -> None:
        """Read the next pushes in full, then close the connection without answering."""
        with self._lock:
            self._script.extend(_Script("drop") for _ in range(times))

    def stall_next(self, *, times: int = 1) -> None:
        """Read the next pushes, then answer nothing until :meth:`stop` (a read timeout)."""
        with self._lock:
            self._script.extend(_Script("stall") for _ in range(times))

    # --- request handling (called on server threads) ------------------------------------

    def _next_script(self) -> _Script | None:
        with self._lock:
            return self._script.pop(0) if self._script else None

    def _reject(self, path: str, status: int, reason: str) -> None:
        with self._lock:
            self.rejected.append(Rejected(path, status, reason))

    def _accept(self, path: str, headers: dict[str, str], body: bytes) -> Received:
        """Validate and decrypt one push as a push service plus browser would."""
        with self._lock:
            browser = self._browsers.get(path)
        if browser is None:
            raise _Reject(404, "no such subscription")
        if browser.unsubscribed:
            raise _Reject(410, "subscription expired or unsubscribed")
        claims, key = self._check_vapid(headers.get("authorization", ""))
        expected = browser.application_server_key or self.expected_vapid_key
        if expected is not None and key != expected:
            raise _Reject(403, "VAPID key does not match the subscription's key")
        ttl_text = headers.get("ttl", "")
        if not ttl_text.isdigit():
            raise _Reject(400, "missing or invalid TTL header")
        urgency = headers.get("urgency")
        if urgency is not None and urgency not in ("very-low", "low", "normal", "high"):
            raise _Reject(400, f"invalid Urgency {urgency!r}")
        topic = headers.get("topic")
        if topic is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", topic):
            raise _Reject(400, f"invalid Topic {topic!r}")
        if headers.get("content-encoding", "").lower() != "aes128gcm":
            raise _Reject(415, f"content-encoding {headers.get('content-encoding')!r}")
        if "crypto-key" in headers or "encryption" in headers:
            raise _Reject(400, "aesgcm-era headers on an aes128gcm push")
        try:
            plaintext = browser.decrypt(body)
        except Exception as exc:  # http_ece raises several types for a bad body
            raise _Reject(400, f"the browser could not decrypt the body: {exc!r}") from exc
        try:
            payload = json.loads(plaintext)
        except ValueError as exc:
            raise _Reject(400, "decrypted body is not JSON") from exc
        location = f"{self.origin}/m/{next(self._ids)}"
        return Received(
            path=path,
            ttl=int(ttl_text),
            urgency=urgency,
            topic=topic,
            payload=payload,
            plaintext=plaintext,
            body_size=len(body),
            vapid_claims=claims,
            vapid_key=key,
            location=location,
            headers=headers,
        )

    def _check_vapid(self, authorization: str) -> tuple[dict[str, Any], str]:
        """RFC 8292: ``vapid t=<ES256 JWT>, k=<public key>``; returns (claims, k)."""
        match = _AUTH_RE.match(authorization.strip())
        if match is None:
            raise _Reject(401, "missing or non-vapid Authorization")
        params: dict[str, str] = {}
        for part in match["params"].split(","):
            name, sep, value = part.strip().partition("=")
            if sep:
                params[name.strip().lower()] = value.strip()
        token, key = params.get("t"), params.get("k")
        if not token or not key:
            raise _Reject(401, "Authorization lacks t= or k=")
        try:
            header = json.loads(b64url_decode(token.split(".", 1)[0]))
            claims = vapid_jwt.decode(token, key)
        except (InvalidSignature, ValueError, binascii.Error):
            raise _Reject(401, "VAPID JWT signature does not verify") from None
        if header.get("alg") != "ES256":
            raise _Reject(401, f"JWT alg {header.get('alg')!r}, not ES256")
        if claims.get("aud") != self.origin:
            raise _Reject(401, f"aud {claims.get('aud')!r} is not {self.origin!r}")
        exp, now = claims.get("exp"), time.time()
        if not isinstance(exp, int) or exp <= now or exp > now + MAX_JWT_LIFETIME_S:
            raise _Reject(401, f"exp {exp!r} not within 24 h from now")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub.startswith(("mailto:", "https:")):
            raise _Reject(401, f"sub {sub!r} is not mailto: or https:")
        return claims, key


class _Handler(BaseHTTPRequestHandler):
    owner: PushReceiver

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean; rejections are recorded on the receiver

    def do_POST(self) -> None:
        owner = self.owner
        path = self.path
        # email.message headers are case-insensitive, but a plain dict is what we record.
        headers = {name.lower(): value for name, value in self.headers.items()}
        length = int(headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""

        script = owner._next_script()
        if script is not None:
            if script.kind == "drop":
                owner._reject(path, 0, "scripted: connection dropped")
                self.close_connection = True
                return
            if script.kind == "stall":
                owner._reject(path, 0, "scripted: stalled")
                owner._release.wait(STALL_LIMIT_S)
                self.close_connection = True
                return
            owner._reject(path, script.status, "scripted")
            self._answer(script.status, script.headers, script.body)
            return

        if len(body) > MAX_BODY_BYTES:
            owner._reject(path, 413, f"body of {len(body)} bytes")
            self._answer(413, {}, "payload too large")
            return
        try:
            received = owner._accept(path, headers, body)
        except _Reject as rej:
            owner._reject(path, rej.status, rej.reason)
            self._answer(rej.status, {}, rej.reason)
            return
        with owner._lock:
            owner.received.append(received)
        self._answer(201, {"Location": received.location, "TTL": str(received.ttl)}, "")

    def _answer(self, status: int, headers: dict[str, str], body: str) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def flat_target(subscription: dict[str, Any]) -> dict[str, str]:
    """A subscription as ``Outbound.target`` for the web push channel."""
    return {
        "endpoint": subscription["endpoint"],
        "p256dh": subscription["keys"]["p256dh"],
        "auth": subscription["keys"]["auth"],
    }


def refused_endpoint() -> str:
    """An endpoint on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/push/nobody-home"
