"""Loopback ports for the suite's child servers, never from the kernel's ephemeral range.

A port found free by binding port 0 comes from the ephemeral range, which the kernel also
hands to every outgoing connection on the machine: between our check and the child's own
bind, another xdist worker's HTTP client or PostgreSQL connection could take it as its
local port, and the child died with "address already in use" (a CI run failed on 37777).
Ports below the ephemeral range are only ever taken by an explicit bind, so each xdist
worker hands out its own slice of them, checked by a bind and never twice in one process.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

_LOW = 10_000
_SLICES = 16  # more than the suite's xdist workers; a 17th worker wraps onto slice 0
_lock = threading.Lock()
_handed: set[int] = set()
_next: int | None = None


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    return max(low, _LOW + _SLICES * 100)


def _slice() -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _SLICES if worker.isdigit() else 0
    width = (_ephemeral_low() - _LOW) // _SLICES
    start = _LOW + index * width
    return start, start + width


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port no one is bound to, outside the ephemeral range, not handed out
    before by this process."""
    global _next
    start, end = _slice()
    with _lock:
        if _next is None:
            # A second pytest run on the machine (another checkout) starts elsewhere.
            _next = random.randrange(start, end)
        for _ in range(end - start):
            port = _next
            _next = start if _next + 1 >= end else _next + 1
            if port not in _handed and _bindable(port):
                _handed.add(port)
                return port
    raise RuntimeError(f"no free loopback port in {start}..{end}")
