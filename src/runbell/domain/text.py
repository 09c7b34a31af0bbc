"""Public free text: what a runtime or provider writes that Runbell shows to others.

A signal's ``reason`` (and a report's ``summary``, a progress ``message``…) is **public**:
it goes to the run's notifications and inbox, the event feed and every tenant webhook
endpoint. ``error`` is **private** and stays in authenticated run views. Public text is
kept to a short, safe, one-line string before it is stored, whatever door it came in by.
"""

from __future__ import annotations

import re
import unicodedata

#: How long a stored ``reason`` may be (characters, after cleaning).
REASON_MAX = 200

# Bidirectional embeddings, overrides and isolates: they can make a chat line or a push
# read backwards (a spoofing tool), and no reason needs them.
_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_SPACES = re.compile(r"\s+")
ELLIPSIS = "…"


def public_text(value: str | None, limit: int) -> str | None:
    """``value`` as one safe line of at most ``limit`` characters; None when nothing is left.

    Control characters (C0, DEL, C1, line and paragraph separators) become spaces, bidi
    controls are dropped, runs of whitespace become one space, the ends are trimmed. A
    longer text is cut at ``limit`` characters, the last of which is ``…``.

    >>> public_text("tests failed:\\n\\x1b[31m3 of 40\\x1b[0m  ", 200)
    'tests failed: [31m3 of 40 [0m'
    >>> public_text("a" * 300, 10)
    'aaaaaaaaa…'
    """
    if value is None:
        return None
    cleaned = "".join(
        " " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
        for ch in value
        if ch not in _BIDI
    )
    cleaned = _SPACES.sub(" ", cleaned).strip()
    if not cleaned:
        return None
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1].rstrip() + ELLIPSIS
    return cleaned
