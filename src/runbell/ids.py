"""Opaque, time-ordered identifiers (``ntf_01JD…``) and secret tokens."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower-case
# RFC 4648 base32 digit → Crockford digit: the C encoder does the 26 five-bit steps.
_FROM_RFC4648 = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())


def new_id(prefix: str) -> str:
    """A 26-character ULID-style id: 48 bits of milliseconds then 80 random bits.

    Time-ordered ids keep B-tree inserts local and make ``ORDER BY id`` mean "by creation".
    """
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    # 130 bits (26 digits) shifted to the top of 160 bits: base32's first 26 digits.
    digits = base64.b32encode((value << 30).to_bytes(20, "big"))[:26]
    return f"{prefix}_{digits.translate(_FROM_RFC4648).decode()}"


def new_token(prefix: str) -> str:
    """A bearer secret: shown once, stored only as :func:`token_hash`."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is enough: no dictionary to attack.
    return hashlib.sha256(token.encode()).hexdigest()
