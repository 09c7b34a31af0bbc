"""The server's VAPID key pair (RFC 8292): what web push signs with, and what a browser
binds its subscription to (``applicationServerKey``).

Made once and kept sealed by ``runbell.flows.channel_config``; used by
``runbell.channels.webpush``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["VapidKeys", "b64url", "b64url_decode", "load_private_key", "public_key_b64"]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class VapidKeys:
    """The server's VAPID key pair (P-256).

    ``public_key`` is the base64url uncompressed point that browsers need as
    ``applicationServerKey`` when subscribing; a subscription is bound to it, so replacing
    the pair orphans every subscription (push services then answer 403).
    """

    private_pem: str = field(repr=False)  # never in a repr, so never in a log line
    public_key: str

    @classmethod
    def generate(cls) -> VapidKeys:
        """A new pair; the wiring seals and stores it on first start."""
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode("ascii")
        return cls(private_pem=pem, public_key=public_key_b64(key))

    @classmethod
    def from_pem(cls, pem: str) -> VapidKeys:
        """Load a stored private key; the public half is derived, so the two cannot drift."""
        return cls(private_pem=pem, public_key=public_key_b64(load_private_key(pem)))


def load_private_key(pem: str) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError):
        # The library's message is generic; never echo the input (it is a private key).
        raise ValueError("VAPID private key is not an unencrypted PEM key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("VAPID private key must be an EC P-256 key")
    return key


def public_key_b64(key: ec.EllipticCurvePrivateKey) -> str:
    point = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return b64url(point)
