"""One setting for every wait in the suite, so it holds on a loaded machine.

Tests never assert on time; they only give up waiting. Every such bound comes from here:
``WAIT`` (seconds) for "this should happen soon", ``scaled(s)`` for a bound of another size.
``RUNBELL_TEST_TIME_SCALE`` (default 1; CI and busy machines may set 3) multiplies all of
them at once, instead of each test guessing how slow a machine can be.
"""

from __future__ import annotations

import os

SCALE = max(float(os.environ.get("RUNBELL_TEST_TIME_SCALE", "1") or 1), 0.1)


def scaled(seconds: float) -> float:
    """``seconds`` times the suite's time scale."""
    return seconds * SCALE


WAIT = scaled(30.0)  # the default bound for anything that should happen "soon"
WAIT_MS = int(WAIT * 1000)  # the same, for Playwright's millisecond timeouts
