"""Ids: the base32 encoder gives the digits the per-digit loop gave (issue 21 cut the
loop; ids already stored must keep sorting by creation time against new ones)."""

from __future__ import annotations

import os
import time

from runbell import ids


def digits_by_loop(value: int) -> str:
    """The former encoder: 26 Crockford digits, least significant first, reversed."""
    chars = []
    for _ in range(26):
        chars.append(ids._ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def test_new_id_has_the_loops_digits_for_its_time_and_randomness(monkeypatch) -> None:
    for ms, rand in [(0, bytes(10)), (2**48 - 1, b"\xff" * 10), (1765000000123, os.urandom(10))]:
        monkeypatch.setattr(ids.time, "time", lambda ms=ms: ms / 1000 + 0.0004)
        monkeypatch.setattr(ids.os, "urandom", lambda n, rand=rand: rand)
        value = (ms << 80) | int.from_bytes(rand, "big")
        assert ids.new_id("ntf") == f"ntf_{digits_by_loop(value)}"


def test_new_ids_sort_by_creation_time() -> None:
    first = ids.new_id("ntf")
    time.sleep(0.002)
    second = ids.new_id("ntf")
    assert len(first) == len(second) == 30
    assert set(first[4:]) <= set(ids._ALPHABET)
    assert first < second
