"""Opaque, time-ordered identifiers (``ntf_01JD…``) and secret tokens."""

from __future__ import annotations

import hashlib
import os
import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower-case


def new_id(prefix: str) -> str:
    """A 26-character ULID-style id: 48 bits of milliseconds then 80 random bits.

    Time-ordered ids keep B-tree inserts local and make ``ORDER BY id`` mean "by creation".
    """
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def new_token(prefix: str) -> str:
    """A bearer secret: shown once, stored only as :func:`token_hash`."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is enough: no dictionary to attack.
    return hashlib.sha256(token.encode()).hexdigest()
