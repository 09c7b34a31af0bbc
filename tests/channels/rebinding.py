"""A DNS-rebinding attacker for tests: one name, two answers, and a trap listener.

:class:`TwoFacedDNS` replaces ``socket.getaddrinfo`` (the system resolver every library
ends up calling) for one name only: its first lookup answers ``first`` (an allow-listed
receiver), every later lookup answers ``second``. :class:`Trap` listens on ``second`` and
counts connections, so "the second answer was never used" is a fact observed at the peer.
Addresses are 127.0.0.x only.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from tests.timeouts import WAIT


class TwoFacedDNS:
    """``socket.getaddrinfo`` that answers ``name`` with ``first`` once, then ``second``."""

    def __init__(self, name: str, first: str, second: str) -> None:
        self.name = name
        self.first = first
        self.second = second
        self.lookups = 0
        self._real = socket.getaddrinfo
        self._lock = threading.Lock()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> TwoFacedDNS:
        monkeypatch.setattr(socket, "getaddrinfo", self)
        return self

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if isinstance(host, str) and host.lower().rstrip(".") == self.name:
            with self._lock:
                self.lookups += 1
                host = self.first if self.lookups == 1 else self.second
        return self._real(host, port, *args, **kwargs)


class Trap:
    """A TCP listener on ``address:port`` that counts connections and answers nothing."""

    def __init__(self, address: str, port: int) -> None:
        self.address = address
        self.port = port
        self.connections = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((address, port))
        self._sock.listen(16)
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="rebind-trap", daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def __enter__(self) -> Trap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT)
        self._sock.close()

    def settle(self) -> int:
        """Connections so far, after accepting any still queued in the backlog."""
        self._stop.set()
        self._thread.join(timeout=WAIT)
        self._sock.setblocking(False)
        while True:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, OSError):
                break
            self.connections += 1
            conn.close()
        return self.connections
