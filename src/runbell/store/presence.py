"""Who is watching the live UI right now (open SSE streams), per process.

Presence is a policy fact: a completion for an owner who is looking goes live + inbox
instead of interrupting them with a push.
"""

from __future__ import annotations

import threading
from collections import Counter


class Presence:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: Counter[tuple[str, str]] = Counter()

    def enter(self, tenant_id: str, user_id: str) -> None:
        with self._lock:
            self._count[(tenant_id, user_id)] += 1

    def leave(self, tenant_id: str, user_id: str) -> None:
        with self._lock:
            self._count[(tenant_id, user_id)] -= 1
            if self._count[(tenant_id, user_id)] <= 0:
                del self._count[(tenant_id, user_id)]

    def is_present(self, tenant_id: str, user_id: str) -> bool:
        with self._lock:
            return self._count.get((tenant_id, user_id), 0) > 0
