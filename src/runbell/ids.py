"""Opaque, time-ordered identifiers (``ntf_01JD…``) and secret tokens."""

from __future__ import annotations

import hashlib
import os
import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower-case
# Every 10-bit value as its two digits: an id is 13 lookups. (base64.b32encode is pure
# Python in CPython 3.11, ~6 µs a call; a signal makes three ids.)
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)
_SHIFTS = tuple(range(120, -1, -10))


def new_id(prefix: str) -> str:
    """A 26-character ULID-style id: 48 bits of milliseconds then 80 random bits.

    Time-ordered ids keep B-tree inserts local and make ``ORDER BY id`` mean "by creation".
    """
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    # 130 bits, most significant first, ten at a time: 26 base32 digits.
    pairs = _PAIRS
    return prefix + "_" + "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])


def new_token(prefix: str) -> str:
    """A bearer secret: shown once, stored only as :func:`token_hash`."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is enough: no dictionary to attack.
    return hashlib.sha256(token.encode()).hexdigest()
